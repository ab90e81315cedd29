"""End-to-end tests: the real Airflow and Dagster services, the sandbox mail world and the
verification service as separate processes, started and stopped here (``make e2e``).

Every process is started with a marker in its environment; at the end of the session any process
still carrying it (a task runner that left its group, say) is killed, so a failed or
interrupted test leaves nothing running. PostgreSQL and Redis are the machine's own
(``LISTHYGIENE_TEST_POSTGRES``, ``LISTHYGIENE_TEST_REDIS``).
"""

import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import _admin_connection
from tests.e2e.airflow_stack import airflow_env
from tests.e2e.fleet import RCPT_PER_SESSION, WORLD, FleetWorld, write_list
from tests.e2e.outputs import read_run_folder
from tests.e2e.processes import BIN, REPO, Processes, sweep

MARKER_NAME = "LISTHYGIENE_E2E_RUN"


@pytest.fixture(scope="session")
def e2e_env() -> Iterator[dict[str, str]]:
    """The environment every service process starts from: this one, with the project's
    ``.venv/bin`` first on PATH (the commands of the docs) and the session's marker."""
    marker = secrets.token_hex(8)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        MARKER_NAME: marker,
    }
    yield env
    sweep(f"{MARKER_NAME}={marker}")


def _sandbox_up(processes: Processes, world: Path) -> dict[str, str]:
    """``listhygiene sandbox up WORLD`` on free ports; the settings it exports."""
    exports = processes.run(
        ["listhygiene", "sandbox", "up", str(world), "--dns-port", "0", "--smtp-port", "0"]
    )
    settings = dict(re.findall(r"^export (\w+)=(\S*)$", exports, flags=re.MULTILINE))
    assert "LISTHYGIENE_DNS_SERVER" in settings, exports
    return settings


@pytest.fixture(scope="session")
def mail_world(
    e2e_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The sample mail world as a background process (``listhygiene sandbox up``, as
    docs/sandbox.md tells a user), on free ports; returns the settings it exports."""
    state = tmp_path_factory.mktemp("sandbox")
    processes = Processes(state / "logs", {**e2e_env, "LISTHYGIENE_SANDBOX_DIR": str(state)})
    settings = _sandbox_up(processes, REPO / "sample_data" / "world.json")
    try:
        yield settings
    finally:
        processes.run(["listhygiene", "sandbox", "down"])


@pytest.fixture(scope="session")
def fleet_world(
    e2e_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FleetWorld]:
    """The fleet world (``tests/e2e/fleet_world.json``: hosts that count a client's connections)
    as a sandbox process of its own, and the list the fleet tests clean (tests/e2e/fleet.py)."""
    state = tmp_path_factory.mktemp("fleet-sandbox")
    processes = Processes(state / "logs", {**e2e_env, "LISTHYGIENE_SANDBOX_DIR": str(state)})
    settings = _sandbox_up(processes, WORLD)
    source = state / "fleet.csv"
    try:
        yield FleetWorld(settings, state, source, write_list(source))
    finally:
        processes.run(["listhygiene", "sandbox", "down"])


@pytest.fixture(scope="session")
def fleet_single(
    e2e_env: dict[str, str], fleet_world: FleetWorld, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """One ``listhygiene clean`` of the whole fleet list, one process and no shared limit: the
    folder a fleet's merged one must equal, and its summary."""
    out = tmp_path_factory.mktemp("fleet-single") / "single"
    env = {k: v for k, v in e2e_env.items() if k != "LISTHYGIENE_SHARED_LIMITS"}
    processes = Processes(out.parent / "logs", {**env, **fleet_world.settings})
    printed = processes.run(
        ["listhygiene", "clean", str(fleet_world.source), "--out", str(out), "--json"],
        LISTHYGIENE_RCPT_PER_SESSION=str(RCPT_PER_SESSION),
    )
    summary = read_run_folder(out)
    assert summary == json.loads(printed)
    assert summary["rows"]["total"] == fleet_world.rows
    assert summary["politeness"]["limits_met"] == 0, summary["politeness"]
    return out, summary


@pytest.fixture(scope="session")
def airflow_database(
    e2e_env: dict[str, str],
    new_pg_database: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], str]]:
    """Airflow metadata databases: ``airflow db migrate`` runs once, into a database that every
    deployment of the session then gets a copy of (``CREATE DATABASE ... TEMPLATE``), the same
    schema a migrate of its own would give, without its minute on a loaded machine."""
    home = tmp_path_factory.mktemp("airflow-migrate")
    template = new_pg_database()
    processes = Processes(home / "logs", {**e2e_env, **airflow_env(home / "home", template)})
    processes.run(["airflow", "db", "migrate"], timeout=300)
    admin = _admin_connection()
    copies: list[str] = []

    def create() -> str:
        name = f"lh_airflow_{secrets.token_hex(6)}"
        source = make_url(template).database
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        copies.append(name)
        return make_url(template).set(database=name).render_as_string(hide_password=False)

    try:
        yield create
    finally:
        for name in copies:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

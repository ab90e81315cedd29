"""End-to-end tests: the real Airflow and Dagster services, the sandbox mail world and the
verification service as separate processes, started and stopped here (``make e2e``).

Every process is started with a marker in its environment; at the end of the session any process
still carrying it (a task runner that left its group, say) is killed, so a failed or
interrupted test leaves nothing running. PostgreSQL and Redis are the machine's own
(``LISTHYGIENE_TEST_POSTGRES``, ``LISTHYGIENE_TEST_REDIS``).
"""

import os
import re
import secrets
from collections.abc import Iterator

import pytest

from tests.e2e.processes import BIN, REPO, Processes, sweep

REDIS_URL = os.environ.get("LISTHYGIENE_TEST_REDIS", "redis://127.0.0.1:6379")
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


@pytest.fixture(scope="session")
def mail_world(
    e2e_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The sample mail world as a background process (``listhygiene sandbox up``, as
    docs/sandbox.md tells a user), on free ports; returns the settings it exports."""
    state = tmp_path_factory.mktemp("sandbox")
    processes = Processes(state / "logs", {**e2e_env, "LISTHYGIENE_SANDBOX_DIR": str(state)})
    exports = processes.run(
        [
            "listhygiene",
            "sandbox",
            "up",
            str(REPO / "sample_data" / "world.json"),
            "--dns-port",
            "0",
            "--smtp-port",
            "0",
        ]
    )
    settings = dict(re.findall(r"^export (\w+)=(\S*)$", exports, flags=re.MULTILINE))
    assert "LISTHYGIENE_DNS_SERVER" in settings, exports
    try:
        yield settings
    finally:
        processes.run(["listhygiene", "sandbox", "down"])

"""What every test package shares: real PostgreSQL databases, the sandbox mail world, and no
verdict store by default.

Every ``clean`` reuses verdicts from the user's verdict store unless told otherwise; the tests
verify against many sandbox worlds in which one address has different verdicts, so a shared store
would let one test's verdicts stand in another's. ``LISTHYGIENE_VERDICTS=none`` is set for the
whole session (subprocesses inherit it); the verdict store's own tests name their stores. So is
``LISTHYGIENE_QUALITY_WORKER=thread``: GX imported once per process, not in a child per run.

PostgreSQL is ``postgresql://postgres@127.0.0.1:5432/test`` (trust authentication) unless
``LISTHYGIENE_TEST_POSTGRES`` names another; the tests create uniquely named databases
``lh_test_<random>`` there and drop them at the end of the session. Without a reachable server,
the PostgreSQL cases are skipped, with the reason in the summary.

``sandbox`` is the one mail world fixture: the sample world (``sample_data/world.json``, the
plugin's session-wide ``mail_sandbox``), or the world a test module names in ``SANDBOX_WORLD``,
started for that module alone. A test that needs a world of its own (greylisting remembers whom
it has seen) takes the plugin's ``make_mail_sandbox``.

``sandbox_settings(sandbox, **changes)`` are the engine settings the tests verify with against a
sandbox, ``write_contacts(folder, rows)`` writes the contact list a test cleans.
"""

import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    import subprocess

    import psycopg

    from listhygiene.engine.settings import EngineSettings
    from listhygiene.sandbox import Sandbox


def pytest_configure(config: pytest.Config) -> None:
    os.environ["LISTHYGIENE_VERDICTS"] = "none"
    # GX imported once per test process, not in a fresh child per clean() (docs/pipeline.md)
    os.environ.setdefault("LISTHYGIENE_QUALITY_WORKER", "thread")


REDIS_URL = os.environ.get("LISTHYGIENE_TEST_REDIS", "redis://127.0.0.1:6379")
ADMIN_URL = os.environ.get("LISTHYGIENE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _admin_connection() -> "psycopg.Connection[Any]":
    import psycopg

    url = make_url(ADMIN_URL)
    return psycopg.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        dbname=url.database,
        autocommit=True,
        connect_timeout=3,
    )


@pytest.fixture(scope="session")
def new_pg_database() -> Iterator[Callable[[], str]]:
    """Creates empty PostgreSQL databases on demand; all are dropped after the session."""
    import psycopg

    try:
        admin = _admin_connection()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {ADMIN_URL}: {exc}")
    created: list[str] = []

    def create() -> str:
        name = f"lh_test_{secrets.token_hex(6)}"
        admin.execute(f'CREATE DATABASE "{name}"')
        created.append(name)
        return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    yield create
    for name in created:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session")
def pg_url(new_pg_database: Callable[[], str]) -> str:
    """One database shared by the session's stores (each test makes its own keys)."""
    return new_pg_database()


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest) -> "Iterator[Sandbox]":
    """The module's ``SANDBOX_WORLD`` (a world file, mapping or ``World``), running for the
    module's tests; without one, the sample world shared by the whole session."""
    world = getattr(request.module, "SANDBOX_WORLD", None)
    if world is None:
        yield request.getfixturevalue("mail_sandbox")
        return
    from listhygiene.sandbox import Sandbox

    with Sandbox(world) as running:
        yield running


@pytest.fixture(scope="session")
def gx_imported() -> None:
    """GX imported before the module's tests start: with ``LISTHYGIENE_QUALITY_WORKER=thread``
    the first ``clean()`` of a process imports it in a thread that holds the GIL for seconds,
    which would stall a service the test runs in this process (a client time-out of 1 s)."""
    from listhygiene.pipeline.quality import gx_missing

    if gx_missing() is None:
        import great_expectations  # noqa: F401


#: One domain whose mail host holds every connection two minutes before its banner: a probe in
#: progress for as long as a test needs (cancelling a run, in Airflow and Dagster alike).
TARPIT: dict[str, Any] = {
    "domains": {
        "slow.test": {"mx": [{"preference": 10, "host": "mx.slow.test"}], "mailboxes": ["ann"]}
    },
    "hosts": {"mx.slow.test": {"banner_delay_ms": 120_000}},
}


@pytest.fixture(scope="module")
def tarpit() -> "Iterator[Sandbox]":
    """The :data:`TARPIT` world, running for the module's tests."""
    from listhygiene.sandbox import Sandbox

    with Sandbox(TARPIT) as running:
        yield running


#: What the suite's engines run with against a sandbox unless a test says otherwise: a fixed EHLO
#: name, short time limits (every host is on loopback) and no retries of temporary refusals.
_SANDBOX_SETTINGS: dict[str, Any] = {
    "helo": "verifier.test",
    "dns_timeout": 1.0,
    "smtp_timeout": 2.0,
    "retry_delays": (),
}


def sandbox_settings(sandbox: "Sandbox", **changes: Any) -> "EngineSettings":
    """Engine settings against ``sandbox`` (``Sandbox.engine_settings``) with the suite's usual
    EHLO name, time limits and retries, ``changes`` on top: a module states only how its tests
    differ."""
    return sandbox.engine_settings(**(_SANDBOX_SETTINGS | changes))


def engine_defaults(*names: str) -> dict[str, Any]:
    """The engine's own defaults of ``names``, for the tests that ran with them instead of
    :func:`sandbox_settings`' (say ``sandbox_settings(s, **engine_defaults("dns_timeout"))``)."""
    from listhygiene.engine.settings import EngineSettings

    return {name: EngineSettings.model_fields[name].default for name in names}


def write_contacts(
    folder: Path,
    rows: str | Iterable[Sequence[object]],
    *,
    header: Sequence[str] = ("id", "email"),
    name: str = "contacts.csv",
) -> Path:
    """A contact list ``folder / name``: ``rows`` is the CSV's whole text, or its records under
    ``header``, cells joined by commas as they are (no quoting: a test that needs quotes gives
    the text). Always UTF-8: the same bytes whatever the machine's locale."""
    if isinstance(rows, str):
        text = rows
    else:
        lines = [header, *rows]
        text = "".join(",".join(str(cell) for cell in line) + "\n" for line in lines)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def empty_redis(db: int) -> str:
    """The URL of the machine's Redis database ``db``, emptied: each test module that shares a
    host state through Redis has a database of its own (``make test`` runs two modules at once,
    the sandboxes' host addresses are the same in every module, and what a run learnt of a host
    lives an hour). Databases in use: 6, 10, 11, 12, 13, 14 (8 and 9: the e2e runs and the
    fleet benchmark)."""
    import redis

    url = f"{REDIS_URL}/{db}"
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


@pytest.fixture
def start_socks_proxy() -> "Iterator[Callable[..., tuple[str, subprocess.Popen[bytes]]]]":
    """Starts real SOCKS5 proxies (pproxy) on loopback: ``start(source=None)`` returns one's URL
    and process; with ``source`` (127.0.0.x) its sessions leave from that address, the one a
    mail host sees. All are killed after the test."""
    import socket
    import subprocess
    import sys
    import time

    started: list[subprocess.Popen[bytes]] = []

    def start(source: str | None = None) -> tuple[str, subprocess.Popen[bytes]]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        listen = f"socks5://127.0.0.1:{port}" + (f"/@{source}" if source else "")
        # pproxy switches to uvloop when it can import it (the airflow and dagster extras
        # install it), then fails to start: "There is no current event loop". Hide uvloop.
        launch = (
            "import runpy, sys; sys.modules['uvloop'] = None; "
            f"sys.argv = ['pproxy', '-l', {listen!r}]; "
            "runpy.run_module('pproxy', run_name='__main__')"
        )
        proxy = subprocess.Popen(
            [sys.executable, "-c", launch], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        started.append(proxy)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        return f"socks5://127.0.0.1:{port}", proxy

    yield start
    for proxy in started:
        proxy.kill()  # SIGKILL: pproxy may linger on SIGTERM while it drains its connections
        proxy.wait(5)

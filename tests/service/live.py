"""What the service's tests share: a real HTTP server (uvicorn in a thread on a free loopback
port), a real ``listhygiene serve`` process (:class:`Server`), an engine on the sandbox, a world
of slow mail hosts for the fault tests, and the two forms' authentication headers."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import select

from listhygiene.engine import Engine
from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from listhygiene.service.store.models import JobResult
from tests.conftest import sandbox_settings

#: The slow world's domains and mailboxes (``SLOW_WORLD``).
SLOW_DOMAINS = [f"slow{i}.test" for i in range(16)]
SLOW_PEOPLE = ("ann", "bob")
#: Slow hosts: with two SMTP sessions at a time (``Server``'s default ``--concurrency 2``) a job
#: of its addresses takes several seconds, long enough to kill a server in the middle of it.
SLOW_WORLD = {
    "description": "slow mail hosts for the fault tests",
    "domains": {
        domain: {
            "mx": [{"preference": 10, "host": f"mx.{domain}"}],
            "mailboxes": list(SLOW_PEOPLE),
        }
        for domain in SLOW_DOMAINS
    },
    "hosts": {f"mx.{domain}": {"latency_ms": 150} for domain in SLOW_DOMAINS},
}
SLOW_ADDRESSES = [f"{person}@{domain}" for domain in SLOW_DOMAINS for person in SLOW_PEOPLE]


class LiveServer:
    """uvicorn in a background thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class Server:
    """One ``listhygiene serve`` process on ``db``, its engine on ``sandbox``; its output (the
    access log on stdout, the rest on stderr) goes to ``log`` (a file, so that a chatty server
    never blocks on a full pipe)."""

    def __init__(
        self,
        db: str,
        sandbox: Sandbox,
        *,
        args: Sequence[str] = ("--stale-after", "1", "--concurrency", "2"),
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.port = free_port()
        environment = {
            **os.environ,
            **sandbox.engine_environment(),
            "LISTHYGIENE_HELO": "verifier.test",
            "LISTHYGIENE_SMTP_TIMEOUT": "5",
            **(env or {}),
        }
        command = [
            *(sys.executable, "-m", "listhygiene.cli", "serve"),
            *("--db", db, "--port", str(self.port), *args),
        ]
        self.log = log
        stderr: Any = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(command, env=environment, stdout=stderr, stderr=stderr)
        finally:
            if log is not None:
                stderr.close()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base = f"{self.root}/a/v1"
        deadline = time.monotonic() + 60  # a loaded machine starts it slowly
        while True:
            try:
                httpx.get(f"{self.base}/credits", timeout=1)
                return
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"server did not start: {self.stderr()}") from None
                time.sleep(0.1)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stderr(self) -> str:
        return self.log.read_text() if self.log is not None and self.log.exists() else ""

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        # A graceful stop lets the job runner finish its step; on a loaded machine two servers
        # on one PostgreSQL took more than 10 s (a hang still fails, at 60 s).
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


def probed(sandbox: Sandbox) -> list[str]:
    """The real addresses the slow world's hosts were asked about (not the catch-all probes)."""
    seen = []
    for domain in SLOW_DOMAINS:
        seen += [r for r in sandbox.stats(f"mx.{domain}").recipients if not r.startswith("lh-")]
    return seen


def saved(db: str) -> set[str]:
    """The addresses whose results the store at ``db`` holds."""
    with Store(db) as store, store.transaction() as conn:
        return set(conn.execute(select(JobResult.address)).scalars())


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (Linux's /proc), e.g. the ``serve`` of a job runner."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def engine_for(sandbox: Sandbox, **changes: Any) -> Engine:
    """An engine that verifies against ``sandbox``, with short time limits for tests and one
    retry of a temporary refusal."""
    return Engine(sandbox_settings(sandbox, **({"retry_delays": (2,)} | changes)))


def a(key: str) -> dict[str, str]:
    """Form A's authentication header."""
    return {"LISTHYGIENE-API-KEY": key}


def b(key: str) -> dict[str, str]:
    """Form B's authentication header."""
    return {"Authorization": f"Bearer {key}"}

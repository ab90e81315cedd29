"""What the service's tests share: a real HTTP server (uvicorn in a thread on a free loopback
port), an engine on the sandbox, and the two forms' authentication headers."""

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from listhygiene.engine import Engine, EngineSettings
from listhygiene.sandbox import Sandbox


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


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (Linux's /proc), e.g. the ``serve`` of a job runner."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def engine_for(sandbox: Sandbox, **changes: Any) -> Engine:
    """An engine that verifies against ``sandbox``, with short time limits for tests."""
    settings: dict[str, Any] = {
        "dns_server": sandbox.dns_server,
        "smtp_port": sandbox.smtp_port,
        "allow_private_mx": True,
        "helo": "verifier.test",
        "smtp_timeout": 2,
        "dns_timeout": 1,
        "retry_delays": (2,),
    }
    settings.update(changes)
    return Engine(EngineSettings(**settings))


def a(key: str) -> dict[str, str]:
    """Form A's authentication header."""
    return {"LISTHYGIENE-API-KEY": key}


def b(key: str) -> dict[str, str]:
    """Form B's authentication header."""
    return {"Authorization": f"Bearer {key}"}

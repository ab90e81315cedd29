"""``listhygiene sandbox up`` / ``down``: a world in a background process, for shells and demos.

``up`` validates the world, then starts a detached child that binds every server and reports
back over a pipe: "ready" with its endpoints, or the error (a port in use, say). Only then does
``up`` return, so a failure leaves no stray process and success means the world answers. The
child records itself in a state file; ``down`` stops it with SIGTERM (SIGKILL after a grace
period) and removes the file. A lock keeps two ``up`` from racing. The child also keeps
``defences.json`` beside the state file: what its hosts said to clients that went too far, for
benchmarks in other processes (docs/sandbox.md, "What the hosts said").
"""

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from listhygiene.sandbox.servers import Endpoints, SandboxServers
from listhygiene.sandbox.world import load_world

__all__ = ["AlreadyRunningError", "DaemonError", "NotRunningError", "SandboxState", "down", "up"]

_READY = "ready "
_FAILED = "failed "
_START_TIMEOUT = 60.0
_STOP_GRACE = 10.0
#: At most this often (seconds) the daemon rewrites defences.json, and only when it changed.
_REPORT_EVERY = 1.0
_MARKER = "listhygiene.sandbox.daemon"


class DaemonError(RuntimeError):
    """The background sandbox could not be started or stopped."""


class AlreadyRunningError(DaemonError):
    pass


class NotRunningError(DaemonError):
    pass


@dataclass(frozen=True)
class SandboxState:
    """What ``up`` records about a running background sandbox."""

    pid: int
    world: str
    dns_host: str
    dns_port: int
    smtp_port: int
    hosts: dict[str, str]
    log: str
    started_at: float

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(self.dns_host, self.dns_port, self.smtp_port, self.hosts)


def state_dir() -> Path:
    """Where the state file lives: ``$LISTHYGIENE_SANDBOX_DIR`` or a per-user temp folder."""
    configured = os.environ.get("LISTHYGIENE_SANDBOX_DIR")
    base = (
        Path(configured)
        if configured
        else Path(tempfile.gettempdir()) / (f"listhygiene-sandbox-{os.getuid()}")
    )
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def _state_file() -> Path:
    return state_dir() / "state.json"


def defences_file() -> Path:
    """Where the background sandbox keeps its hosts' defence report."""
    return state_dir() / "defences.json"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(state_dir() / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    """Is ``pid`` a running sandbox daemon (not a recycled pid of something else)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            text = cmdline.read_bytes()
        except OSError:
            return False
        if not text:  # a zombie: exited, not yet reaped
            return False
        return _MARKER.encode() in text
    return True


def read_state() -> SandboxState | None:
    """The running sandbox, or None. A state file left by a dead process is removed."""
    path = _state_file()
    try:
        state = SandboxState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        path.unlink(missing_ok=True)
        return None
    if not _alive(state.pid):
        path.unlink(missing_ok=True)
        return None
    return state


def up(
    world_path: str | Path,
    *,
    dns_host: str = "127.0.0.1",
    dns_port: int = 5300,
    smtp_port: int = 2525,
) -> SandboxState:
    """Start ``world_path`` in the background; return once every server listens."""
    world_path = Path(world_path).resolve()
    load_world(world_path)  # a broken world fails here, before any process starts
    with _locked():
        running = read_state()
        if running is not None:
            raise AlreadyRunningError(
                f"a sandbox is already running (pid {running.pid}, world {running.world}); "
                "stop it first with: listhygiene sandbox down"
            )
        log_path = state_dir() / "sandbox.log"
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    _MARKER,
                    str(world_path),
                    dns_host,
                    str(dns_port),
                    str(smtp_port),
                    str(log_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                text=True,
            )
        assert child.stdout is not None
        line = _read_line(child, _START_TIMEOUT)
        child.stdout.close()
        if line.startswith(_READY):
            return SandboxState(**json.loads(line[len(_READY) :]))
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait()
        if line.startswith(_FAILED):
            raise DaemonError(line[len(_FAILED) :].strip())
        raise DaemonError(f"the sandbox did not start; see its log: {log_path}")


def _read_line(child: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert child.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return child.stdout.readline()


def down() -> SandboxState:
    """Stop the background sandbox; NotRunningError when there is none."""
    with _locked():
        state = read_state()
        if state is None:
            raise NotRunningError("no sandbox is running (nothing to stop)")
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE
        while _alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(state.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(state.pid, signal.SIGKILL)
        _state_file().unlink(missing_ok=True)
        return state


# -- the background process ----------------------------------------------------------------------


class _DefenceFile:
    """defences.json: the servers' ``defence_report``, replaced atomically when it changed."""

    def __init__(self, servers: SandboxServers, path: Path) -> None:
        self.servers = servers
        self.path = path
        self._written: str | None = None

    def write(self) -> None:
        text = json.dumps(self.servers.defence_report())
        if text == self._written:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(self.path)
        self._written = text

    async def keep_written(self) -> None:
        """Rewrite the file at most once every ``_REPORT_EVERY`` seconds, while it changes."""
        while True:
            await asyncio.sleep(_REPORT_EVERY)
            with contextlib.suppress(OSError):  # a full disk must not stop the servers
                self.write()


async def _serve(world: str, dns_host: str, dns_port: int, smtp_port: int, log: str) -> int:
    servers = SandboxServers(load_world(world))
    try:
        endpoints = await servers.start(dns_host=dns_host, dns_port=dns_port, smtp_port=smtp_port)
    except OSError as exc:
        message = exc.strerror if exc.strerror else str(exc)
        print(_FAILED + message, flush=True)
        return 1
    state = SandboxState(
        pid=os.getpid(), world=world, log=log, started_at=time.time(), **asdict(endpoints)
    )
    path = _state_file()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state)))
    tmp.replace(path)
    defences = _DefenceFile(servers, defences_file())
    defences.write()  # a fresh (empty) report before ``up`` returns, not the last run's
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(_READY + json.dumps(asdict(state)), flush=True)
    sys.stdout.close()
    reporter = asyncio.create_task(defences.keep_written())
    try:
        await stop.wait()
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        await servers.stop()
        with contextlib.suppress(OSError):
            defences.write()  # the last word, once the servers have stopped
        with contextlib.suppress(OSError, ValueError):
            if SandboxState(**json.loads(path.read_text())).pid == os.getpid():
                path.unlink()
    return 0


def run_foreground(
    world: str | Path,
    *,
    dns_host: str,
    dns_port: int,
    smtp_port: int,
    on_ready: Callable[[Endpoints], None],
) -> None:
    """Serve in this process until SIGINT or SIGTERM (``sandbox up --foreground``)."""
    servers = SandboxServers(load_world(world))

    async def serve() -> None:
        endpoints = await servers.start(dns_host=dns_host, dns_port=dns_port, smtp_port=smtp_port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        on_ready(endpoints)
        try:
            await stop.wait()
        finally:
            await servers.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    _world, _host, _dns, _smtp, _log = sys.argv[1:6]
    sys.exit(asyncio.run(_serve(_world, _host, int(_dns), int(_smtp), _log)))

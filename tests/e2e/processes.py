"""Real service processes for the end-to-end tests: started in their own process groups, logged
to files, and always stopped (the whole group, SIGTERM then SIGKILL) when the test ends, passed
or failed, so nothing is left running.
"""

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Processes:
    """The processes one test (or one fixture) started, each with a log file in ``logs``."""

    def __init__(self, logs: Path, env: Mapping[str, str]) -> None:
        self.logs = logs
        self.env = dict(env)
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: Sequence[str], **env: str) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new session (its own process group) under ``name``."""
        if name in self.running and self.running[name].poll() is None:
            raise RuntimeError(f"{name} is already running")
        log = (self.logs / f"{name}.log").open("ab")
        log.write(f"\n$ {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            list(argv),
            env={**self.env, **env},
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.running[name] = process
        return process

    def run(self, argv: Sequence[str], *, timeout: float = 180, **env: str) -> str:
        """Run a command to its end (same environment); its stdout, or an error with its
        output."""
        done = subprocess.run(
            list(argv),
            env={**self.env, **env},
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill one process's group at once (a crash, as a test wants it)."""
        process = self.running[name]
        _signal_group(process, sig)
        process.wait(timeout=30)

    def stop(self, name: str, grace: float = 5) -> None:
        process = self.running.pop(name)
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        # The group may hold children (task runners, workers) that outlived their parent.
        _signal_group(process, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):
            self.stop(name)

    def check_alive(self) -> None:
        """Fail at once, with its log, when a service process has died."""
        for name, process in self.running.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 60) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def tails(self) -> str:
        return "\n".join(f"--- {name} ---\n{self.tail(name)}" for name in self.running)

    def wait_for(
        self, what: str, probe: Callable[[], T | None], *, timeout: float = 180, every: float = 1
    ) -> T:
        """Poll ``probe`` until it returns something other than None or False; on timeout
        (or a dead service) fail with the services' logs."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            value = probe()
            if value is not None and value is not False:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.tails()}")
            time.sleep(every)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def sweep(marker: str) -> list[int]:
    """SIGKILL every process whose environment carries ``marker`` (the tests' own descendants
    that left their process group, e.g. a worker's children); returns their ids."""
    needle = marker.encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed

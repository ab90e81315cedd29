"""SQLite writers of several processes queue on the lock file beside the database (issue 15
item 6; ``db/engine.py``, docs/service.md "Fairness").

The processes are real: children running ``transaction(engine, write=True)`` on one file with
no busy timeout at all, so a write that met another process's in SQLite's busy handler instead
of queueing would fail with "database is locked" at once. Nothing here asserts a duration: the
waiting writer is seen blocked in the kernel's lock table (``/proc/locks``), and what it reads
shows that its transaction began after the holder's commit.
"""

import fcntl
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from listhygiene.db import engine as db_engine
from listhygiene.db.engine import WRITE_LOCK_SUFFIX, make_engine, transaction

#: How long a test waits for a child to reach a step before it fails (never asserted as a time).
PATIENCE = 60

_CHILD = textwrap.dedent(
    """
    import sys
    from sqlalchemy.exc import OperationalError
    from listhygiene.db.engine import make_engine, transaction

    path, role, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    engine = make_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "loop":
        errors = 0
        for _ in range(rounds):
            try:
                with transaction(engine, write=True) as conn:
                    n = conn.exec_driver_sql("SELECT n FROM counter").scalar_one()
                    conn.exec_driver_sql("UPDATE counter SET n = ?", (n + 1,))
            except OperationalError as exc:
                errors += 1
                print("error", str(exc.orig), flush=True)
        print("errors", errors, flush=True)
    elif role == "holder":
        with transaction(engine, write=True) as conn:
            conn.exec_driver_sql("UPDATE counter SET n = 1")
            print("holding", flush=True)
            sys.stdin.readline()
        print("committed", flush=True)
    elif role == "waiter":
        try:
            with transaction(engine, write=True) as conn:
                n = conn.exec_driver_sql("SELECT n FROM counter").scalar_one()
                conn.exec_driver_sql("UPDATE counter SET n = ?", (n + 10,))
            print("began-after", n, flush=True)
        except OperationalError as exc:
            print("error", str(exc.orig), flush=True)
    engine.dispose()
    """
)


def _database(tmp_path: Path) -> Path:
    path = tmp_path / "queue.db"
    engine = make_engine(f"sqlite:///{path}")
    with transaction(engine, write=True) as conn:
        conn.exec_driver_sql("CREATE TABLE counter (n INTEGER NOT NULL)")
        conn.exec_driver_sql("INSERT INTO counter VALUES (0)")
    engine.dispose()
    return path


def _counter(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT n FROM counter").fetchone()[0])


class _Child:
    """A child process running ``_CHILD`` in one role, talked to by lines."""

    def __init__(self, path: Path, role: str, rounds: int = 0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path), role, str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.line() == "ready"

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def finish(self) -> list[str]:
        out, _ = self.process.communicate(timeout=PATIENCE)
        assert self.process.returncode == 0
        return out.split("\n")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def children() -> Iterator[list[_Child]]:
    started: list[_Child] = []
    yield started
    for child in started:
        child.kill()


def _blocked_on(lock_file: Path) -> bool:
    """Whether a process waits in ``flock`` for ``lock_file`` (a ``->`` line of /proc/locks)."""
    inode = f":{lock_file.stat().st_ino} "
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and "FLOCK" in line and inode in line for line in lines)


def test_two_processes_writing_in_a_loop_never_meet_a_locked_database(
    tmp_path: Path, children: list[_Child]
) -> None:
    path = _database(tmp_path)
    rounds = 400
    children.extend(_Child(path, "loop", rounds) for _ in range(2))
    for child in children:
        child.go()
    outputs = [child.finish() for child in children]
    assert [out for out in outputs if "errors 0" not in out] == []
    assert _counter(path) == 2 * rounds  # every read-modify-write saw the other's commits
    assert (tmp_path / f"queue.db{WRITE_LOCK_SUFFIX}").exists()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_waiting_writer_begins_after_the_holders_commit(
    tmp_path: Path, children: list[_Child]
) -> None:
    path = _database(tmp_path)
    lock_file = tmp_path / f"queue.db{WRITE_LOCK_SUFFIX}"
    holder = _Child(path, "holder")
    children.append(holder)
    holder.go()
    assert holder.line() == "holding"
    waiter = _Child(path, "waiter")
    children.append(waiter)
    waiter.go()
    deadline = time.monotonic() + PATIENCE
    while not _blocked_on(lock_file):
        assert waiter.process.poll() is None, f"the waiter did not wait: {waiter.finish()}"
        assert time.monotonic() < deadline, "the waiter never queued on the lock file"
        time.sleep(0.01)
    holder.go()
    assert holder.line() == "committed"
    # It read the holder's committed 1: its transaction began after that commit.
    assert waiter.finish()[0] == "began-after 1"
    assert _counter(path) == 11


def test_readers_do_not_wait_for_another_processs_writer(tmp_path: Path) -> None:
    path = _database(tmp_path)
    other = _Holder(path)
    engine = make_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with transaction(engine) as conn:
            assert conn.exec_driver_sql("SELECT n FROM counter").scalar_one() == 0
    finally:
        engine.dispose()
        other.release()


def test_a_wait_past_the_bound_is_left_to_sqlites_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose lock file another process holds too long goes on to ``BEGIN IMMEDIATE``:
    with no busy timeout, the usual "database is locked" (which the job worker retries), not a
    wait without end; and the lock file is let go once the holder is done."""
    path = _database(tmp_path)
    other = _Holder(path)
    monkeypatch.setattr(db_engine, "WRITE_LOCK_TIMEOUT", 0.2)
    engine = make_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with pytest.raises(OperationalError, match="locked"), transaction(engine, write=True):
            pass
        other.release()
        with transaction(engine, write=True) as conn:
            conn.exec_driver_sql("UPDATE counter SET n = 5")
    finally:
        engine.dispose()
        other.release()
    assert _counter(path) == 5
    # the thread that went on waiting let go of the lock file when it got it
    probe = os.open(tmp_path / f"queue.db{WRITE_LOCK_SUFFIX}", os.O_RDWR)
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the lock file stayed held"
                time.sleep(0.01)
    finally:
        os.close(probe)


class _Holder:
    """Another writer: the lock file's lock (its own open file) and SQLite's write lock."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(f"{path}{WRITE_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("UPDATE counter SET n = 99")
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.conn.rollback()
        self.conn.close()
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def test_the_lock_trace_names_each_write_transactions_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``LISTHYGIENE_SQLITE_LOCK_TRACE`` the process appends one line per write transaction
    (what ``benchmarks/fairness.py --lock-trace`` summarises); reads add none."""
    path = _database(tmp_path)
    folder = tmp_path / "trace"
    folder.mkdir()
    monkeypatch.setenv(db_engine.LOCK_TRACE_VARIABLE, str(folder))
    engine = make_engine(f"sqlite:///{path}")

    def save_something() -> None:
        with transaction(engine, write=True) as conn:
            conn.exec_driver_sql("UPDATE counter SET n = n + 1")

    try:
        save_something()
        with transaction(engine) as conn:
            conn.exec_driver_sql("SELECT n FROM counter").scalar_one()
    finally:
        engine.dispose()
    lines = (folder / f"{os.getpid()}.txt").read_text().splitlines()
    assert len(lines) == 1
    _, pid, _, caller, wait_ms, hold_ms = lines[0].split()
    assert (int(pid), caller) == (os.getpid(), "save_something")
    assert min(float(wait_ms), float(hold_ms)) >= 0  # numbers, in milliseconds

"""An upload's memory given back when it is answered (issue 28, item 5), on a real
``listhygiene serve``.

Reading an upload starts processes (a forkserver with the readers imported, multiprocessing's
resource tracker, the parse child): once the upload is answered they all end, and the server's
process tree (the server and every process it started) goes back to the memory it had at rest:
the same processes, with the same RSS give or take the allocator's slack. Polled with a generous
deadline: what is asserted is that they end and give it back, not how fast.
"""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from tests.service.live import Server, a
from tests.service.upload_files import hostile_xlsx

#: Seconds to wait for the tree to be back at rest (the forkserver is kept a few seconds after
#: the last parse, parse_process.FORKSERVER_LINGER; a loaded machine is slower).
DEADLINE = 90.0
#: MiB the tree may hold over its rest after a refused upload (the server's allocator's slack;
#: the forkserver alone is over 100 MiB).
SLACK_MIB = 32


def descendants(pid: int) -> set[int]:
    """Every process ``pid`` started, and theirs."""
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.update(int(child) for child in (task / "children").read_text().split())
    except OSError:
        return found
    for child in list(found):
        found |= descendants(child)
    return found


def tree_rss(pid: int) -> int:
    """The RSS of ``pid`` and of its descendants, in MiB."""
    total = 0
    for process in {pid, *descendants(pid)}:
        try:
            text = Path(f"/proc/{process}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total // 1024


def settled(pid: int, processes: set[int], deadline: float) -> set[int]:
    """The descendants of ``pid`` once they are ``processes`` again, or at ``deadline``."""
    while True:
        now = descendants(pid)
        if now == processes or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("upload-memory")
    db = f"sqlite:///{folder / 'store.db'}"
    with Store(db) as store:
        key = store.create_key("k", 1_000_000)[0]
    server = Server(db, sandbox, args=(), log=folder / "server.log")
    try:
        yield server, key, folder
    finally:
        server.stop()


def post(server: Server, key: str, name: str, content: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.base}/verify/file", headers=a(key), files={"file": (name, content)}, timeout=300
    )


def test_an_uploads_processes_and_memory_are_given_back(served: Any) -> None:
    server, key, folder = served
    pid = server.process.pid
    # At rest: the server and its job runner, nothing for uploads.
    deadline = time.monotonic() + 30
    while not (at_rest := descendants(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(at_rest) == 1, at_rest  # the job runner

    # A first upload, accepted: what it started ends once it is answered.
    warm = post(server, key, "warm.csv", b"email\nann@defunct-startup.test\n")
    assert warm.status_code == 200, warm.text
    left = settled(pid, at_rest, time.monotonic() + DEADLINE)
    assert left == at_rest, f"still running after the upload was answered: {left - at_rest}"
    idle = tree_rss(pid)

    # The hostile workbook of issue 28 (its strings inflate ~900 MB): refused, and given back.
    content = hostile_xlsx(folder / "hostile.xlsx", inflated=905 << 20).read_bytes()
    refused = post(server, key, "hostile.xlsx", content)
    assert refused.status_code in (400, 413), refused.text
    assert refused.json()["success"] is False
    deadline = time.monotonic() + DEADLINE
    left = settled(pid, at_rest, deadline)
    assert left == at_rest, f"still running after the upload was answered: {left - at_rest}"
    while (after := tree_rss(pid)) - idle > SLACK_MIB and time.monotonic() < deadline:
        time.sleep(0.5)
    assert after - idle <= SLACK_MIB, (idle, after)

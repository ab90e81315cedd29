"""Form A uploads bounded in memory (issue 15, item 4), against a real ``listhygiene serve``.

A hostile XLSX (shared strings inflating hundreds of megabytes from a few compressed ones, under
20 MiB and under the zip-bomb guard's ratio) is refused 413 ``4130`` naming the upload and the
limit, and the server's peak RSS (``VmHWM`` of its ``/proc/<pid>/status``, reset before the
uploads) stays within 256 MiB of what it was, one upload at a time or three at once; what it
takes is given back. A legitimate workbook of many rows still goes through, and a key gets one
parse at a time (429 ``4290`` with ``Retry-After`` beyond).
"""

import asyncio
import io
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service import files_a
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from tests.service.live import LiveServer, Server, a, engine_for
from tests.service.upload_files import _NS, _PARTS, heavy_xlsx, hostile_xlsx, many_rows_xlsx

BOUND_MIB = 256


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {k: int(fields[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM")}


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("uploads")
    db = f"sqlite:///{folder / 'store.db'}"
    with Store(db) as store:
        keys = [store.create_key(f"k{i}", 1_000_000)[0] for i in range(3)]
    server = Server(db, sandbox, args=(), log=folder / "server.log")
    try:
        yield server, keys, folder
    finally:
        server.stop()


async def _post(base: str, key: str, name: str, content: bytes) -> httpx.Response:
    async with httpx.AsyncClient(timeout=300) as client:
        return await client.post(
            f"{base}/verify/file", headers=a(key), files={"file": (name, content)}
        )


def post_all(base: str, keys: list[str], name: str, content: bytes) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        return await asyncio.gather(*(_post(base, k, name, content) for k in keys))

    return asyncio.run(run())


def assert_refused(response: httpx.Response, status: int, code: str, *words: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["success"] is False, body
    assert body["code"] == code, body
    message = body["error"]["message"]
    for word in words:
        assert word in message, message
    return message


def test_hostile_xlsx_is_refused_within_the_memory_bound(served: Any) -> None:
    server, keys, folder = served
    content = hostile_xlsx(folder / "hostile.xlsx", inflated=400 << 20).read_bytes()
    assert len(content) < 20 << 20
    pid = server.process.pid
    # A first small upload: the server's lazy imports are part of its baseline.
    warm = post_all(server.base, keys[:1], "warm.csv", b"email\nann@defunct-startup.test\n")
    assert warm[0].status_code == 200, warm[0].text
    baseline = memory(pid)["VmRSS"]
    reset_peak(pid)

    (one,) = post_all(server.base, keys[:1], "hostile.xlsx", content)
    assert_refused(one, 413, "4130", "hostile.xlsx", "sharedStrings.xml", "67,108,864")
    peak = memory(pid)["VmHWM"]
    assert peak - baseline <= BOUND_MIB, (baseline, peak)

    reset_peak(pid)
    for answer in post_all(server.base, keys, "hostile.xlsx", content):
        assert_refused(answer, 413, "4130", "hostile.xlsx")
    peak = memory(pid)["VmHWM"]
    assert peak - baseline <= BOUND_MIB, (baseline, peak)
    # Given back: the server holds no more than it did, give or take its allocator's slack.
    assert memory(pid)["VmRSS"] - baseline <= 64, (baseline, memory(pid))


def _xlsx_of_strings(strings: int) -> bytes:
    """An XLSX whose shared strings are ``strings`` short strings (a few bytes each)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, text in _PARTS.items():
            out.writestr(name, text)
        body = "".join(f"<si><t>s{i}</t></si>" for i in range(strings))
        out.writestr(
            "xl/sharedStrings.xml",
            f'<sst xmlns="{_NS}"><si><t>email</t></si><si><t>note</t></si>'
            f"<si><t>ann@defunct-startup.test</t></si><si><t>n</t></si>{body}</sst>",
        )
    return buffer.getvalue()


def test_too_many_shared_strings(served: Any) -> None:
    server, keys, _ = served
    (answer,) = post_all(server.base, keys[:1], "strings.xlsx", _xlsx_of_strings(1_000_001))
    assert_refused(answer, 413, "4130", "strings.xlsx", "1,000,000")


def test_a_cell_longer_than_excel_allows(served: Any) -> None:
    server, keys, _ = served
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, text in _PARTS.items():
            out.writestr(name, text)
        out.writestr(
            "xl/sharedStrings.xml",
            f'<sst xmlns="{_NS}"><si><t>email</t></si><si><t>note</t></si>'
            f"<si><t>ann@defunct-startup.test</t></si><si><t>{'y' * 40_000}</t></si></sst>",
        )
    (answer,) = post_all(server.base, keys[:1], "long.xlsx", buffer.getvalue())
    assert_refused(answer, 413, "4130", "long.xlsx", "32,767")


def test_too_many_characters_of_cells(served: Any) -> None:
    """A few kilobytes whose cells repeat one long shared string: 64 million characters."""
    server, keys, folder = served
    content = heavy_xlsx(folder / "heavy.xlsx", 2_000).read_bytes()
    (answer,) = post_all(server.base, keys[:1], "heavy.xlsx", content)
    assert_refused(answer, 413, "4130", "heavy.xlsx", "33,554,432 characters")


def test_a_workbook_of_many_rows_goes_through(served: Any) -> None:
    server, keys, folder = served
    rows = 30_000
    content = many_rows_xlsx(folder / "contacts.xlsx", rows, "defunct-startup.test").read_bytes()
    (answer,) = post_all(server.base, keys[1:2], "contacts.xlsx", content)
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["total_rows"] == rows
    assert data["unique_emails"] == rows
    assert data["email_column"] == "email"
    with httpx.Client(base_url=server.base, headers=a(keys[1]), timeout=60) as client:
        job_id = data["task_id"]
        for _ in range(600):
            status = client.get(f"/verify/file/{job_id}").json()["data"]
            if status["status"] in ("completed", "failed"):
                break
            asyncio.run(asyncio.sleep(0.2))
        assert status["status"] == "completed", status
        result = client.get(f"/verify/file/{job_id}/results")
    lines = result.text.splitlines()
    assert len(lines) == rows + 1
    assert lines[1].startswith("0,Person 0,person0@defunct-startup.test,Company 0,invalid")
    assert lines[-1].startswith(f"{rows - 1},Person {rows - 1},person{rows - 1}@")


def test_one_parse_per_key(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a key's upload is being read, its next one is 429 ``4290`` with ``Retry-After``;
    another key's is read."""
    held, release = threading.Event(), threading.Event()
    real = files_a.parse_in_child

    async def slow(received: Any) -> Any:
        if received.file_name == "first.csv":
            held.set()
            await asyncio.to_thread(release.wait, 60)
        return await real(received)

    monkeypatch.setattr(files_a, "parse_in_child", slow)
    csv = b"email\nann@defunct-startup.test\n"
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        one, _ = store.create_key("one", 100)
        two, _ = store.create_key("two", 100)
        with LiveServer(create_app(store, engine_for(sandbox))) as url:
            base = f"{url}/a/v1"

            async def run() -> list[httpx.Response]:
                first = asyncio.create_task(_post(base, one, "first.csv", csv))
                assert await asyncio.to_thread(held.wait, 60)
                second = await _post(base, one, "second.csv", csv)
                other = await _post(base, two, "other.csv", csv)
                release.set()
                return [await first, second, other]

            first, second, other = asyncio.run(run())
    assert first.status_code == 200, first.text
    assert_refused(second, 429, "4290", "second.csv")
    assert int(second.headers["Retry-After"]) > 0
    assert other.status_code == 200, other.text


#: Another server process holding parse slots of ``folder``: of key ``key`` if given, else all.
_HOLDER = """
import sys
from pathlib import Path
from listhygiene.service.parse_process import MAX_PARSES, ParseSlots
folder, key = Path(sys.argv[1]), sys.argv[2]
slots = ParseSlots(folder)
held = [slots.hold(key or f"another key {n}", "held.csv") for n in range(1 if key else MAX_PARSES)]
for slot in held:
    slot.__enter__()
print("held", flush=True)
sys.stdin.read()
"""


def test_parse_slots_are_shared_by_the_processes_of_a_store(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The limits hold for the machine, not per server process: with ``--workers N`` a key
    still gets one parse at a time, and the machine four (docs/security.md)."""
    import subprocess
    import sys

    csv = b"email\nann@defunct-startup.test\n"
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        one, one_row = store.create_key("one", 100)
        two, _ = store.create_key("two", 100)
        app = create_app(store, engine_for(sandbox), run_jobs=False)
        folder = app.state.parse_slots_folder
        with LiveServer(app) as url:
            base = f"{url}/a/v1"
            for key_id, refused, allowed in ((one_row.id, one, two), ("", two, one)):
                holder = subprocess.Popen(
                    [sys.executable, "-c", _HOLDER, str(folder), key_id],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                try:
                    assert holder.stdout is not None
                    assert holder.stdout.readline().strip() == "held"
                    answer = asyncio.run(_post(base, refused, "mine.csv", csv))
                    if key_id:  # the key's own slot is taken: another key goes on
                        assert_refused(answer, 429, "4290", "mine.csv", "already has 1 upload")
                        other = asyncio.run(_post(base, allowed, "theirs.csv", csv))
                        assert other.status_code == 200, other.text
                    else:  # every slot of the machine is taken
                        assert_refused(answer, 429, "4290", "mine.csv", "reading 4 uploads")
                    assert int(answer.headers["Retry-After"]) > 0
                finally:
                    holder.kill()
                    holder.wait(10)
            # the holder gone (killed: the kernel freed its locks), uploads go through again
            answer = asyncio.run(_post(base, one, "again.csv", csv))
            assert answer.status_code == 200, answer.text

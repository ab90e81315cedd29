"""Memory of ``listhygiene serve`` under hostile form A uploads (issue 15, item 4; issue 28,
item 5).

Starts a real ``listhygiene serve`` on a temporary SQLite store, uploads a hostile XLSX (its
shared strings inflate ``--inflated-mb`` megabytes from about a tenth of that compressed: under
20 MiB and under the zip-bomb guard's ratio of 100) once, then ``--concurrent`` at once from as
many keys, and prints the server process's RSS before, its peak (VmHWM) and after each round, the
answers, and the peak RSS of the forkserver and parse processes it started. Then a legitimate XLSX
of ``--rows`` rows, which must be accepted, and a workbook just within the upload limits that
costs the service the most to hold (1,000 rows each with a cell of 32,000 characters).

For each round it also prints the two figures of issue 28 for the server's process tree (the
server and every process it started: the job runner, the forkserver, the resource tracker, the
parse children): its peak over idle (the tree at rest before the round), and its memory 10 s
after the answer against idle. The tree's memory is the RSS of each process, except that a
process forked from the forkserver counts only its own pages (Private_Clean + Private_Dirty of
its ``smaps_rollup``): the rest it shares with the forkserver, counted there. Summing every RSS
would count those pages twice; PSS would not, but it also splits the shared libraries with every
other Python process of the machine, and moves with them. Sampled every 10 ms.

    .venv/bin/python benchmarks/uploads.py [--inflated-mb 905] [--concurrent 3] [--rows 100000]
"""

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.service.live import free_port  # noqa: E402
from tests.service.upload_files import heavy_xlsx, hostile_xlsx, many_rows_xlsx  # noqa: E402

from listhygiene.service.store import Store  # noqa: E402


def status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM of a process in MiB (0 when it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    return {k: int(fields[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM") if k in fields}


def descendants(pid: int) -> set[int]:
    children: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                children.add(int(child))
    except OSError:
        return children
    for child in list(children):
        children |= descendants(child)
    return children


def _kib(path: Path, *fields: str) -> int:
    """The sum of ``fields`` (in kB) of a ``/proc`` status or smaps file (0 when it is gone)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in lines if line.split(":", 1)[0] in fields)


def _forked(pid: int) -> bool:
    """Whether ``pid`` was forked from a multiprocessing forkserver."""
    try:
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        return b"multiprocessing.forkserver" in Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False


def tree(pid: int) -> int:
    """The memory of ``pid`` and every process it started, in KiB: each one's RSS, but only
    the own pages of a process forked from the forkserver (the rest is the forkserver's)."""
    total = 0
    for process in {pid, *descendants(pid)}:
        if _forked(process):
            total += _kib(Path(f"/proc/{process}/smaps_rollup"), "Private_Clean", "Private_Dirty")
        else:
            total += _kib(Path(f"/proc/{process}/status"), "VmRSS")
    return total


class Watch:
    """Samples the peak RSS of the server's descendants (the parse processes) and the peak of
    the server's whole tree (:func:`tree`) every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.tree, self.stop = pid, 0, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            for child in descendants(self.pid):
                self.peak = max(self.peak, status(child).get("VmHWM", 0))
            self.tree = max(self.tree, tree(self.pid))
            time.sleep(0.01)

    def done(self) -> tuple[int, int]:
        """The descendants' peak RSS (MiB) and the tree's peak (KiB)."""
        self.stop.set()
        self.thread.join()
        return self.peak, max(self.tree, tree(self.pid))


async def upload(base: str, key: str, path: Path) -> str:
    async with httpx.AsyncClient(timeout=600) as client:
        with path.open("rb") as file:
            response = await client.post(
                f"{base}/a/v1/verify/file",
                headers={"LISTHYGIENE-API-KEY": key},
                files={"file": (path.name, file)},
            )
    body = response.json()
    message = (body.get("error") or {}).get("message") or body.get("message", "")
    return f"{response.status_code} {body.get('code', '')} {message[:150]}"


def round_(server: subprocess.Popen, base: str, keys: list[str], path: Path, label: str) -> None:
    Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = status(server.pid)["VmRSS"]
    idle = tree(server.pid)
    watch = Watch(server.pid)

    async def all_() -> list[str]:
        return await asyncio.gather(*(upload(base, k, path) for k in keys))

    answers = asyncio.run(all_())
    answered = time.monotonic()
    children, top = watch.done()
    peak = status(server.pid)["VmHWM"]
    time.sleep(2)
    after = status(server.pid)["VmRSS"]
    print(
        f"{label}: server RSS before {before} MiB, peak {peak} MiB (+{peak - before}), "
        f"after {after} MiB; parse processes' peak {children} MiB"
    )
    for answer in answers:
        print(f"    {answer}")
    time.sleep(max(answered + 10 - time.monotonic(), 0))
    later = tree(server.pid)
    print(f"    tree: idle {idle >> 10} MiB")
    print(f"    tree: peak over idle {(top - idle) / 1024:+.0f} MiB")
    print(
        f"    tree: 10 s after the answer {later >> 10} MiB, {(later - idle) / 1024:+.0f} vs idle"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inflated-mb", type=int, default=905)
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        hostile = hostile_xlsx(folder / "hostile.xlsx", inflated=args.inflated_mb << 20)
        legit = many_rows_xlsx(folder / "contacts.xlsx", args.rows)
        # At the limits: 1,000 rows x 32,000 characters = 32,000,000 characters of cells.
        heavy = heavy_xlsx(folder / "heavy.xlsx", 1_000)
        print(
            f"hostile.xlsx: {hostile.stat().st_size:,} bytes; "
            f"contacts.xlsx: {legit.stat().st_size:,} bytes, {args.rows:,} rows"
        )
        db = f"sqlite:///{folder / 'store.db'}"
        with Store(db) as store:
            keys = [store.create_key(f"k{i}", 1_000_000)[0] for i in range(args.concurrent)]
        port = free_port()
        env = {
            **os.environ,
            "LISTHYGIENE_DNS_SERVER": "127.0.0.1:9",
            "LISTHYGIENE_SMTP_TIMEOUT": "1",
        }
        server = subprocess.Popen(
            [sys.executable, "-m", "listhygiene.cli", "serve", "--db", db, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{base}/a/v1/credits", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            time.sleep(3)  # the job runner's start-up too
            round_(server, base, keys[:1], hostile, "hostile x1")
            round_(server, base, keys, hostile, f"hostile x{len(keys)} at once")
            round_(server, base, keys[:1], legit, f"legit {args.rows:,} rows")
            round_(server, base, keys[:1], heavy, "at the limits (32 M characters of cells)")
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()

"""Profile ``listhygiene serve`` under the ``/verify/single`` load of ``service.py``.

    .venv/bin/python benchmarks/profile_service.py [--requests 3000] [--concurrency 32]
        [--db URL] [--top 40] [--out FILE.pstats]

The same set-up as ``service.py`` (sample world in a ``sandbox up`` process, a temporary SQLite
store or a scratch PostgreSQL database, a key with custom limits), but the server runs in this
process, as ``listhygiene serve`` would (the click command itself), under cProfile: one profiler
for the event loop's thread and one for each thread of the pool the store's calls run in (a
``threading.setprofile`` hook starts it), merged at the end. Each profiler counts its thread's
CPU time (``time.thread_time``), not wall time, so waiting on locks, the connection pool and the
database costs nothing in it: the figures say where the server's CPU goes. The load (the minimal
HTTP/1.1 client of ``service.py``, after a warm-up) comes from a child process, which stops the
server with SIGINT when it is done. Prints the requests/s under profiling (far slower than
without) and the functions by cumulative and by own time; ``--out`` keeps the merged stats for
``pstats``.
"""

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import pstats
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service
from engine import SandboxProcess


def load(base: str, key: str, requests: int, concurrency: int, parent: int) -> None:
    """The child: warm up, time ``requests`` calls, print the figures, stop the server."""

    async def run() -> None:
        rng = random.Random(1)
        addresses = service.world_mailboxes()

        def body(email: str) -> bytes:
            return json.dumps({"email": email, "check_smtp": False}).encode()

        client = service.RawClient(base, key)
        for _ in range(600):  # the server may still be starting
            try:
                await client.post("/a/v1/verify/single", body(addresses[0]))
                break
            except OSError:
                await asyncio.sleep(0.1)
        await service.fire(client, [body(a) for a in addresses], concurrency)
        timed = [body(rng.choice(addresses)) for _ in range(requests)]
        started = time.perf_counter()
        latencies, errors = await service.fire(client, timed, concurrency)
        wall = time.perf_counter() - started
        await client.aclose()
        ordered = sorted(latencies)
        print(
            f"under profiling: {len(ordered) / wall:.1f} requests/s, p50 "
            f"{1000 * service.percentile(ordered, 0.5):.1f} ms, p99 "
            f"{1000 * service.percentile(ordered, 0.99):.1f} ms, {len(errors)} errors",
            flush=True,
        )

    try:
        asyncio.run(run())
    finally:
        os.kill(parent, signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--db", metavar="URL")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from listhygiene.cli.serve import serve

    with (
        tempfile.TemporaryDirectory(prefix="lh-service-profile-") as tmp,
        SandboxProcess(service.WORLD_FILE, Path(tmp) / "sandbox") as sandbox,
        service.database(args.db, Path(tmp)) as db,
    ):
        key = service.create_key(db)
        for name, value in sandbox.exports.items():
            if name.startswith("LISTHYGIENE_"):
                os.environ[name] = value
        os.environ["LISTHYGIENE_HELO"] = "bench.test"
        port = service.free_port()
        child = multiprocessing.get_context("spawn").Process(
            target=load,
            args=(f"http://127.0.0.1:{port}", key, args.requests, args.concurrency, os.getpid()),
        )
        profiles: list[cProfile.Profile] = []

        def start_thread_profile(*_args: Any) -> None:
            profile = cProfile.Profile(time.thread_time)
            profiles.append(profile)
            profile.enable()  # replaces this hook for the thread

        main_profile = cProfile.Profile(time.thread_time)
        threading.setprofile(start_thread_profile)
        child.start()
        main_profile.enable()
        try:
            serve.main(["--db", db, "--port", str(port)], standalone_mode=False)
        finally:
            main_profile.disable()
            threading.setprofile(None)  # type: ignore[arg-type]
            child.join(30)
    stats = pstats.Stats(main_profile)
    for profile in profiles:
        stats.add(profile)
    print(f"{len(profiles)} worker threads profiled besides the event loop's")
    if args.out:
        stats.dump_stats(args.out)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

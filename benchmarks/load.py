"""Load benchmark: form B ``POST /b/v1/verify`` (``smtp_check`` false) from 50 concurrent clients.

    .venv/bin/python benchmarks/load.py [--stores sqlite,postgresql] [--workers 1,2]
        [--pg postgresql://postgres@127.0.0.1:5432/test] [--concurrency 50] [--requests 10000]
        [--warmup 2000] [--floor] [--json]

For each store and each ``--workers`` count: the sample world in a ``listhygiene sandbox up``
process, a fresh store (a temporary SQLite file, or a scratch PostgreSQL database
``lh_bench_<random>`` on ``--pg``, dropped afterwards), a key (plan ``enterprise``, 100 million
credits, hourly and daily limits far above the run so that every request is counted and
admitted), then ``listhygiene serve --db URL --workers N`` as a user runs it, as a subprocess.
This process is the load generator: ``--concurrency`` asyncio tasks, each with its own keep-alive
HTTP/1.1 connection (a minimal client, ~0.1 ms of CPU a request, so that it leaves the cores to
the server), send ``{"email": ..., "smtp_check": false}`` for addresses drawn from the world's
mailboxes (but those of the domain whose name server never answers: a 504 after 5 s by design):
``--warmup`` requests (every mailbox once first, so DNS answers are cached as in a long-running
server), then ``--requests`` timed ones.

Reported per run: requests/s (timed requests / wall time), latency p50, p90, p99 and max (from
sending a request to its complete body), errors (any answer but 200 with a ``status``), the CPU
seconds over the timed phase of the server processes, of the load generator and of PostgreSQL's
backends, and CPU milliseconds per request.

``--floor`` adds a bare FastAPI app (one ``POST`` route that returns a constant dict, no store, no
engine) under uvicorn with the same workers, HTTP implementation and event loop, under the same
load: what this machine can do at all with this load generator on the same 2 cores.

At the end, the key's credits are checked against the requests answered: exactly one credit per
charged answer (``valid`` or ``invalid``; ``unknown`` is free), none lost or spent twice.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import SandboxProcess
from listhygiene.service.store import Store
from service import (
    WORLD_FILE,
    database,
    free_port,
    percentile,
    proc_cpu_seconds,
    world_mailboxes,
)

CREDITS = 100_000_000
LIMITS = {"b_per_hour": 1_000_000_000, "b_per_day": 1_000_000_000}
PATH = "/b/v1/verify"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"

HELLO_APP = textwrap.dedent(
    """
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/b/v1/verify")
    async def verify() -> dict:
        return {"email": "a@b.c", "status": "valid", "result": {}}
    """
)


class Client:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams, one connection per task."""

    def __init__(self, port: int, key: str) -> None:
        self.port = port
        self.head = (
            f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def post(
        self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], body: bytes
    ) -> tuple[int, bytes]:
        reader, writer = conn
        writer.write(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
            % (PATH.encode(), self.head, len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise ValueError(f"no Content-Length in {head!r}")
        return status, await reader.readexactly(length)


async def fire(
    client: Client, bodies: list[bytes], concurrency: int
) -> tuple[list[float], list[str], dict[str, int]]:
    """Send every body from ``concurrency`` tasks: (latencies, errors, statuses answered)."""
    latencies: list[float] = []
    errors: list[str] = []
    statuses: dict[str, int] = {}
    queue = iter(bodies)

    async def worker() -> None:
        conn = await client.connect()
        try:
            for body in queue:
                started = time.perf_counter()
                try:
                    code, content = await client.post(conn, body)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    latencies.append(time.perf_counter() - started)
                    errors.append(f"{type(exc).__name__}: {exc}")
                    conn[1].close()
                    conn = await client.connect()
                    continue
                latencies.append(time.perf_counter() - started)
                status = None
                if code == 200:
                    try:
                        status = json.loads(content).get("status")
                    except ValueError:
                        status = None
                if status is None:
                    errors.append(f"{code}: {content[:200]!r}")
                else:
                    statuses[status] = statuses.get(status, 0) + 1
        finally:
            conn[1].close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors, statuses


def postgres_cpu_seconds() -> float:
    """CPU seconds so far of every ``postgres`` process on this machine."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        if name.startswith("postgres"):
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


class Server:
    """A server command on a free port, logging to a file, stopped on exit."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, port: int) -> None:
        self.command, self.env, self.log_path, self.port = command, env, log, port
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "Server":
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 90
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=2)
                break
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    tail = self.log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"the server did not start:\n{tail}") from None
                time.sleep(0.1)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def bodies(addresses: list[str], count: int, rng: random.Random) -> list[bytes]:
    return [
        json.dumps({"email": rng.choice(addresses), "smtp_check": False}).encode()
        for _ in range(count)
    ]


def answered_addresses() -> list[str]:
    """The world's mailboxes on domains whose DNS answers (a domain whose name server times out
    is a 504 after the request's own 5 s time-out, by design: not what this benchmark measures)."""
    world = json.loads(WORLD_FILE.read_text())
    silent = {d for d, spec in world["domains"].items() if spec.get("dns", "ok") == "timeout"}
    return [a for a in world_mailboxes() if a.rpartition("@")[2] not in silent]


def measure(server: Server, key: str, args: argparse.Namespace, pg: bool) -> dict[str, Any]:
    rng = random.Random(args.seed)
    addresses = answered_addresses()
    client = Client(server.port, key)
    warm = [json.dumps({"email": a, "smtp_check": False}).encode() for a in addresses]
    warm += bodies(addresses, max(0, args.warmup - len(warm)), rng)
    timed = bodies(addresses, args.requests, rng)
    _, warm_errors, warm_statuses = asyncio.run(fire(client, warm, args.concurrency))
    cpu_before = (proc_cpu_seconds(server.pid), time.process_time(), postgres_cpu_seconds())
    started = time.perf_counter()
    latencies, errors, statuses = asyncio.run(fire(client, timed, args.concurrency))
    wall = time.perf_counter() - started
    cpu_after = (proc_cpu_seconds(server.pid), time.process_time(), postgres_cpu_seconds())
    spent = [
        round(b - a, 2) if a is not None and b is not None else None
        for a, b in zip(cpu_before, cpu_after, strict=True)
    ]
    ordered = sorted(latencies)
    n = len(ordered)
    answered = dict(warm_statuses)
    for status, count in statuses.items():
        answered[status] = answered.get(status, 0) + count
    return {
        "requests": n,
        "wall_seconds": round(wall, 3),
        "requests_per_second": round(n / wall, 1),
        "p50_ms": round(1000 * percentile(ordered, 0.5), 1),
        "p90_ms": round(1000 * percentile(ordered, 0.9), 1),
        "p99_ms": round(1000 * percentile(ordered, 0.99), 1),
        "max_ms": round(1000 * ordered[-1], 1),
        "errors": len(errors) + len(warm_errors),
        "error_examples": (warm_errors + errors)[:5],
        "server_cpu_s": spent[0],
        "client_cpu_s": spent[1],
        "postgres_cpu_s": spent[2] if pg else None,
        "server_cpu_ms_per_request": round(1000 * spent[0] / n, 2) if spent[0] else None,
        "answered": answered,
    }


def run_service(
    store: str, workers: int, args: argparse.Namespace, folder: Path, sandbox: SandboxProcess
) -> dict[str, Any]:
    with database(args.pg if store == "postgresql" else None, folder / store) as db:
        with Store(db) as setup:
            key, row = setup.create_key("bench", CREDITS, "enterprise", limits=LIMITS)
        port = free_port()
        env = {
            **os.environ,
            **{k: v for k, v in sandbox.exports.items() if k.startswith("LISTHYGIENE_")},
            "LISTHYGIENE_HELO": "bench.test",
        }
        env.pop("LISTHYGIENE_DB", None)
        command = [sys.executable, "-m", "listhygiene.cli", "serve", "--db", db]
        command += ["--port", str(port), "--workers", str(workers)]
        log = folder / f"serve-{store}-{workers}.log"
        with Server(command, env, log, port) as server:
            report = measure(server, key, args, store == "postgresql")
        if report["errors"]:
            text = log.read_text(errors="replace")
            report["log_tracebacks"] = [
                part[-1500:] for part in text.split("Traceback (most recent call last):")[1:3]
            ]
        # The server has stopped (leases returned, counts flushed): the books must balance.
        with Store(db) as check:
            account = check.credits(row.id)
        charged = sum(v for k, v in report["answered"].items() if k in ("valid", "invalid"))
        report["credits_charged"] = CREDITS - account.balance
        report["credits_expected"] = charged
        report["credits_exact"] = CREDITS - account.balance == charged
    return report


def run_floor(workers: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    (folder / "hello_app.py").write_text(HELLO_APP)
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "hello_app:app", "--port", str(port)]
    command += ["--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    env = {**os.environ, "PYTHONPATH": str(folder)}
    with Server(command, env, folder / f"hello-{workers}.log", port) as server:
        return measure(server, "none", args, False)


def print_row(name: str, r: dict[str, Any]) -> None:
    pg = f"  pg {r['postgres_cpu_s']} s" if r.get("postgres_cpu_s") is not None else ""
    exact = ""
    if "credits_exact" in r:
        exact = f"  credits {'exact' if r['credits_exact'] else 'WRONG'}"
        exact += f" ({r['credits_charged']}/{r['credits_expected']})"
    print(
        f"{name:<22} {r['requests_per_second']:>8.1f}/s  p50 {r['p50_ms']:>6.1f}  "
        f"p90 {r['p90_ms']:>6.1f}  p99 {r['p99_ms']:>6.1f}  max {r['max_ms']:>7.1f} ms  "
        f"errors {r['errors']}  CPU server {r['server_cpu_s']} s "
        f"({r['server_cpu_ms_per_request']} ms/req)  client {r['client_cpu_s']} s{pg}{exact}",
        flush=True,
    )
    for example in r["error_examples"]:
        print(f"    error: {example}")
    for trace in r.get("log_tracebacks", []):
        print(textwrap.indent("Traceback" + trace, "    | "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--workers", default="1,2", help="serve --workers counts, comma-separated")
    parser.add_argument("--pg", default=DEFAULT_PG, metavar="URL", help="PostgreSQL server")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--floor", action="store_true", help="also a bare FastAPI hello-world")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    worker_counts = [int(w) for w in args.workers.split(",")]

    import uvicorn

    print(
        f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, uvicorn "
        f"{uvicorn.__version__}; {args.concurrency} clients, {args.requests} timed requests "
        f"after {args.warmup} warm-up; POST {PATH} smtp_check false",
        flush=True,
    )
    results: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="lh-load-bench-"))
    problems = 0
    try:
        with SandboxProcess(WORLD_FILE, folder / "sandbox") as sandbox:
            for workers in worker_counts:
                if args.floor:
                    name = f"hello-world w{workers}"
                    results[name] = run_floor(workers, args, folder)
                    print_row(name, results[name])
                for store in stores:
                    (folder / store).mkdir(exist_ok=True)
                    name = f"{store} w{workers}"
                    results[name] = run_service(store, workers, args, folder, sandbox)
                    print_row(name, results[name])
                    problems += bool(results[name]["errors"]) + (not results[name]["credits_exact"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

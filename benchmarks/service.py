"""Service benchmark: ``listhygiene serve`` under load from a second process on loopback.

    .venv/bin/python benchmarks/service.py [--part single|file|all] [--requests 5000]
        [--concurrency 32] [--warmup 500] [--client httpx|raw] [--rows 100000]
        [--distinct-share 0.7] [--server-workers 1] [--db URL] [--seed 1] [--keep] [--json]

The issue's targets: form A ``POST /verify/single`` with ``check_smtp`` false over the sandbox at
least 300 requests per second on 2 cores, with p50 and p99 latency; and a 100,000-row file job's
wall time and peak memory.

Set-up (not timed): the sample world (``sample_data/world.json``) is served by ``listhygiene
sandbox up`` in its own process (the engine benchmark's ``SandboxProcess``); a store is made (a
temporary SQLite file, or with ``--db postgresql://HOST:PORT/DB`` a scratch database
``lh_bench_<random>`` created on that server and dropped afterwards, so that the server's job
worker sees no one else's jobs); a key is created there with 100 million credits and custom rate
limits far above the spec's defaults (the spec offers higher limits on request, and the store
keeps them per key: ``listhygiene keys create`` has no option for them, so the benchmark uses
``Store.create_key(..., limits=...)``); then ``listhygiene serve --db URL --port P`` runs as a
subprocess with the sandbox's settings in its environment (``LISTHYGIENE_DNS_SERVER``,
``LISTHYGIENE_SMTP_PORT``, ``LISTHYGIENE_ALLOW_PRIVATE_MX``, ``LISTHYGIENE_HELO=bench.test``;
every other engine setting is the default). Its output goes to a log file, printed if it dies.
So three processes share the 2 cores: the sandbox, the server and this load generator.

Part "single": ``--warmup`` requests (every world address once, so DNS answers are cached as in a
long-running server), then ``--requests`` timed ones, ``POST /a/v1/verify/single`` with ``{"email":
..., "check_smtp": false}``, addresses drawn from the world's mailboxes, from ``--concurrency``
tasks sharing one ``httpx.AsyncClient`` (HTTP/1.1 keep-alive, as many connections as tasks), or
with ``--client raw`` a minimal HTTP/1.1 client (:class:`RawClient`) that leaves more of the 2
cores to the server. Reported: requests/s (timed requests / wall time of the timed phase), latency
percentiles p50/p90/p99/max (each request from just before ``post`` to its complete body), errors
(any answer but 200 with ``"success":true``; the first bodies are printed), and CPU seconds of the
server, the load generator and the sandbox over the timed phase (``/proc/PID/stat`` and
``time.process_time``).

Part "file": a ``--rows``-row CSV (``id,first_name,email,company``) is generated from the world:
about ``--distinct-share`` of the rows are distinct addresses (every world mailbox, plus made-up
``first.last`` mailboxes on the world's ordinary domains, weighted by their size: these are
answered "no such user" over SMTP, at the same cost), the rest repeat a few popular addresses;
1 % blank cells, 0.5 % placeholders, 0.5 % broken syntax. It is uploaded to ``POST
/a/v1/verify/file`` (multipart field ``file``); the job (form A has no ``check_smtp`` field for
files, so it probes SMTP against the sandbox) is polled with ``GET /a/v1/verify/file/{job_id}``
every 0.25 s until ``completed`` or ``failed``, then ``GET .../results`` is downloaded and its data
rows counted (one per uploaded row). Reported: upload time, job wall time (acceptance to the poll
that sees it completed: at most one poll interval late), the job's own ``process_time_seconds``,
download time, the server's RSS and peak RSS (``VmRSS``/``VmHWM`` of ``/proc/PID/status``) before
the upload, when the job is seen completed and after the download, its RSS sampled at each poll,
its CPU seconds during the job, and the job's counts.

Exit status 1 when a target is missed (300 requests/s), a request failed, or a check failed.
"""

import argparse
import asyncio
import csv
import io
import json
import math
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from listhygiene.service.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import SandboxProcess

ROOT = Path(__file__).resolve().parent.parent
WORLD_FILE = ROOT / "sample_data" / "world.json"
#: The issue's target for ``/verify/single`` without SMTP.
TARGET_RPS = 300.0
KEY_HEADER = "LISTHYGIENE-API-KEY"
#: The key's custom limits: far above any rate this benchmark can reach.
CUSTOM_LIMITS = {
    "a_single_per_minute": 10_000_000,
    "a_bulk_per_minute": 10_000_000,
    "a_file_per_minute": 10_000,
    "a_other_per_minute": 100_000,
}
CREDITS = 100_000_000
POLL_SECONDS = 0.25
#: The counts of a completed file job.
JOB_COUNTS = (
    "total_emails", "valid_emails", "invalid_emails", "unknown_emails", "role_emails",
    "catchall_emails", "disposable_emails", "credits_used",
)  # fmt: skip
BLANK_SHARE = 0.01
PLACEHOLDER_SHARE = 0.005
BROKEN_SHARE = 0.005
PLACEHOLDERS = ("N/A", "none", "-", "#N/A", "null", "unknown", "?")
FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David",
    "Elizabeth", "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah",
    "Charles", "Karen", "Daniel", "Lisa", "Matthew", "Nancy", "Anthony", "Betty", "Mark", "Sandra",
    "Donald", "Ashley", "Steven", "Emily", "Andrew", "Donna", "Paul", "Michelle", "Joshua",
    "Carol", "Kevin", "Amanda", "Brian", "Melissa", "George", "Deborah", "Timothy", "Stephanie",
    "Ronald", "Rebecca", "Jason", "Sharon", "Edward", "Laura", "Jeffrey", "Cynthia", "Ryan", "Amy",
    "Jacob", "Kathleen", "Gary", "Angela", "Nicholas", "Shirley", "Eric", "Brenda", "Jonathan",
    "Emma", "Stephen", "Anna", "Larry", "Pamela", "Justin", "Nicole", "Scott", "Samantha",
    "Brandon", "Katherine",
)  # fmt: skip
LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
    "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor",
    "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez",
    "Clark", "Ramirez", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott",
    "Torres", "Nguyen", "Hill", "Flores", "Green", "Adams", "Nelson", "Baker", "Hall", "Rivera",
    "Campbell", "Mitchell", "Carter", "Roberts", "Gomez", "Phillips",
)  # fmt: skip


# -- processes ------------------------------------------------------------------------------------


def family(pid: int) -> list[int]:
    """``pid`` and its descendants (``serve --workers N`` runs its servers as children)."""
    found = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in children:
        found += family(int(child))
    return found


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` and its children so far (None where it cannot
    be read)."""
    total = 0.0
    for member in family(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            if member == pid:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def proc_memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of process ``pid``, in KiB (empty if unreadable),
    summed over it and its children (so the peak is an upper bound with several)."""
    found: dict[str, int] = {}
    for member in family(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    found[name] = found.get(name, 0) + int(value.split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """``listhygiene serve`` as a subprocess on a free loopback port, logging to a file."""

    def __init__(
        self, db: str, sandbox: SandboxProcess, log_path: Path, key: str, workers: int = 1
    ) -> None:
        self.db = db
        self.workers = workers
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.key = key
        self.env = {
            **os.environ,
            **{k: v for k, v in sandbox.exports.items() if k.startswith("LISTHYGIENE_")},
            "LISTHYGIENE_HELO": "bench.test",
        }
        self.env.pop("LISTHYGIENE_DB", None)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> "ServerProcess":
        command = [sys.executable, "-m", "listhygiene.cli", "serve", "--db", self.db]
        command += ["--port", str(self.port), "--workers", str(self.workers)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        started = time.perf_counter()
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(
                    f"{self.base}/a/v1/credits", headers={KEY_HEADER: self.key}, timeout=2
                )
                if answer.status_code != 200:
                    self.__exit__()
                    raise RuntimeError(f"GET /a/v1/credits: {answer.status_code} {answer.text}")
                break
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the server did not start:\n{self.log()}") from None
                time.sleep(0.1)
        self.startup_seconds = time.perf_counter() - started
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(
                f"the server died (exit {self.process and self.process.returncode}):\n{self.log()}"
            )


@contextmanager
def database(url: str | None, folder: Path) -> Iterator[str]:
    """The store's URL: a SQLite file in ``folder``, or a scratch PostgreSQL database."""
    if url is None:
        yield f"sqlite:///{folder / 'bench.db'}"
        return
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        yield url  # another SQLite file, as given
        return
    import psycopg

    admin = psycopg.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password,
        dbname=parsed.database or "postgres",
        autocommit=True,
        connect_timeout=5,
    )
    name = f"lh_bench_{secrets.token_hex(6)}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        scratch = parsed.set(database=name)
        if not parsed.username:
            scratch = scratch.set(username="postgres")
        yield scratch.render_as_string(hide_password=False)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def create_key(db: str) -> str:
    with Store(db) as store:
        key, _ = store.create_key("bench", CREDITS, "enterprise", limits=CUSTOM_LIMITS)
    return key


# -- the addresses --------------------------------------------------------------------------------


def world_mailboxes() -> list[str]:
    """Every mailbox of the sample world, as ``local@domain``."""
    world = json.loads(WORLD_FILE.read_text())
    return [f"{m}@{d}" for d, spec in world["domains"].items() for m in spec.get("mailboxes", [])]


def ordinary_domains() -> dict[str, int]:
    """{domain: mailboxes} of the world's domains whose MX hosts all behave normally."""
    raw = json.loads(WORLD_FILE.read_text())
    found: dict[str, int] = {}
    for name, spec in raw["domains"].items():
        hosts = [mx["host"] for mx in spec.get("mx", [])]
        if not hosts or spec.get("dns", "ok") != "ok" or spec.get("null_mx"):
            continue
        if all(raw["hosts"].get(h) == {} for h in hosts):
            found[name] = len(spec.get("mailboxes", [])) or 1
    return found


def make_csv(rows: int, distinct_share: float, seed: int) -> tuple[bytes, dict[str, int]]:
    """A CRM-like CSV of ``rows`` data rows, and what it holds."""
    rng = random.Random(seed)
    real = world_mailboxes()
    special = rows * (BLANK_SHARE + PLACEHOLDER_SHARE + BROKEN_SHARE)
    address_rows = rows - round(special)
    distinct = max(1, min(address_rows, round(rows * distinct_share)))
    pool = list(real[:distinct])
    seen = {a.lower() for a in pool}
    domains = ordinary_domains()
    names, weights = list(domains), list(domains.values())
    while len(pool) < distinct:
        first, last = rng.choice(FIRST_NAMES).lower(), rng.choice(LAST_NAMES).lower()
        local = f"{first}.{last}{rng.randrange(1, 10_000)}"
        address = f"{local}@{rng.choices(names, weights)[0]}"
        if address not in seen:
            seen.add(address)
            pool.append(address)
    rng.shuffle(pool)
    cells = list(pool)
    popular = pool[: max(1, len(pool) // 20)]  # repeats fall on 5 % of the addresses
    cells += rng.choices(popular, k=address_rows - len(pool))
    blanks = round(rows * BLANK_SHARE)
    placeholders = round(rows * PLACEHOLDER_SHARE)
    broken = rows - len(cells) - blanks - placeholders
    cells += [rng.choice(("", " ", "\t")) for _ in range(blanks)]
    cells += [rng.choice(PLACEHOLDERS) for _ in range(placeholders)]
    cells += [rng.choice(pool).replace("@", rng.choice(("", "@@", " at "))) for _ in range(broken)]
    rng.shuffle(cells)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "first_name", "email", "company"])
    for number, cell in enumerate(cells, 1):
        first = rng.choice(FIRST_NAMES)
        company = rng.choice(("Acme, Inc.", "Northwind", "Contoso Ltd", "Fabrikam", ""))
        writer.writerow([number, first, cell, company])
    facts = {
        "rows": rows,
        "distinct_addresses": len(pool),
        "repeated_rows": address_rows - len(pool),
        "blank_cells": blanks,
        "placeholder_cells": placeholders,
        "broken_cells": broken,
    }
    return out.getvalue().encode(), facts


# -- part "single" --------------------------------------------------------------------------------


def percentile(ordered: list[float], share: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


class RawClient:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: one connection per task.

    It does only what this benchmark needs (POST a JSON body, read a ``Content-Length`` body), so
    the load generator spends far less CPU per request than with httpx and leaves the cores to
    the server.
    """

    def __init__(self, base: str, key: str) -> None:
        url = httpx.URL(base)
        self.host, self.port = url.host, url.port or 80
        self.head = (
            f"Host: {self.host}:{self.port}\r\n{KEY_HEADER}: {key}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened: list[asyncio.StreamWriter] = []

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.opened.append(writer)
        writer.write(
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self.head, len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length, close = None, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if length is None:
            raise httpx.RemoteProtocolError(f"no Content-Length in {head!r}")
        content = await reader.readexactly(length)
        if close:
            writer.close()
        else:
            self.idle.append((reader, writer))
        return status, content

    async def aclose(self) -> None:
        for writer in self.opened:
            writer.close()


async def fire(
    client: "httpx.AsyncClient | RawClient", bodies: list[bytes], concurrency: int
) -> tuple[list[float], list[tuple[Any, str]]]:
    """POST every body to /verify/single from ``concurrency`` tasks: (latencies, errors)."""
    latencies: list[float] = []
    errors: list[tuple[Any, str]] = []
    queue = iter(bodies)
    path = "/a/v1/verify/single"
    headers = {"Content-Type": "application/json"}

    async def send(body: bytes) -> tuple[int, bytes]:
        if isinstance(client, RawClient):
            return await client.post(path, body)
        answer = await client.post(path, content=body, headers=headers)
        return answer.status_code, answer.content

    async def worker() -> None:
        for body in queue:
            started = time.perf_counter()
            try:
                status: Any
                status, content = await send(body)
                ok = status == 200 and b'"success":true' in content
                text = content.decode(errors="replace")
            except (httpx.HTTPError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                status, ok, text = type(exc).__name__, False, str(exc)
            latencies.append(time.perf_counter() - started)
            if not ok:
                errors.append((status, text[:300]))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


async def part_single(
    server: ServerProcess, sandbox: SandboxProcess, args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    addresses = world_mailboxes()

    def body(email: str) -> bytes:
        return json.dumps({"email": email, "check_smtp": False}).encode()

    warmup = [body(a) for a in addresses]
    warmup += [body(rng.choice(addresses)) for _ in range(max(0, args.warmup - len(warmup)))]
    timed = [body(rng.choice(addresses)) for _ in range(args.requests)]
    client: httpx.AsyncClient | RawClient
    if args.client == "raw":
        client = RawClient(server.base, server.key)
    else:
        limits = httpx.Limits(
            max_connections=args.concurrency, max_keepalive_connections=args.concurrency
        )
        client = httpx.AsyncClient(
            base_url=server.base, headers={KEY_HEADER: server.key}, limits=limits, timeout=120
        )
    try:
        _, warm_errors = await fire(client, warmup, args.concurrency)
        server.check_alive()
        cpu = (proc_cpu_seconds(server.pid), time.process_time(), sandbox.cpu_seconds())
        started = time.perf_counter()
        latencies, errors = await fire(client, timed, args.concurrency)
        wall = time.perf_counter() - started
        after = (proc_cpu_seconds(server.pid), time.process_time(), sandbox.cpu_seconds())
    finally:
        await client.aclose()
    server.check_alive()

    def spent(i: int) -> float | None:
        a, b = cpu[i], after[i]
        return round(b - a, 2) if a is not None and b is not None else None

    ordered = sorted(latencies)
    ms = [round(1000 * percentile(ordered, q), 1) for q in (0.5, 0.9, 0.99)]
    memory = proc_memory_kib(server.pid)
    return {
        "requests": len(latencies),
        "concurrency": args.concurrency,
        "client": args.client,
        "warmup_requests": len(warmup),
        "warmup_errors": len(warm_errors),
        "wall_seconds": round(wall, 3),
        "requests_per_second": round(len(latencies) / wall, 1),
        "p50_ms": ms[0],
        "p90_ms": ms[1],
        "p99_ms": ms[2],
        "max_ms": round(1000 * ordered[-1], 1),
        "mean_ms": round(1000 * sum(ordered) / len(ordered), 1),
        "errors": len(errors),
        "error_statuses": dict(Counter(str(s) for s, _ in errors + warm_errors)),
        "error_examples": [f"{s}: {t}" for s, t in (warm_errors + errors)[:5]],
        "server_cpu_seconds": spent(0),
        "client_cpu_seconds": spent(1),
        "sandbox_cpu_seconds": spent(2),
        "server_rss_mib": round(memory.get("VmRSS", 0) / 1024, 1),
        "server_peak_rss_mib": round(memory.get("VmHWM", 0) / 1024, 1),
    }


# -- part "file" ----------------------------------------------------------------------------------


async def part_file(
    server: ServerProcess, args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    built = time.perf_counter()
    data, facts = make_csv(args.rows, args.distinct_share, args.seed)
    build_seconds = time.perf_counter() - built
    (folder / "contacts.csv").write_bytes(data)
    before = proc_memory_kib(server.pid)
    cpu_before = proc_cpu_seconds(server.pid)
    report: dict[str, Any] = {
        **facts,
        "csv_mib": round(len(data) / 2**20, 2),
        "csv_build_seconds": round(build_seconds, 2),
        "server_rss_before_mib": round(before.get("VmRSS", 0) / 1024, 1),
        "server_peak_rss_before_mib": round(before.get("VmHWM", 0) / 1024, 1),
    }
    async with httpx.AsyncClient(
        base_url=server.base, headers={KEY_HEADER: server.key}, timeout=600
    ) as client:
        started = time.perf_counter()
        answer = await client.post(
            "/a/v1/verify/file", files={"file": ("contacts.csv", data, "text/csv")}
        )
        accepted = time.perf_counter()
        report["upload_seconds"] = round(accepted - started, 3)
        if answer.status_code != 200:
            report["error"] = f"POST /verify/file: {answer.status_code} {answer.text[:500]}"
            return report
        acceptance = answer.json()["data"]
        job_id = acceptance["task_id"]
        for field in ("total_rows", "unique_emails", "email_column", "file_size"):
            report[f"accepted_{field}"] = acceptance.get(field)
        samples: list[tuple[float, float]] = []
        peak_rss = 0
        while True:
            await asyncio.sleep(POLL_SECONDS)
            server.check_alive()
            rss = proc_memory_kib(server.pid).get("VmRSS", 0)
            peak_rss = max(peak_rss, rss)
            samples.append((round(time.perf_counter() - accepted, 2), round(rss / 1024, 1)))
            polled = await client.get(f"/a/v1/verify/file/{job_id}")
            if polled.status_code != 200:
                report["error"] = f"GET job: {polled.status_code} {polled.text[:500]}"
                return report
            job = polled.json()["data"]
            if job["status"] in ("completed", "failed"):
                break
            if time.perf_counter() - accepted > args.job_timeout:
                report["error"] = f"the job did not finish in {args.job_timeout} s: {job}"
                return report
        done = time.perf_counter()
        cpu_after = proc_cpu_seconds(server.pid)
        report["job_status"] = job["status"]
        report["job_wall_seconds"] = round(done - accepted, 2)
        report["job_process_time_seconds"] = job.get("process_time_seconds")
        report["server_cpu_seconds_job"] = (
            round(cpu_after - cpu_before, 2)
            if cpu_after is not None and cpu_before is not None
            else None
        )
        for field in JOB_COUNTS:
            report[field] = job.get(field)
        if job["status"] != "completed":
            report["error"] = f"job failed: {job.get('error')}"
            return report
        finished = proc_memory_kib(server.pid)
        report["server_rss_job_done_mib"] = round(finished.get("VmRSS", 0) / 1024, 1)
        report["server_peak_rss_job_done_mib"] = round(finished.get("VmHWM", 0) / 1024, 1)
        started = time.perf_counter()
        download = await client.get(f"/a/v1/verify/file/{job_id}/results")
        report["download_seconds"] = round(time.perf_counter() - started, 3)
        if download.status_code != 200:
            report["error"] = f"GET results: {download.status_code} {download.text[:500]}"
            return report
        report["results_mib"] = round(len(download.content) / 2**20, 2)
        table = list(csv.reader(io.StringIO(download.content.decode("utf-8-sig"))))
        report["result_rows"] = len(table) - 1
        report["result_columns"] = table[0] if table else []
        status_column = table[0].index("status") if table and "status" in table[0] else None
        if status_column is not None:
            report["result_statuses"] = dict(Counter(r[status_column] for r in table[1:]))
    after = proc_memory_kib(server.pid)
    report["server_rss_after_mib"] = round(after.get("VmRSS", 0) / 1024, 1)
    report["server_peak_rss_after_mib"] = round(after.get("VmHWM", 0) / 1024, 1)
    report["server_rss_max_sampled_mib"] = round(peak_rss / 1024, 1)
    step = max(1, len(samples) // 12)
    report["rss_samples_s_mib"] = samples[::step]
    return report


# -- main -----------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    print(f"machine: {report['cpus']} cores, Python {report['python']}, store {report['store']}")
    print(f"server start (to the first answer): {report['server_startup_seconds']} s")
    single = report.get("single")
    if single:
        print(
            f"\n/verify/single, check_smtp false: {single['requests']} requests, concurrency "
            f"{single['concurrency']}, client {single['client']} (after "
            f"{single['warmup_requests']} warm-up requests)"
        )
        rows = [
            ("requests/s", f"{single['requests_per_second']}  (target {TARGET_RPS:.0f})"),
            ("wall time", f"{single['wall_seconds']} s"),
            (
                "latency ms",
                f"p50 {single['p50_ms']}  p90 {single['p90_ms']}  p99 {single['p99_ms']}  "
                f"max {single['max_ms']}  mean {single['mean_ms']}",
            ),
            ("errors", f"{single['errors']} (warm-up {single['warmup_errors']})"),
            (
                "CPU s",
                f"server {single['server_cpu_seconds']}  load generator "
                f"{single['client_cpu_seconds']}  sandbox {single['sandbox_cpu_seconds']}",
            ),
            (
                "server RSS",
                f"{single['server_rss_mib']} MiB (peak {single['server_peak_rss_mib']} MiB)",
            ),
        ]
        for name, value in rows:
            print(f"  {name:<12} {value}")
        for example in single["error_examples"]:
            print(f"  error: {example}")
    file = report.get("file")
    if file:
        print(
            f"\nfile job: {file['rows']} rows ({file['csv_mib']} MiB), "
            f"{file['distinct_addresses']} distinct addresses"
        )
        rows = [
            ("upload", f"{file.get('upload_seconds')} s"),
            (
                "job wall",
                f"{file.get('job_wall_seconds')} s (server's process_time "
                f"{file.get('job_process_time_seconds')} s, server CPU "
                f"{file.get('server_cpu_seconds_job')} s)",
            ),
            ("download", f"{file.get('download_seconds')} s ({file.get('results_mib')} MiB)"),
            ("result rows", f"{file.get('result_rows')}"),
            (
                "server RSS",
                f"before {file['server_rss_before_mib']} MiB (peak "
                f"{file['server_peak_rss_before_mib']}), job done "
                f"{file.get('server_rss_job_done_mib')} MiB (peak "
                f"{file.get('server_peak_rss_job_done_mib')}), after the download "
                f"{file.get('server_rss_after_mib')} MiB (peak "
                f"{file.get('server_peak_rss_after_mib')})",
            ),
            (
                "counts",
                ", ".join(f"{k.removesuffix('_emails')} {file.get(k)}" for k in JOB_COUNTS),
            ),
        ]
        for name, value in rows:
            print(f"  {name:<12} {value}")
        if file.get("error"):
            print(f"  error: {file['error']}")
    for problem in report["problems"]:
        print(f"FAILED: {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("single", "file", "all"), default="all")
    parser.add_argument("--requests", type=int, default=5000, help="timed /verify/single calls")
    parser.add_argument("--warmup", type=int, default=500, help="/verify/single calls first")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="load generator for /verify/single: httpx.AsyncClient, or a minimal HTTP/1.1 client",
    )
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the file job's CSV")
    parser.add_argument(
        "--distinct-share", type=float, default=0.7, help="distinct addresses / rows in the CSV"
    )
    parser.add_argument("--job-timeout", type=float, default=1800, help="seconds for the job")
    parser.add_argument(
        "--db",
        metavar="URL",
        help="postgresql://HOST:PORT/DB: a scratch database on that server (default: SQLite)",
    )
    parser.add_argument(
        "--server-workers", type=int, default=1, help="serve --workers: server processes"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="lh-service-bench-"))
    report: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "problems": [],
    }
    try:
        with (
            SandboxProcess(WORLD_FILE, folder / "sandbox") as sandbox,
            database(args.db, folder) as db,
        ):
            report["store"] = make_url(db).get_backend_name()
            key = create_key(db)
            server = ServerProcess(
                db, sandbox, folder / "server.log", key, workers=args.server_workers
            )
            report["server_workers"] = args.server_workers
            with server:
                report["server_startup_seconds"] = round(server.startup_seconds, 2)
                if args.part in ("single", "all"):
                    single = asyncio.run(part_single(server, sandbox, args))
                    report["single"] = single
                    if single["requests_per_second"] < TARGET_RPS:
                        report["problems"].append(
                            f"{single['requests_per_second']} requests/s < {TARGET_RPS:.0f}"
                        )
                    if single["errors"] or single["warmup_errors"]:
                        report["problems"].append(f"{single['errors']} requests failed")
                if args.part in ("file", "all"):
                    file = asyncio.run(part_file(server, args, folder))
                    report["file"] = file
                    if file.get("error"):
                        report["problems"].append(file["error"])
                    elif file.get("result_rows") != args.rows:
                        report["problems"].append(
                            f"{file.get('result_rows')} result rows, not {args.rows}"
                        )
                server.check_alive()
    finally:
        if args.keep:
            print(f"kept: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

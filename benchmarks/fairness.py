"""Fairness benchmark: one key's single verifications, idle and while another key's big job runs.

    .venv/bin/python benchmarks/fairness.py [--smtp] [--mix default|hostile|undefended]
        [--job-size 10000] [--job-domains 2000] [--latency-ms 20] [--dns-latency-ms 0]
        [--idle-requests 300] [--rounds 1] [--seed 1] [--db URL] [--one-sandbox] [--dns-sandbox]
        [--lock-trace] [--world-cpus 1] [--json]

Issue 15, item 6: while key A's 10,000-address job runs, key B's single verifications that need
DNS must stay within 2x of their idle p99 (docs/service.md, "Fairness").

Set-up (not timed): a world generated from ``--seed`` (``generate_world(seed, domains=
--job-domains, addresses=--job-size, latency_ms=--latency-ms)``: the job's addresses; the default
mix has greylisting and recipient-capped hosts, ``--mix undefended`` adds silent MX pairs, backup
MXes behind a silent primary and greylisting catch-all domains (what ``--mix hostile`` was before
issue 25), ``--mix hostile`` hosts that defend themselves too, as ``benchmarks/engine.py``),
plus 5,000 domains of B's own (``b<i>.fairness.test``, one mailbox each, MX on 20 hosts of B's
with the same latency), every domain answering DNS after ``--dns-latency-ms``
(``dns_latency_ms``, docs/sandbox.md). Two sandbox processes (the engine benchmark's
``SandboxProcess``): A's serves DNS for every name (as one recursive resolver would) and the
job's mail hosts; B's serves B's 20 mail hosts (pinned to 127.2.0.0/16, on the same SMTP port),
so B's SMTP sessions do not queue behind the job's on one sandbox process's CPU. On the
internet A's and B's mail hosts are other machines. ``--one-sandbox`` serves both keys' hosts
from one process, as before; ``--dns-sandbox`` answers DNS from a third process (every mail host
a name with its address there), A's mail hosts then served apart. A SQLite store (or ``--db``,
as ``benchmarks/service.py``) with two enterprise keys with custom limits far above the load;
``listhygiene serve`` as a subprocess with the sandbox's settings and every other setting the
default (``benchmarks/service.py``'s ``ServerProcess``): one server process answers the
requests, and its job runner process runs the job. Five processes share the 2 cores (six with
``--dns-sandbox``): the sandboxes, the server, its job runner and this one.

Measured, from this process, one request at a time (B is one client waiting for each answer):
``POST /a/v1/verify/single`` for ``someone@b<i>.fairness.test``, a new domain each time, so each
request needs DNS (``check_smtp`` as ``--smtp``); 20 unmeasured requests warm the server up.

1. **idle**: ``--idle-requests`` requests, nothing else running;
2. **during**: A submits its job (form B ``POST /b/v1/verify/bulk``, ``smtp_check`` as
   ``--smtp``), and as soon as the job is accepted B sends requests one after the other until the
   job is seen completed (polled every 0.25 s); a request counts when it started before the job
   was seen completed.

``--rounds N`` measures both phases N times over (idle, job, idle, job, ...), each job on
domains of its own, and reports the figures of all the rounds' requests together (and each
round's): the p99 of one round's 300 idle requests is its third-slowest request, and moves by
half between runs on a shared machine.

``--world-cpus LIST`` (for example ``1``) pins the sandboxes and this process to those CPUs and
the server and its job runner (every thread; what they start later inherits it) to the others:
on the internet the mail world and the clients are other machines, so the service's 2 cores are
its own; without it, all of them share every core.

Reported: the machine's 1-minute load average before and after; the CPU seconds each process
used during the job (the server, its job runner, the sandboxes, this one); p50/p90/p99/max latency
(``time.perf_counter()`` around each request, to its whole body) of each phase, their ratio, the
job's wall time (acceptance to the poll that sees it completed) and its counts; with
``--lock-trace`` (SQLite), each process's write transactions during the job by caller: how long
they waited for their turn at the file and then held it. Exit status 1
when the during p99 is over 2x the idle p99, a request failed, or the job did not complete.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import SandboxProcess
from listhygiene.db.engine import LOCK_TRACE_VARIABLE
from listhygiene.sandbox.generate import (
    DEFAULT_MIX,
    HOSTILE_MIX,
    UNDEFENDED_HOSTILE_MIX,
    generate_world,
)
from listhygiene.sandbox.world import World
from listhygiene.service.store import Store
from service import KEY_HEADER, ServerProcess, database, percentile

#: The issue's target: B's p99 during the job at most this many times its idle p99.
TARGET_RATIO = 2.0
B_DOMAINS = 5_000
B_HOSTS = 20
WARMUP = 20
POLL_SECONDS = 0.25
CREDITS = 100_000_000
LIMITS = {
    "a_single_per_minute": 10_000_000,
    "a_bulk_per_minute": 10_000_000,
    "a_file_per_minute": 10_000,
    "a_other_per_minute": 100_000,
}


#: Where B's mail hosts listen when they have a sandbox of their own (loopback, not A's 127.1/16).
B_HOST_NETWORK = "127.2.0"


def build_world(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, Any] | None, list[list[str]], list[str]]:
    """(the world of the sandbox that answers DNS, the world of B's own mail hosts or None with
    ``--one-sandbox``, each round's job addresses, B's addresses: one per domain of B's).

    With ``--rounds N`` the world has N times the job's domains (and addresses, a fifth more),
    and each round's job takes its own domains (every N-th of them, sorted) and the first
    ``--job-size`` of their addresses, so that no job meets the DNS answers a job before it
    left in the runner's cache."""
    generated = generate_world(
        args.seed,
        domains=args.job_domains * args.rounds,
        # each round's domains hold about job_size addresses, some more, some fewer: with a
        # fifth to spare, each job is cut to job_size
        addresses=args.job_size if args.rounds == 1 else args.job_size * args.rounds * 6 // 5,
        latency_ms=args.latency_ms,
        mix={
            "hostile": HOSTILE_MIX,
            "undefended": UNDEFENDED_HOSTILE_MIX,
            "default": DEFAULT_MIX,
        }[args.mix],
    )
    domains = sorted({a.rpartition("@")[2].lower() for a in generated.addresses})
    round_of = {domain: i % args.rounds for i, domain in enumerate(domains)}
    jobs: list[list[str]] = [[] for _ in range(args.rounds)]
    for address in generated.addresses:
        jobs[round_of[address.rpartition("@")[2].lower()]].append(address)
    jobs = [job[: args.job_size] for job in jobs]
    world: dict[str, Any] = generated.world.model_dump(mode="json", exclude_defaults=True)
    world.setdefault("domains", {})
    world.setdefault("hosts", {})
    b_world: dict[str, Any] | None = None if args.one_sandbox else {"domains": {}, "hosts": {}}
    host_names: dict[str, Any] = {}
    for k in range(B_HOSTS):
        name = f"mx{k}.b-hosts.fairness.test"
        if b_world is None:
            world["hosts"][name] = {"latency_ms": args.latency_ms}
        else:
            address = f"{B_HOST_NETWORK}.{k + 1}"
            b_world["hosts"][name] = {"latency_ms": args.latency_ms, "address": address}
            # A's sandbox only answers the name; B's sandbox listens on the address
            host_names[name] = {"a": [address]}
    b_addresses = []
    b_domains = {}
    for i in range(B_DOMAINS * args.rounds):
        name = f"b{i}.fairness.test"
        host = f"mx{i % B_HOSTS}.b-hosts.fairness.test"
        b_domains[name] = {"mx": [{"preference": 10, "host": host}], "mailboxes": ["someone"]}
        b_addresses.append(f"someone@{name}")
    if args.dns_latency_ms:
        for spec in [*world["domains"].values(), *b_domains.values()]:
            spec["dns_latency_ms"] = args.dns_latency_ms
    world["domains"].update(b_domains)
    world["domains"].update(host_names)  # answered at once, as the hosts' names always were
    if b_world is not None:
        b_world["domains"] = {n: dict(spec) for n, spec in b_domains.items()}
    random.Random(args.seed).shuffle(b_addresses)
    return world, b_world, jobs, b_addresses


def split_dns(world: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a world that only answers DNS: every host a name with its address, no mail host; the
    same world's mail hosts pinned to those addresses, for a sandbox of their own)."""
    addresses = World.model_validate(world).host_addresses()

    def address(value: str) -> str:
        return addresses.get(value, value)

    domains = {
        name: {**spec, "a": [address(v) for v in spec["a"]]} if "a" in spec else dict(spec)
        for name, spec in world["domains"].items()
    }
    for host, at in addresses.items():
        domains.setdefault(host, {"a": [at]})
    dns_world = {"domains": domains, "hosts": {}}
    if world.get("dnsbl"):
        dns_world["dnsbl"] = {z: [address(v) for v in vs] for z, vs in world["dnsbl"].items()}
    hosts_world = {
        **world,
        "hosts": {n: {**spec, "address": addresses[n]} for n, spec in world["hosts"].items()},
    }
    return dns_world, hosts_world


class PinnedSandboxProcess(SandboxProcess):
    """A sandbox whose mail hosts listen on a given SMTP port (another sandbox's), so that one
    engine setting reaches the hosts of both."""

    def __init__(self, world_path: Path, state_dir: Path, smtp_port: int) -> None:
        super().__init__(world_path, state_dir)
        self.pinned_port = smtp_port

    def __enter__(self) -> "PinnedSandboxProcess":
        done = self._cli(
            "up",
            str(self.world_path),
            "--dns-port",
            "0",
            "--smtp-port",
            str(self.pinned_port),
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sandbox up failed: {done.stderr.strip() or done.stdout.strip()}")
        return self


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of one process so far (0 where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and theirs (the server's job runner)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of ``pid`` and of its descendants on ``cpus`` only (a thread's affinity
    is its own: the process's main thread alone is not enough)."""
    for process in (pid, *descendants(pid)):
        for task in Path(f"/proc/{process}/task").glob("[0-9]*"):
            try:
                os.sched_setaffinity(int(task.name), cpus)
            except OSError:  # a thread that has just ended
                continue


def lock_trace(
    folder: Path, server: ServerProcess, windows: list[list[float]]
) -> list[dict[str, Any]]:
    """The write transactions of the server and its job runner that ended while a job ran (any
    round's; not the idle phases between), by process and caller: how many, their wait for the
    turn and their hold, in milliseconds."""
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for path in folder.glob("*.txt"):
        for line in path.read_text().splitlines():
            at, pid, nice, caller, wait_ms, hold_ms = line.split()
            if not any(start <= float(at) <= end for start, end in windows):
                continue
            # the runner's writer thread runs at the server's nice, the rest of it at its own
            role = "server" if int(pid) == server.pid else f"job runner (nice {nice})"
            groups.setdefault((role, caller), []).append((float(wait_ms), float(hold_ms)))
    rows = []
    for (role, caller), spans in sorted(groups.items()):
        waits = sorted(w for w, _ in spans)
        holds = sorted(h for _, h in spans)
        rows.append(
            {
                "process": role,
                "caller": caller,
                "transactions": len(spans),
                "wait_ms": [round(percentile(waits, q), 2) for q in (0.5, 0.99)]
                + [round(waits[-1], 2)],
                "hold_ms": [round(percentile(holds, q), 2) for q in (0.5, 0.99)]
                + [round(holds[-1], 2)],
            }
        )
    return rows


class CpuMeter:
    """CPU seconds used by the benchmark's processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, server: ServerProcess, sandboxes: dict[str, SandboxProcess]) -> None:
        self.server = server
        self.sandboxes = sandboxes
        self.before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def sample(self) -> dict[str, float]:
        runners = descendants(self.server.pid)
        here = os.times()
        sample = {
            "server": process_cpu_seconds(self.server.pid),
            "job runner": sum(process_cpu_seconds(p) for p in runners),
            "this process": here.user + here.system,
        }
        for name, sandbox in self.sandboxes.items():
            sample[name] = sandbox.cpu_seconds() or 0.0
        return sample

    def start(self) -> None:
        self.before = self.sample()

    def stop(self) -> None:
        after = self.sample()
        self.used = {k: round(after[k] - self.before.get(k, 0.0), 2) for k in after}


def figures(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    if not ordered:
        return {"requests": 0}
    return {
        "requests": len(ordered),
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 1),
        "p90_ms": round(percentile(ordered, 0.90) * 1000, 1),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


class Single:
    """B's single verifications, one at a time, each on a domain not asked before."""

    def __init__(self, client: httpx.AsyncClient, key: str, addresses: list[str], smtp: bool):
        self.client = client
        self.key = key
        self.addresses = iter(addresses)
        self.smtp = smtp
        self.errors: list[str] = []
        #: the engine's own share of each answer (``response_time``, milliseconds)
        self.engine_ms: list[float] = []

    async def one(self) -> float:
        email = next(self.addresses)
        started = time.perf_counter()
        answer = await self.client.post(
            "/a/v1/verify/single",
            headers={KEY_HEADER: self.key},
            json={"email": email, "check_smtp": self.smtp},
        )
        spent = time.perf_counter() - started
        data = answer.json().get("data") or {} if answer.status_code == 200 else {}
        if data.get("status") != "valid":
            self.errors.append(f"{email}: {answer.status_code} {answer.text[:200]}")
        self.engine_ms.append(float(data.get("response_time", 0)))
        return spent


async def one_round(
    client: httpx.AsyncClient,
    single: Single,
    cpu: CpuMeter,
    key_a: str,
    job: list[str],
    smtp: bool,
    idle: int,
) -> dict[str, Any]:
    """One round: ``idle`` requests of B's, then A's job and B's requests while it runs."""
    single.engine_ms.clear()
    idle_latencies = [await single.one() for _ in range(idle)]
    idle_engine, single.engine_ms = single.engine_ms, []

    cpu.start()
    window = [time.time()]
    submitted_at = time.perf_counter()
    answer = await client.post(
        "/b/v1/verify/bulk",
        headers={"Authorization": f"Bearer {key_a}"},
        json={"emails": job, "smtp_check": smtp},
    )
    if answer.status_code != 200:
        raise RuntimeError(f"the job was refused: {answer.status_code} {answer.text[:300]}")
    job_id = answer.json()["job_id"]
    final: dict[str, Any] = {}

    async def watch() -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            status = await client.get(
                f"/b/v1/verify/bulk/{job_id}", headers={"Authorization": f"Bearer {key_a}"}
            )
            body = status.json()
            if body.get("status") in ("completed", "failed"):
                final.update(body, wall_seconds=time.perf_counter() - submitted_at)
                return

    watcher = asyncio.ensure_future(watch())
    during: list[float] = []
    while not watcher.done():
        during.append(await single.one())
    await watcher
    cpu.stop()
    window.append(time.time())
    return {
        "idle": idle_latencies,
        "during": during,
        "idle_engine": idle_engine,
        "during_engine": single.engine_ms,
        "job": {
            "status": final.get("status"),
            "total": final.get("total"),
            "processed": final.get("processed"),
            "wall_seconds": round(final["wall_seconds"], 2),
        },
        "cpu_seconds_during": cpu.used,
        "job_window": window,
    }


async def measure(
    server: ServerProcess,
    cpu: CpuMeter,
    key_a: str,
    key_b: str,
    jobs: list[list[str]],
    b: list[str],
    smtp: bool,
    idle: int,
) -> dict[str, Any]:
    """Every round's figures, and the figures of all rounds' requests together."""
    async with httpx.AsyncClient(base_url=server.base, timeout=120) as client:
        single = Single(client, key_b, b, smtp)
        for _ in range(WARMUP):
            await single.one()
        rounds = []
        for job in jobs:
            rounds.append(await one_round(client, single, cpu, key_a, job, smtp, idle))
            server.check_alive()
    pooled = {
        phase: [x for r in rounds for x in r[phase]]
        for phase in ("idle", "during", "idle_engine", "during_engine")
    }
    cpu_used: dict[str, float] = {}
    for r in rounds:
        for name, seconds in r["cpu_seconds_during"].items():
            cpu_used[name] = round(cpu_used.get(name, 0.0) + seconds, 2)
    return {
        "idle": figures(pooled["idle"]),
        "during": figures(pooled["during"]),
        "idle_engine": figures([ms / 1000 for ms in pooled["idle_engine"]]),
        "during_engine": figures([ms / 1000 for ms in pooled["during_engine"]]),
        "rounds": [
            {
                "idle": figures(r["idle"]),
                "during": figures(r["during"]),
                "p99_ratio": ratio(figures(r["idle"]), figures(r["during"])),
                "job": r["job"],
            }
            for r in rounds
        ],
        "job": {
            "status": "completed"
            if all(r["job"]["status"] == "completed" for r in rounds)
            else next(r["job"]["status"] for r in rounds if r["job"]["status"] != "completed"),
            "total": sum(r["job"]["total"] or 0 for r in rounds),
            "processed": sum(r["job"]["processed"] or 0 for r in rounds),
            "wall_seconds": round(sum(r["job"]["wall_seconds"] for r in rounds), 2),
        },
        "cpu_seconds_during": cpu_used,
        "job_window": [rounds[0]["job_window"][0], rounds[-1]["job_window"][1]],
        "job_windows": [r["job_window"] for r in rounds],
        "errors": single.errors[:5],
        "error_count": len(single.errors),
    }


def ratio(idle: dict[str, float], during: dict[str, float]) -> float:
    """B's p99 during the job over its idle p99 (infinite when nothing was measured during)."""
    if not during.get("requests") or not idle.get("requests"):
        return float("inf")
    return round(during["p99_ms"] / idle["p99_ms"], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smtp", action="store_true", help="probe SMTP (job and singles)")
    parser.add_argument(
        "--mix",
        choices=("default", "hostile", "undefended"),
        default="default",
        help="the job's world: the default mix (greylisting hosts), with silent hosts too "
        "(undefended), or with hosts that defend themselves too (hostile)",
    )
    parser.add_argument("--job-size", type=int, default=10_000)
    parser.add_argument("--job-domains", type=int, default=2_000)
    parser.add_argument("--latency-ms", type=int, default=20, help="mail hosts' reply latency")
    parser.add_argument("--dns-latency-ms", type=int, default=0, help="every domain's DNS delay")
    parser.add_argument("--idle-requests", type=int, default=300)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="idle phase then job this many times (each job on domains of its own); the "
        "figures are those of every round's requests together, each round's shown too",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", help="the store (a scratch PostgreSQL database when postgresql)")
    parser.add_argument(
        "--one-sandbox",
        action="store_true",
        help="serve B's mail hosts from the job's sandbox process too (the first measurements)",
    )
    parser.add_argument(
        "--dns-sandbox",
        action="store_true",
        help="answer DNS from a sandbox process of its own (a resolver is not a mail host)",
    )
    parser.add_argument(
        "--lock-trace",
        action="store_true",
        help="SQLite: how long each process's write transactions waited for their turn and held "
        "it during the job, by caller (LISTHYGIENE_SQLITE_LOCK_TRACE, db/engine.py)",
    )
    parser.add_argument(
        "--world-cpus",
        help="CPUs (comma-separated) for the sandboxes and this client; the service gets the rest",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    world_cpus = {int(c) for c in args.world_cpus.split(",")} if args.world_cpus else None

    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    world, b_world, jobs, b_addresses = build_world(args)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lh-fairness-") as tmp, ExitStack() as stack:
        folder = Path(tmp)

        def start(name: str, spec: dict[str, Any], port: int | None = None) -> SandboxProcess:
            """A sandbox process serving ``spec`` (its mail hosts on ``port`` when given)."""
            path = folder / f"{name}.json"
            path.write_text(json.dumps(spec))
            (folder / name).mkdir()
            if port is None:
                return stack.enter_context(SandboxProcess(path, folder / name))
            return stack.enter_context(PinnedSandboxProcess(path, folder / name, port))

        if args.dns_sandbox:  # DNS for every name apart, A's hosts in a sandbox of their own
            dns_world, a_world = split_dns(world)
            sandbox = start("dns", dns_world)
            sandboxes = {
                "sandbox (DNS)": sandbox,
                "sandbox (A's hosts)": start("a", a_world, sandbox.smtp_port),
            }
        else:
            sandbox = start("world", world)
            sandboxes = {"sandbox (A's hosts, DNS)" if b_world else "sandbox": sandbox}
        if b_world is not None:
            sandboxes["sandbox (B's hosts)"] = start("b", b_world, sandbox.smtp_port)
        if args.lock_trace:  # inherited by the server and its job runner
            (folder / "lock-trace").mkdir()
            os.environ[LOCK_TRACE_VARIABLE] = str(folder / "lock-trace")
        db = stack.enter_context(database(args.db, folder))
        with Store(db) as store:
            key_a, _ = store.create_key("job", CREDITS, "enterprise", limits=LIMITS)
            key_b, _ = store.create_key("single", CREDITS, "enterprise", limits=LIMITS)
        server = stack.enter_context(ServerProcess(db, sandbox, folder / "server.log", key_b))
        if world_cpus is not None:
            service_cpus = os.sched_getaffinity(0) - world_cpus
            for running in sandboxes.values():
                pin(json.loads((running.state_dir / "state.json").read_text())["pid"], world_cpus)
            pin(os.getpid(), world_cpus)  # this client (the service's processes are not its own)
            pin(server.pid, service_cpus)
        cpu = CpuMeter(server, sandboxes)
        report = asyncio.run(
            measure(server, cpu, key_a, key_b, jobs, b_addresses, args.smtp, args.idle_requests)
        )
        if args.lock_trace:
            report["lock_trace"] = lock_trace(folder / "lock-trace", server, report["job_windows"])
    # The machine's load (1-minute average) when the run started and ended: the figures are
    # only comparable between runs at a similar load (2 cores, shared with other work).
    report["load"] = {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}
    report["settings"] = {
        "smtp": args.smtp,
        "mix": args.mix,
        "job_size": args.job_size,
        "job_domains": args.job_domains,
        "latency_ms": args.latency_ms,
        "dns_latency_ms": args.dns_latency_ms,
        "sandboxes": (1 if args.one_sandbox else 2) + args.dns_sandbox,
        "store": "postgresql" if args.db and args.db.startswith("postgres") else "sqlite",
        "world_cpus": sorted(world_cpus) if world_cpus is not None else None,
        "rounds": args.rounds,
    }
    report["p99_ratio"] = ratio(report["idle"], report["during"])
    ok = (
        report["p99_ratio"] <= TARGET_RATIO
        and not report["error_count"]
        and report["job"]["status"] == "completed"
    )
    report["target_met"] = ok
    if args.json:
        print(json.dumps(report))
    else:
        s = report["settings"]
        print(
            f"key B's /a/v1/verify/single (check_smtp={str(s['smtp']).lower()}, a new domain each "
            f"time, DNS latency {s['dns_latency_ms']} ms) while key A's {s['job_size']:,}-address "
            f"job over {s['job_domains']:,} domains ({s['mix']} mix) runs; {s['store']} store, "
            f"{s['sandboxes']} sandbox process(es)"
            + (f", the world on CPU {s['world_cpus']}" if s["world_cpus"] else "")
            + ":"
        )
        for phase in ("idle", "during"):
            f = report[phase]
            print(
                f"  {phase:<7} {f['requests']:>5} requests  p50 {f['p50_ms']:>7} ms  "
                f"p90 {f['p90_ms']:>7} ms  p99 {f['p99_ms']:>7} ms  max {f['max_ms']:>7} ms"
            )
        print(f"  p99 during / idle: {report['p99_ratio']} (target <= {TARGET_RATIO})")
        if len(report["rounds"]) > 1:
            each = ", ".join(
                f"{r['idle']['p99_ms']} / {r['during']['p99_ms']} ms ({r['p99_ratio']})"
                for r in report["rounds"]
            )
            print(f"  each round's p99 idle / during (ratio): {each}")
        print(
            f"  machine load (1-minute average): {report['load']['before']} before, "
            f"{report['load']['after']} after"
        )
        for phase in ("idle", "during"):
            f = report[f"{phase}_engine"]
            print(
                f"  engine's share ({phase}, response_time): p50 {f['p50_ms']} ms  "
                f"p99 {f['p99_ms']} ms  max {f['max_ms']} ms"
            )
        used = ", ".join(f"{k} {v} s" for k, v in report["cpu_seconds_during"].items())
        print(f"  CPU seconds during the job: {used}")
        if "lock_trace" in report:
            print("  SQLite write transactions during the job (p50 / p99 / max ms):")
            for row in report["lock_trace"]:
                wait, hold = (" / ".join(f"{x:g}" for x in row[k]) for k in ("wait_ms", "hold_ms"))
                print(
                    f"    {row['process']:<20} {row['caller']:<16} {row['transactions']:>5}  "
                    f"wait {wait}  hold {hold}"
                )
        j = report["job"]
        print(
            f"  job: {j['status']}, {j['processed']}/{j['total']} addresses in "
            f"{j['wall_seconds']} s"
        )
        if report["error_count"]:
            print(f"  {report['error_count']} failed requests, e.g. {report['errors']}")
        print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""SMTP sessions per mail host: one list cleaned by one process, then by several processes at
once, as a fleet of workers does it (issue 18; docs/deploy.md, "Politeness across workers").

Mail hosts judge the whole fleet, not one worker: a list split over N workers must not open more
sessions on a mail host than one process opens. Set-up (not timed): a world generated from
``--seed`` (``generate_world``, default mix: shared hosting, greylisting, too-many-recipients
caps, catch-all and role addresses), an address list of ``--addresses`` rows, and the sandbox
running in this process, where every mail host counts the sessions it accepts. Then, each on a
fresh sandbox (greylisting hosts remember what they have seen):

1. ``one process``: ``listhygiene clean list.csv`` in one process;
2. ``by domain``: ``split_by_domain`` (the mapped-chunks path of Airflow and Dagster) into
   ``--chunks`` chunk files, each cleaned by its own ``listhygiene clean`` process, all at once,
   then ``merge_chunks`` into one run's folder;
3. ``by address hash`` (what the mapped DAG did before issue 18, for comparison): the same
   processes over chunks cut by a hash of the address, so a domain's addresses land in every
   chunk.

Printed for each: wall time, sessions in all, the busiest hosts, and how many hosts saw more
sessions than with one process; the machine's 1-minute load average is printed with the
figures (figures taken at a load over 1.5 are upper bounds)::

    .venv/bin/python benchmarks/fleet.py                    # 10,000 addresses, 2 chunks
    .venv/bin/python benchmarks/fleet.py --chunks 4 --json

**The defended round** (``--round defended``, issue 26; docs/deploy.md, "One budget for the
fleet"): a world whose mail hosts defend themselves as a fleet meets them. ``--hosts`` shared
hosting servers (four domains each, so a split by domain sends each to both processes)
each allow two connections at once from one client and answer ``421`` past that; a third of the
addresses are on one big provider (``google``: a consumer domain and Workspace domains, MX hosts
under ``google.com``) whose front door allows the engine's own Google budget (sessions at once,
and new sessions over ten seconds) and bans a client that goes past it (``421 4.7.28``, for
``--ban-seconds``). The list is cleaned by one process, then split by domain and cleaned by
``--chunks`` processes at once with a shared store (``--shared-limits``, the machine's Redis by
default) and without one. Printed for each: wall time, limits met and bans as the hosts counted
them, hosts and providers above their limit of sessions at once, verdicts differing from the one
process's, and how the big provider's addresses were spread over the processes::

    .venv/bin/python benchmarks/fleet.py --round defended            # 3,000 addresses, 300 hosts
"""

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from listhygiene.pipeline.chunks import merge_chunks, split_by_domain
from listhygiene.sandbox import Sandbox
from listhygiene.sandbox.generate import generate_world

BIN = Path(sys.executable).parent
#: The reasons of an unknown verdict (PRODUCT.md, row 5 of the decision table).
UNKNOWN_REASONS = frozenset(
    {"dns_error", "smtp_unreachable", "smtp_timeout", "greylisted", "rate_limited", "blocked"}
)


def clean_processes(sources: Sequence[Path], outs: Sequence[Path], env: Mapping[str, str]) -> float:
    """``listhygiene clean`` of each source, every one in its own process, all at once; the wall
    time until the last has finished."""
    started = time.perf_counter()
    running = [
        subprocess.Popen(
            [
                str(BIN / "listhygiene"),
                "clean",
                str(source),
                "--out",
                str(out),
                "--verdicts",
                "none",
                "--json",
            ],
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for source, out in zip(sources, outs, strict=True)
    ]
    for process in running:
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"listhygiene clean exited {process.returncode}:\n{err[-3000:]}")
    return time.perf_counter() - started


def sessions(sandbox: Sandbox, hosts: Sequence[str]) -> dict[str, int]:
    """Sessions each mail host has accepted since the last reset."""
    return {host: sandbox.stats(host).connections for host in hosts}


def environment(sandbox: Sandbox, smtp_timeout: float, dns_timeout: float) -> dict[str, str]:
    """This environment, pointed at ``sandbox`` (and no verdict store). Long time-outs: on a
    loaded machine the sandbox, a thread of this process, answers late (its DNS server most,
    with several engines asking at once), and time-outs would change verdicts and sessions from
    run to run."""
    return {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "bench.test",
        "LISTHYGIENE_SMTP_TIMEOUT": str(smtp_timeout),
        "LISTHYGIENE_DNS_TIMEOUT": str(dns_timeout),
    }


def split_by_hash(source: Path, folder: Path, chunks: int) -> list[Path]:
    """The old split: each row to the chunk of a hash of its address."""
    folder.mkdir(parents=True, exist_ok=True)
    header, *rows = source.read_text(encoding="utf-8").splitlines()
    parts: list[list[str]] = [[] for _ in range(chunks)]
    for row in rows:
        digest = hashlib.sha256(row.strip().lower().encode()).digest()
        parts[digest[0] % chunks].append(row)
    paths = []
    for index, part in enumerate(parts):
        path = folder / f"hash-{index}.csv"
        path.write_text("\n".join([header, *part]) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def verdicts(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows by status and addresses retried, added up over the runs' summaries: the sessions
    compare only when the verdicts agree."""
    by_status: dict[str, int] = {}
    unknown: dict[str, int] = {}
    retried = 0
    for summary in summaries:
        for status, n in summary["rows"]["by_status"].items():
            by_status[status] = by_status.get(status, 0) + int(n)
        for reason, n in summary["rows"].get("by_reason", {}).items():
            if reason in UNKNOWN_REASONS:
                unknown[reason] = unknown.get(reason, 0) + int(n)
        retried += int(summary["addresses"].get("retried", 0))
    return {
        "by_status": {s: n for s, n in by_status.items() if n},
        "unknown_reasons": unknown,
        "retried": retried,
    }


def summaries(outs: Sequence[Path]) -> list[dict[str, Any]]:
    return [json.loads((out / "summary.json").read_text()) for out in outs]


def figures(counts: Mapping[str, int], single: Mapping[str, int], seconds: float) -> dict[str, Any]:
    busiest = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]
    return {
        "wall_seconds": round(seconds, 2),
        "sessions": sum(counts.values()),
        "max_per_host": max(counts.values(), default=0),
        "busiest_hosts": dict(busiest),
        "hosts_over_one_process": sum(1 for h, n in counts.items() if n > single.get(h, 0)),
        "extra_sessions_over_one_process": sum(
            max(0, n - single.get(h, 0)) for h, n in counts.items()
        ),
    }


#: The big provider's MX hosts: names under google.com, which the engine reads as Google's.
GOOGLE_HOSTS = ("gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com")
#: Domains on each shared hosting server: a split by domain sends some to each process.
DOMAINS_A_HOST = 4
#: How many new sessions the provider counts together (its window).
PROVIDER_WINDOW_SECONDS = 10


def defended_world(
    hosts: int, addresses: int, latency_ms: int, ban_seconds: float
) -> tuple[dict[str, Any], list[str], dict[str, int]]:
    """The world, the list (every third address on the provider) and the hosts' limits."""
    from listhygiene.engine.provider_limits import provider_budgets
    from listhygiene.engine.settings import EngineSettings

    settings = EngineSettings()
    google = provider_budgets(
        settings.provider_limits,
        concurrency=settings.provider_concurrency,
        rate=settings.provider_rate,
    )["google"]
    concurrency, rate = int(google[0]), float(google[1])
    per_host = min(2, settings.host_concurrency)
    domains: dict[str, Any] = {}
    host_specs: dict[str, Any] = {}
    people = [f"user{i}" for i in range(8)]
    for i in range(hosts):
        host = f"mx{i}.hosting.test"
        host_specs[host] = {"latency_ms": latency_ms, "max_connections_per_client": per_host}
        for j in range(DOMAINS_A_HOST):
            domains[f"org{i}-{j}.test"] = {
                "mx": [{"preference": 10, "host": host}],
                "mailboxes": people,
            }
    google_domains = ["gmail.test", *[f"workspace{i}.test" for i in range(20)]]
    for name in google_domains:
        domains[name] = {
            "mx": [{"preference": 5 * (k + 1), "host": h} for k, h in enumerate(GOOGLE_HOSTS)],
            "mailboxes": people,
        }
    for host in GOOGLE_HOSTS:
        host_specs[host] = {"latency_ms": latency_ms}
    world = {
        "domains": domains,
        "hosts": host_specs,
        "providers": {
            "google": {
                "hosts": list(GOOGLE_HOSTS),
                "max_concurrent": concurrency,
                # the engine's burst (its sessions at once) and its rate over the window, with
                # a tenth to spare: a provider's limit is not the budget's to the session
                "max_sessions": concurrency + math.ceil(rate * PROVIDER_WINDOW_SECONDS * 1.1),
                "window_ms": PROVIDER_WINDOW_SECONDS * 1000,
                "ban_ms": int(ban_seconds * 1000),
                "style": "gmail",
            }
        },
    }
    small = [d for d in domains if d.startswith("org")]
    listed = []
    for n in range(addresses):
        # a third on the provider (half of those on the consumer domain), the rest spread
        if n % 3 == 0:
            domain = "gmail.test" if n % 6 == 0 else google_domains[1 + (n // 6) % 20]
        else:
            domain = small[(n * 7919) % len(small)]
        local = people[(n // 5) % len(people)] if n % 10 else f"nobody{n}"
        listed.append(f"{local}@{domain}")
    limits = {host: per_host for host in host_specs if host not in GOOGLE_HOSTS}
    return world, listed, {**limits, "google": concurrency}


def statuses(folder: Path) -> dict[str, tuple[str, str | None]]:
    """Each address's status and reason in an output folder."""
    import pyarrow.parquet as pq

    from listhygiene.pipeline.quality import STATUSES

    out: dict[str, tuple[str, str | None]] = {}
    for status in STATUSES:
        table = pq.read_table(folder / f"{status}.parquet", columns=["email", "status", "reason"])
        emails, found, reasons = (table.column(c).to_pylist() for c in table.column_names)
        for email, st, reason in zip(emails, found, reasons, strict=True):
            out[email] = (st, reason)
    return out


def defended_figures(sandbox: Sandbox, limits: Mapping[str, int], seconds: float) -> dict[str, Any]:
    """What the hosts counted: limits met, bans, the most sessions at once, above the limit."""
    said = sandbox.defence_report()
    over = {
        host: sandbox.stats(host).max_held
        for host, cap in limits.items()
        if host != "google" and sandbox.stats(host).max_held > cap
    }
    provider = said["providers"]["google"]
    return {
        "wall_seconds": round(seconds, 2),
        "limits_met": said["limits_met"],
        "bans": said["bans"],
        "hosts_above_their_limit": len(over),
        "most_at_once_one_host": max(
            (sandbox.stats(h).max_held for h in limits if h != "google"), default=0
        ),
        "provider_most_at_once": provider["max_active"],
        "provider_limit": limits["google"],
        "provider_bans": provider["bans"],
    }


def defended_round(args: argparse.Namespace) -> dict[str, Any]:
    """One process; ``--chunks`` processes with a shared store; the same without one."""
    world, listed, limits = defended_world(
        args.hosts, args.addresses, args.latency_ms, args.ban_seconds
    )
    timeouts = (args.smtp_timeout, args.dns_timeout)
    report: dict[str, Any] = {
        "round": "defended",
        "addresses": len(listed),
        "mail_hosts": len(world["hosts"]),
        "domains": len(world["domains"]),
        "chunks": args.chunks,
        "shared_limits": args.shared_limits,
        "cpus": os.cpu_count(),
        "load_average_1min": {"before": round(os.getloadavg()[0], 2)},
    }
    if args.shared_limits.startswith("redis"):
        import redis

        with redis.Redis.from_url(args.shared_limits) as client:
            client.flushdb()  # what an earlier run learnt of the same hosts lives an hour
    with tempfile.TemporaryDirectory(prefix="listhygiene-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "list.csv"
        source.write_text(
            "id,email\n" + "".join(f"{n},{a}\n" for n, a in enumerate(listed, 1)),
            encoding="utf-8",
        )
        with Sandbox(world) as sandbox:
            seconds = clean_processes([source], [tmp / "single"], environment(sandbox, *timeouts))
            report["one process"] = defended_figures(sandbox, limits, seconds)
        single = statuses(tmp / "single")
        for name, store in (("shared store", args.shared_limits), ("no store", "none")):
            folder = tmp / name.replace(" ", "-")
            paths = [
                Path(p)
                for p in split_by_domain(
                    source, folder / "chunks", chunks=args.chunks, shared_limits=store
                )
            ]
            outs = [folder / f"chunk-{i}" for i in range(len(paths))]
            with Sandbox(world) as sandbox:
                env = {**environment(sandbox, *timeouts), "LISTHYGIENE_SHARED_LIMITS": store}
                seconds = clean_processes(paths, outs, env)
                figures_ = defended_figures(sandbox, limits, seconds)
            merged = merge_chunks(
                summaries(outs), folder / "merged", manifest=folder / "chunks" / "split.json"
            )
            got = statuses(folder / "merged")
            provider_rows = [_google_rows(path) for path in paths]
            report[name] = {
                **figures_,
                "verdicts_differing_from_one_process": sum(
                    1 for email, verdict in single.items() if got.get(email) != verdict
                ),
                "merged_rows": merged["rows"]["total"],
                "provider_rows_per_process": provider_rows,
            }
    report["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    return report


def _google_rows(chunk: Path) -> int:
    """The rows of a chunk file on the big provider's domains."""
    import pyarrow.parquet as pq

    emails = pq.read_table(chunk, columns=["email"]).column("email").to_pylist()
    return sum(1 for e in emails if e.endswith("@gmail.test") or "@workspace" in e)


def print_defended(report: Mapping[str, Any]) -> None:
    load = report["load_average_1min"]
    print(
        f"defended round: {report['addresses']:,} addresses, {report['domains']} domains on "
        f"{report['mail_hosts']} mail hosts, a third on one provider; {report['chunks']} "
        f"processes; {report['cpus']} cpus, 1-min load {load['before']} before, {load['after']} "
        "after"
    )
    print(
        f"{'run':<14} {'wall s':>7} {'limits met':>11} {'bans':>5} {'hosts over':>11} "
        f"{'most/host':>10} {'provider most':>14} {'verdicts differ':>16}"
    )
    for name in ("one process", "shared store", "no store"):
        row = report[name]
        print(
            f"{name:<14} {row['wall_seconds']:>7} {row['limits_met']:>11} {row['bans']:>5} "
            f"{row['hosts_above_their_limit']:>11} {row['most_at_once_one_host']:>10} "
            f"{row['provider_most_at_once']:>8} of {row['provider_limit']:<3} "
            f"{row.get('verdicts_differing_from_one_process', 0):>16}"
        )
    for name in ("shared store", "no store"):
        print(
            f"  {name}: the provider's rows per process {report[name]['provider_rows_per_process']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round", choices=("sessions", "defended"), default="sessions")
    parser.add_argument("--hosts", type=int, default=300, help="defended: shared hosts")
    parser.add_argument("--ban-seconds", type=float, default=30.0, help="defended: a ban")
    parser.add_argument(
        "--shared-limits",
        default=os.environ.get("LISTHYGIENE_TEST_REDIS", "redis://127.0.0.1:6379") + "/8",
        help="defended: the store the processes share (flushed first when Redis)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--addresses", type=int, default=10_000)
    parser.add_argument("--domains", type=int, default=1_000)
    parser.add_argument("--latency-ms", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--smtp-timeout", type=float, default=30.0, help="per SMTP step")
    parser.add_argument("--dns-timeout", type=float, default=20.0, help="per DNS lookup")
    parser.add_argument("--no-hash", action="store_true", help="skip the by-address-hash run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.round == "defended":
        if args.addresses == 10_000:
            args.addresses = 3_000
        defended = defended_round(args)
        if args.json:
            print(json.dumps(defended, indent=1))
        else:
            print_defended(defended)
        return 0

    generated = generate_world(
        args.seed, domains=args.domains, addresses=args.addresses, latency_ms=args.latency_ms
    )
    hosts = sorted(generated.world.hosts)
    timeouts = (args.smtp_timeout, args.dns_timeout)
    report: dict[str, Any] = {
        "addresses": args.addresses,
        "domains": args.domains,
        "mail_hosts": len(hosts),
        "chunks": args.chunks,
        "cpus": os.cpu_count(),
        "load_average_1min": {"before": round(os.getloadavg()[0], 2)},
    }
    with tempfile.TemporaryDirectory(prefix="listhygiene-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "list.csv"
        source.write_text(
            "id,email\n" + "".join(f"{n},{a}\n" for n, a in enumerate(generated.addresses, 1)),
            encoding="utf-8",
        )
        # A fresh sandbox for each run: greylisting hosts remember the triplets they have
        # seen, and a run after another would find them accepted at once.
        with Sandbox(generated.world) as sandbox:
            env = environment(sandbox, *timeouts)
            seconds = clean_processes([source], [tmp / "single"], env)
            single = sessions(sandbox, hosts)
        report["one process"] = {
            **figures(single, single, seconds),
            **verdicts(summaries([tmp / "single"])),
        }

        split = split_by_domain(source, tmp / "chunks", chunks=args.chunks)
        chunk_paths = [Path(p) for p in split]
        outs = [tmp / f"chunk-{i}" for i in range(len(chunk_paths))]
        with Sandbox(generated.world) as sandbox:
            seconds = clean_processes(chunk_paths, outs, environment(sandbox, *timeouts))
            by_domain = sessions(sandbox, hosts)
        merged = merge_chunks(
            summaries(outs), tmp / "merged", manifest=tmp / "chunks" / "split.json"
        )
        report["by domain"] = {
            **figures(by_domain, single, seconds),
            **verdicts(summaries(outs)),
            "merged_rows": merged["rows"]["total"],
        }

        if not args.no_hash:
            hashed = split_by_hash(source, tmp / "hashed", args.chunks)
            outs = [tmp / f"hash-out-{i}" for i in range(len(hashed))]
            with Sandbox(generated.world) as sandbox:
                seconds = clean_processes(hashed, outs, environment(sandbox, *timeouts))
                by_hash = sessions(sandbox, hosts)
            report["by address hash"] = {
                **figures(by_hash, single, seconds),
                **verdicts(summaries(outs)),
            }
    report["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)

    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    load = report["load_average_1min"]
    print(
        f"{args.addresses:,} addresses, {args.domains:,} domains on {len(hosts)} mail hosts, "
        f"{args.chunks} chunks; {report['cpus']} cpus, 1-min load {load['before']} before, "
        f"{load['after']} after (over 1.5: times are upper bounds)"
    )
    print(f"{'run':<17} {'wall s':>7} {'sessions':>9} {'max/host':>9} {'hosts over 1p':>14}")
    for name in ("one process", "by domain", "by address hash"):
        if name in report:
            row = report[name]
            print(
                f"{name:<17} {row['wall_seconds']:>7} {row['sessions']:>9} "
                f"{row['max_per_host']:>9} {row['hosts_over_one_process']:>14}"
            )
    for name in ("one process", "by domain", "by address hash"):
        if name in report:
            row = report[name]
            print(f"  {name}: busiest hosts {row['busiest_hosts']}")
            print(f"  {name}: rows by status {row['by_status']}")
            print(f"  {name}: unknown by reason {row['unknown_reasons']}")
    print(f"  merged folder rows: {report['by domain']['merged_rows']:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

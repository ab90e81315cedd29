"""Feedback benchmark (issue 29: "a sample of 10,000 events applies in <= 2 s"; docs/feedback.md).

    .venv/bin/python benchmarks/feedback.py [--events 10000] [--addresses 100000]
        [--backends sqlite,postgresql] [--seed 1]

Generates ``--events`` events in the generic shape (a CSV; a mix of deliveries, opens, clicks,
replies, hard and soft bounces, complaints and unsubscriptions over a fifth as many addresses)
and, for each store (a SQLite file; a new PostgreSQL database of ``LISTHYGIENE_BENCH_PG``,
default the test server, dropped afterwards):

1. ``add``: ``listhygiene.pipeline.add_feedback`` of the file (read, normalised, hashed, kept);
2. ``add again``: the same file a second time (every event already there);
3. ``apply``: what a run does with them: the store's events looked up for a results table of
   ``--addresses`` addresses (the event addresses among them) and the rule applied
   (``Feedback.apply``), as a run's job of that size.

Prints wall time and this process's CPU seconds of each step, with the 1-minute load average
before and after (2 shared cores: wall times at a load above 1.5 are upper bounds). Exit 1 when
``add`` or ``apply`` takes more than 2 s of wall time.
"""

import argparse
import csv
import os
import random
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

TARGET = 2.0
EVENTS = (
    ("delivered", None, 40),
    ("opened", None, 25),
    ("clicked", None, 12),
    ("replied", None, 3),
    ("bounced", "hard", 8),
    ("bounced", "soft", 6),
    ("complained", None, 3),
    ("unsubscribed", None, 3),
)


def load() -> float:
    return os.getloadavg()[0]


def write_events(path: Path, count: int, seed: int) -> list[str]:
    """``count`` events over ``count // 5`` addresses; the addresses."""
    rng = random.Random(seed)
    addresses = [f"person{i}@domain{i % 500}.test" for i in range(max(1, count // 5))]
    kinds = [(e, b) for e, b, weight in EVENTS for _ in range(weight)]
    start = datetime.now(UTC) - timedelta(days=20)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["email", "event", "at", "bounce_type"])
        for _ in range(count):
            event, bounce = rng.choice(kinds)
            at = start + timedelta(seconds=rng.randrange(20 * 86400))
            writer.writerow([rng.choice(addresses), event, at.isoformat(), bounce or ""])
    return addresses


def results_for(addresses: list[str], total: int) -> Any:
    """A results table of ``total`` addresses, ``addresses`` among them, a fifth catch-all."""
    from listhygiene.results import KEY, VerificationResult, results_table
    from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome

    every = addresses + [f"other{i}@domain{i % 500}.test" for i in range(total - len(addresses))]
    templates = [
        VerificationResult.from_facts(
            "x@domain.test",
            Facts(
                syntax_valid=True,
                dns=DnsOutcome.MX,
                smtp_checked=True,
                mailbox=MailboxOutcome.ACCEPTED,
                is_catchall=catchall,
            ),
            domain="domain.test",
        )
        for catchall in (False, True)
    ]
    table = results_table([("x@domain.test", templates[i % 5 == 0]) for i in range(2)])
    import pyarrow as pa
    import pyarrow.compute as pc

    picks = pa.array([0 if i % 5 == 0 else 1 for i in range(total)], pa.int64())  # 0: catch-all
    table = table.take(picks)
    names = pa.array(every, pa.string())
    table = table.set_column(table.schema.get_field_index(KEY), KEY, names)
    return table.set_column(
        table.schema.get_field_index("email"), "email", pc.cast(names, pa.string())
    )


def timed(label: str, work: Any) -> tuple[Any, dict[str, Any]]:
    before = load()
    wall, cpu = time.perf_counter(), time.process_time()
    value = work()
    figures = {
        "step": label,
        "wall_s": round(time.perf_counter() - wall, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
        "load": f"{before:.2f} / {load():.2f}",
    }
    return value, figures


def bench(url: str, events: Path, addresses: list[str], total: int) -> list[dict[str, Any]]:
    from listhygiene.pipeline import add_feedback
    from listhygiene.results import KEY
    from listhygiene.verdicts import VerdictStore
    from listhygiene.verdicts.feedback import Feedback

    rows = []
    with VerdictStore(url) as store:
        added, figures = timed("add", lambda: add_feedback([events], verdicts=store))
        rows.append({**figures, "events_added": added.added})
        again, figures = timed("add again", lambda: add_feedback([events], verdicts=store))
        rows.append({**figures, "events_added": again.added})
        table = results_for(addresses, total)
        feedback = Feedback(store, engaged_max_age=30 * 86400)
        (_, taught), figures = timed("apply", lambda: feedback.apply(table, key=KEY))
        rows.append({**figures, **taught.as_dict()})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--addresses", type=int, default=100_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lh-feedback-bench-"))
    events = tmp / "events.csv"
    addresses = write_events(events, args.events, args.seed)
    print(
        f"{args.events:,} events over {len(addresses):,} addresses; results of {args.addresses:,}"
    )
    slow = False
    for backend in args.backends.split(","):
        url, drop = f"sqlite:///{tmp / 'verdicts.sqlite'}", None
        if backend == "postgresql":
            url, drop = new_database()
        try:
            for row in bench(url, events, addresses, args.addresses):
                print(f"{backend:10} " + "  ".join(f"{k}={v}" for k, v in row.items()))
                slow |= row["step"] in ("add", "apply") and row["wall_s"] > TARGET
        finally:
            if drop is not None:
                drop()
    print("target: add and apply each <= 2 s:", "missed" if slow else "met")
    return 1 if slow else 0


def new_database() -> tuple[str, Any]:
    """A new PostgreSQL database on the benchmark server, and how to drop it."""
    import psycopg

    admin = os.environ.get("LISTHYGIENE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
    name = f"lh_feedback_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base = admin.rsplit("/", 1)[0]

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return f"{base}/{name}", drop


if __name__ == "__main__":
    sys.exit(main())

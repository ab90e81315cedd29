"""The job runner's result saves: what a 10,000-address job's saves cost the store.

    .venv/bin/python benchmarks/saves.py [--db URL] [--addresses 10000] [--batch 100]
        [--copies-per-save] [--json]

A form B job of ``--addresses`` addresses over 2,000 domains (one in ten submitted twice) is
written to a scratch store (a SQLite file, or a new PostgreSQL database with ``--db``, as
``benchmarks/service.py``), claimed, and its results saved in batches of ``--batch`` with
``save_prepared``, as the job worker does (``service/worker.py``): the worker reads once per
job which addresses were submitted more than once (``duplicate_addresses``);
``--copies-per-save`` reads them for each batch instead, as the worker did before
(docs/service.md, "Fairness").

Reported: wall seconds of all the saves, this process's CPU seconds, and on a local
PostgreSQL the CPU seconds of the connection's server process (``/proc/PID/stat`` of
``pg_backend_pid()``; the pool's one connection); per save, the mean milliseconds. The results
are serialised before the timing starts (``prepare_results``, outside the transaction).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from listhygiene.results import VerificationResult
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import (
    claim_job,
    create_bulk_job,
    duplicate_addresses,
    prepare_results,
    save_prepared,
)
from listhygiene.statuses import Facts
from service import database


def process_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of a local process, None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, addresses: int, batch: int, copies_per_save: bool) -> dict[str, Any]:
    # PostgreSQL: a pool of one, so that every save is on the connection whose server process
    # is measured
    options: dict[str, Any] = {"pool_size": 1, "max_overflow": 0} if "postgresql" in url else {}
    with Store(url, **options) as store:
        _, key = store.create_key("saves", addresses * 2)
        emails = [f"user{i}@d{i % 2000}.saves.test" for i in range(addresses)]
        emails += emails[: addresses // 10]  # one in ten submitted twice
        job = create_bulk_job(store, key.id, emails, check_smtp=False)
        claimer = "saves-benchmark"
        if claim_job(store, claimer) is None:
            raise RuntimeError("the job could not be claimed")
        distinct = list(dict.fromkeys(emails))
        result = VerificationResult.from_facts("x@saves.test", Facts(syntax_valid=True))
        batches = [
            prepare_results(job.id, [(e, result) for e in distinct[i : i + batch]])
            for i in range(0, len(distinct), batch)
        ]
        backend_pid = None
        if store.backend == "postgresql":
            with store.transaction() as conn:
                backend_pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        db_before = process_cpu_seconds(backend_pid) if backend_pid else None
        cpu_before = time.process_time()
        started = time.perf_counter()
        duplicates = None if copies_per_save else duplicate_addresses(store, job.id)
        for prepared in batches:
            save_prepared(store, prepared, worker_id=claimer, duplicates=duplicates)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        db_after = process_cpu_seconds(backend_pid) if backend_pid else None
    return {
        "store": store.backend,
        "addresses": len(distinct),
        "saves": len(batches),
        "batch": batch,
        "copies_per_save": copies_per_save,
        "wall_seconds": round(wall, 3),
        "client_cpu_seconds": round(cpu, 3),
        "database_cpu_seconds": (
            round(db_after - db_before, 3)
            if db_before is not None and db_after is not None
            else None
        ),
        "ms_per_save": round(wall / len(batches) * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="PostgreSQL URL (a scratch database is made in it)")
    parser.add_argument("--addresses", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--copies-per-save",
        action="store_true",
        help="read the addresses' numbers of rows for each save (the worker before)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lh-saves-") as tmp, ExitStack() as stack:
        url = stack.enter_context(database(args.db, Path(tmp)))
        report = measure(url, args.addresses, args.batch, args.copies_per_save)
    if args.json:
        print(json.dumps(report))
        return 0
    how = "read for each save" if args.copies_per_save else "read once per job"
    print(
        f"{report['saves']} saves of {report['batch']} results ({report['addresses']:,} "
        f"addresses, numbers of rows {how}), {report['store']}:"
    )
    print(f"  wall {report['wall_seconds']} s ({report['ms_per_save']} ms a save)")
    print(f"  this process's CPU {report['client_cpu_seconds']} s")
    if report["database_cpu_seconds"] is not None:
        print(f"  the database connection's server process CPU {report['database_cpu_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

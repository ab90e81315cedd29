"""Quality-check benchmark: the output checks over every row, their memory, and GX's warm-up.

    .venv/bin/python benchmarks/quality.py [--rows 1000000,10000000] [--batch-rows 200000,500000]
        [--whole] [--warm-up] [--json]

Set-up (not timed): the seven per-status Parquet files of a run of ``--rows`` rows are written to
a temporary folder, shaped like ``listhygiene clean``'s (the input's ``id``, ``name``,
``company``, then ``email``, ``status`` dictionary-encoded, ``score``, ``reason``, ``domain``,
and :data:`~listhygiene.pipeline.quality.ROW_COLUMN`), with distinct addresses and the statuses
in a CRM-like mix.

Measured, each in a fresh child process so that its peak memory is its own
(``ru_maxrss`` from ``os.wait4``):

- ``batches``: :func:`~listhygiene.pipeline.quality.check_outputs` over the files, in batches of
  ``--batch-rows`` rows; wall time of the call (GX imported beforehand), the child's peak RSS,
  and its RSS with GX imported and nothing read, which the peak is compared with.
- ``whole`` (``--whole``): the old way, every row in one pandas frame through
  :func:`~listhygiene.pipeline.quality.run_quality_checks`, for comparison.
- ``--warm-up``: a stand-in for the pipeline's CPU work (parsing addresses in Python and hashing
  them with pyarrow, ~10 s on one core) timed alone, then with GX importing in a thread of the
  same process, then with GX importing in :func:`~listhygiene.pipeline.quality.warm_up`'s child
  process; each with the import's own wall time and the memory it adds.

Figures go in docs/pipeline.md ("Quality checks"), with ``uptime``'s load at the time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from listhygiene.pipeline.quality import (
    BATCH_ROWS,
    ROW_COLUMN,
    STATUSES,
    check_outputs,
    status_files,
)

#: Shares of the statuses in the generated outputs (valid first, as in a CRM list).
SHARES = (0.62, 0.18, 0.06, 0.03, 0.02, 0.04, 0.05)


def write_outputs(folder: Path, rows: int, seed: int = 1) -> dict[str, int]:
    """The seven status files of a ``rows``-row run, written by parts of a million rows."""
    rng = np.random.default_rng(seed)
    writers: dict[str, pq.ParquetWriter] = {}
    counts = dict.fromkeys(STATUSES, 0)
    step = 1_000_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        numbers = np.arange(start + 1, start + n + 1, dtype=np.int64)
        which = rng.choice(len(STATUSES), size=n, p=SHARES)
        for index, status in enumerate(STATUSES):
            mask = which == index
            picked = numbers[mask]
            table = pa.table(
                {
                    "id": pa.array(picked.astype(str)),
                    "name": pa.array(np.char.add("Person ", (picked % 9973).astype(str))),
                    "company": pa.array(np.char.add("Company ", (picked % 517).astype(str))),
                    "email": pa.array(
                        np.char.add(np.char.add("user", picked.astype(str)), "@example.test")
                    ),
                    "status": pa.array([status] * len(picked)).dictionary_encode(),
                    "score": pa.array(np.full(len(picked), 0.9)),
                    "reason": pa.nulls(len(picked), pa.string()),
                    "domain": pa.array(["example.test"] * len(picked)),
                    ROW_COLUMN: pa.array(picked),
                }
            )
            if status not in writers:
                writers[status] = pq.ParquetWriter(
                    folder / f"{status}.parquet", table.schema, compression="zstd"
                )
            writers[status].write_table(table)
            counts[status] += len(picked)
    for writer in writers.values():
        writer.close()
    return counts


def rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_check(folder: str, rows: int, counts: dict[str, int], mode: str, batch: int) -> dict:
    """In the child: import GX, then run one way of checking; report time and memory."""
    from listhygiene.pipeline.quality import run_quality_checks
    from listhygiene.pipeline.quality.suite import _import_gx

    _import_gx()
    base = rss()
    started = time.perf_counter()
    if mode == "batches":
        report = check_outputs(
            status_files(folder), expected_rows=rows, summary_rows=counts, batch_rows=batch
        )
    else:
        parts = []
        for status in STATUSES:
            table = pq.read_table(
                f"{folder}/{status}.parquet", columns=[ROW_COLUMN, "status", "score", "email"]
            )
            parts.append(
                pa.table(
                    {
                        "_row": table.column(ROW_COLUMN),
                        "_file": pa.array([status] * len(table)),
                        "status": table.column("status").cast(pa.string()),
                        "score": table.column("score"),
                        "email": table.column("email"),
                    }
                )
            )
        report = run_quality_checks(
            pa.concat_tables(parts), expected_rows=rows, file_rows=counts, summary_rows=counts
        )
    seconds = time.perf_counter() - started
    return {"passed": report.passed, "seconds": seconds, "base_rss": base}


def run_child(*args: str) -> tuple[dict, int]:
    """Run this script in a child with ``args``; its JSON answer and its own peak RSS."""
    process = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"child {args} failed ({status})")
    return json.loads(out), usage.ru_maxrss * 1024


# --- warm-up: the pipeline's CPU work with GX importing beside it ------------------------------


def stand_in_work(rounds: int = 60) -> float:
    """CPU work like the pipeline's verify stage (Python per address, pyarrow per batch)."""
    import pyarrow.compute as pc

    from listhygiene.email_cells import clean_cells

    addresses = pa.array([f" User{i}@Example{i % 97}.test " for i in range(200_000)])
    started = time.perf_counter()
    for _ in range(rounds):
        cleaned = clean_cells(addresses)
        pc.unique(cleaned)
        sum(len(a.split("@", 1)[0]) for a in cleaned.to_pylist())
    return time.perf_counter() - started


def child_warm(way: str) -> dict:
    """In the child: the stand-in work alone, or with GX importing in a thread or a process."""
    from listhygiene.pipeline.quality import warm_up

    stand_in_work(1)  # the readers' and pyarrow's imports, out of the timing
    base = rss()
    worker = warm_up(process=way == "process") if way != "alone" else None
    work = stand_in_work()
    result = {"work_seconds": work, "base_rss": base}
    if worker is not None:
        worker.wait_ready()
        process = worker._process
        result["child_rss"] = _rss_of(process.pid) if process is not None else 0
        result["seconds"] = worker.import_seconds or 0.0
        worker.close()
    result["end_rss"] = rss()
    return result


def _rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--batch-rows", default=str(BATCH_ROWS), help="one or more, by commas")
    parser.add_argument("--whole", action="store_true", help="also the old whole-frame way")
    parser.add_argument("--warm-up", action="store_true", help="also GX's warm-up, two ways")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        if options.child[0] == "warm":
            print(json.dumps(child_warm(options.child[1])))
        else:
            folder, rows, counts, mode, batch = options.child
            print(json.dumps(child_check(folder, int(rows), json.loads(counts), mode, int(batch))))
        return 0

    figures: dict[str, Any] = {"load_before": load_average(), "checks": [], "warm_up": []}
    failed = False
    for rows in (int(r) for r in options.rows.split(",") if r):
        with tempfile.TemporaryDirectory(prefix="lh-quality-") as folder:
            counts = write_outputs(Path(folder), rows)
            sizes = [int(b) for b in options.batch_rows.split(",")]
            runs = [("batches", b) for b in sizes] + ([("whole", rows)] if options.whole else [])
            for mode, batch_rows in runs:
                answer, peak = run_child(
                    "--child", folder, str(rows), json.dumps(counts), mode, str(batch_rows)
                )
                failed |= not answer["passed"]
                figure = {
                    "rows": rows,
                    "mode": mode,
                    "batch_rows": batch_rows,
                    "seconds": round(answer["seconds"], 2),
                    "peak_mib": round(peak / 2**20),
                    "gx_imported_mib": round(answer["base_rss"] / 2**20),
                    "passed": answer["passed"],
                    "load": load_average(),
                }
                figures["checks"].append(figure)
                if not options.json:
                    print(
                        f"{rows:>11,} rows  {mode:<8} {batch_rows:>10,} a batch  "
                        f"{figure['seconds']:>7.2f} s  peak "
                        f"{figure['peak_mib']:>5} MiB (GX imported: {figure['gx_imported_mib']} "
                        f"MiB)  passed={answer['passed']}  load {figure['load']}"
                    )
    if options.warm_up:
        for way in ("alone", "thread", "process"):
            answer, peak = run_child("--child", "warm", way)
            figure = {
                "way": way,
                "work_seconds": round(answer["work_seconds"], 2),
                "import_seconds": round(answer.get("seconds", 0.0), 2),
                "added_mib": round((answer["end_rss"] - answer["base_rss"]) / 2**20),
                "child_mib": round(answer.get("child_rss", 0) / 2**20),
                "load": load_average(),
            }
            figures["warm_up"].append(figure)
            if not options.json:
                print(
                    f"warm-up {way:<8} work {figure['work_seconds']:>6.2f} s  "
                    f"GX import {figure['import_seconds']:>5.2f} s  "
                    f"memory added here {figure['added_mib']:>4} MiB, in the child "
                    f"{figure['child_mib']:>4} MiB  load {figure['load']}"
                )
    if options.json:
        print(json.dumps(figures, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

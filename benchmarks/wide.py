"""Wide-table benchmark: ``listhygiene clean --no-smtp`` of a CSV with few rows and many columns.

    .venv/bin/python benchmarks/wide.py [--rows 50] [--columns 10000] [--runs 2] [--json]

Issue 28, item 4: every reader linear in columns as in rows. The CSV has an ``email`` column of
``user<n>@example.test`` addresses and ``--columns - 1`` columns of small integers (a 50 x 10,000
file is 1.5 MB). Measured: the real command as a subprocess (interpreter start, imports and the
quality checks included), wall time with ``time.perf_counter()``, the run's phases from its
``summary.json``, and the children's peak RSS (``ru_maxrss``, the largest single process: the run
or its great-expectations worker). No DNS is asked of the world: ``example.test`` does not
resolve, and ``--no-smtp`` stops there. Figures and their history: docs/pipeline.md, "The email
column".
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_csv(path: Path, rows: int, columns: int, seed: int = 1) -> None:
    numbers = random.Random(seed)
    with path.open("w", encoding="utf-8") as file:
        file.write("email," + ",".join(f"c{i}" for i in range(columns - 1)) + "\n")
        for row in range(rows):
            cells = ",".join(str(numbers.randint(0, 99)) for _ in range(columns - 1))
            file.write(f"user{row}@example.test,{cells}\n")


def clean(source: Path, out: Path) -> dict[str, object]:
    command = [
        str(Path(sys.executable).with_name("listhygiene")),
        "clean",
        str(source),
        "--out",
        str(out),
        "--no-smtp",
        "--verdicts",
        "none",
        "--json",
    ]
    env = {**os.environ, "LISTHYGIENE_DNS_TIMEOUT": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"clean failed ({done.returncode}): {done.stderr.strip()}")
    summary = json.loads(done.stdout)
    return {
        "wall_seconds": round(wall, 2),
        "phases": summary["timings"]["seconds"],
        "email_column": summary["input"]["email_column"],
        "rows": summary["rows"]["total"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--columns", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="listhygiene-wide-") as folder:
        source = Path(folder) / "wide.csv"
        write_csv(source, args.rows, args.columns)
        size = source.stat().st_size
        runs = [clean(source, Path(folder) / f"out{i}") for i in range(args.runs)]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"size": size, "runs": runs, "peak_mib": round(peak, 1), "load": load}))
        return
    print(f"input        {args.rows:,} rows x {args.columns:,} columns, {size / 1e6:.1f} MB of CSV")
    for number, run in enumerate(runs, 1):
        print(f"run {number}        {run['wall_seconds']} s wall; phases {run['phases']}")
    print(f"peak RSS     {peak:.1f} MiB (largest child process)")
    print(f"load         1-min load average {load:.2f} after the runs (2 cores shared)")


if __name__ == "__main__":
    main()

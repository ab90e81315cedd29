"""Small-list benchmark: what a run costs when the list is tiny (issue 28, item 1).

    .venv/bin/python benchmarks/small.py [--runs 5] [--pairs 3] [--json]

Two figures, each from the real command (``python -m listhygiene.cli clean``, a subprocess:
interpreter start, imports and the quality checks included) over the sample mail world
(``sample_data/world.json``, its sandbox in this process, so DNS queries and SMTP connections are
counted), as ``make install`` leaves the environment (compiled bytecode):

1. **two rows**: the first two rows of ``sample_data/crm_export.csv``, cleaned with SMTP and the
   quality checks, no verdict store; ``--runs`` times, each cold (a new output folder). Target:
   ≤ 5 s wall.
2. **a small list again**: the whole sample export (1,056 rows) cleaned into an empty SQLite
   verdict store, then again, ``--pairs`` times (each pair a store of its own): the median
   rerun's wall time against the median first run's, and the DNS queries and SMTP connections
   the last rerun made. Target: ≤ 0.5 of the first run, and none of either for
   the addresses it reuses (an ``unknown`` verdict is never reused, so it is asked again).

Printed with the 1-minute load average before and after: the machine has 2 cores, so figures
taken at a load above 1.5 are upper bounds. Figures and their history: docs/pipeline.md, "Speed".
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORLD = ROOT / "sample_data" / "world.json"
SAMPLE = ROOT / "sample_data" / "crm_export.csv"
TARGET_TWO_ROWS = 5.0
TARGET_RERUN_RATIO = 0.5


def _clean(source: Path, out: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", str(source), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 4):  # 4: an address whose verdict is not final; still a run
        raise SystemExit(f"clean {source} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def _counters(sandbox: Any) -> tuple[int, int]:
    """The sandbox's DNS queries and SMTP connections so far."""
    return sandbox.dns_queries, sum(sandbox.stats(h).connections for h in sandbox.endpoints.hosts)


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def measure(runs: int, pairs: int, folder: Path) -> dict[str, Any]:
    from listhygiene.sandbox import Sandbox

    two = folder / "two.csv"
    two.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:3]))
    settings = {
        "LISTHYGIENE_HELO": "bench.listhygiene.test",
        "LISTHYGIENE_RETRY_DELAYS": "2",
        "LISTHYGIENE_VERDICTS": "none",
    }
    with Sandbox(WORLD) as sandbox:
        env = {**os.environ, **sandbox.engine_environment(), **settings}
        two_rows = [_clean(two, folder / f"two{i}", env) for i in range(runs)]
    quality = _summary(folder / "two0")["timings"]["seconds"].get("quality")
    firsts, agains = [], []
    for pair in range(pairs):
        # each pair in a mail world of its own (nothing greylisted has been retried yet) and
        # into a store of its own, empty at first
        with Sandbox(WORLD) as sandbox:
            env = {**os.environ, **sandbox.engine_environment(), **settings}
            env["LISTHYGIENE_VERDICTS"] = f"sqlite:///{folder / f'verdicts{pair}.sqlite'}"
            firsts.append(_clean(SAMPLE, folder / f"first{pair}", env))
            dns_before, smtp_before = _counters(sandbox)
            agains.append(_clean(SAMPLE, folder / f"again{pair}", env))
            dns_after, smtp_after = _counters(sandbox)
    summary = _summary(folder / f"again{pairs - 1}")  # the rerun the counters are of
    first, again = statistics.median(firsts), statistics.median(agains)
    return {
        "two_rows_seconds": [round(s, 2) for s in two_rows],
        "two_rows_median": round(statistics.median(two_rows), 2),
        "two_rows_quality_seconds": quality,
        "small_list_rows": summary["rows"]["total"],
        "first_runs_seconds": [round(s, 2) for s in firsts],
        "again_runs_seconds": [round(s, 2) for s in agains],
        "first_seconds": round(first, 2),
        "again_seconds": round(again, 2),
        "again_ratio": round(again / first, 2),
        "again_verdicts": summary["verdicts"],
        "again_dns_queries": dns_after - dns_before,
        "again_smtp_connections": smtp_after - smtp_before,
        "again_unknown": summary["rows"]["by_status"].get("unknown", 0),
        "first_phases": _summary(folder / "first0")["timings"]["seconds"],
        "again_phases": summary["timings"]["seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="cold two-row runs")
    parser.add_argument(
        "--pairs", type=int, default=3, help="first runs and reruns of the small list (medians)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.pairs < 1:
        parser.error("--runs and --pairs must be 1 or more")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lh-small-bench-") as folder:
        report = measure(args.runs, args.pairs, Path(folder))
    report["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    report["met"] = {
        "two_rows": report["two_rows_median"] <= TARGET_TWO_ROWS,
        "rerun": report["again_ratio"] <= TARGET_RERUN_RATIO,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"two rows, cold, {args.runs} runs: {report['two_rows_seconds']} s, "
            f"median {report['two_rows_median']} s (quality {report['two_rows_quality_seconds']} s)"
            f"  target ≤ {TARGET_TWO_ROWS} s: {'met' if report['met']['two_rows'] else 'MISSED'}"
        )
        print(
            f"{report['small_list_rows']:,} rows, medians of {len(report['first_runs_seconds'])}:"
            f" first {report['first_seconds']} s {report['first_runs_seconds']}, again "
            f"{report['again_seconds']} s {report['again_runs_seconds']} "
            f"= x{report['again_ratio']} (the last rerun: verdicts "
            f"{report['again_verdicts']}, {report['again_dns_queries']} DNS queries, "
            f"{report['again_smtp_connections']} SMTP connections, {report['again_unknown']} "
            f"unknown)  target ≤ x{TARGET_RERUN_RATIO}: "
            f"{'met' if report['met']['rerun'] else 'MISSED'}"
        )
        print(f"load {report['load'][0]} before, {report['load'][1]} after")
    return 0 if all(report["met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

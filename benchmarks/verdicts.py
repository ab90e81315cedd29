"""Verdict store benchmark: what a nightly re-run of the same list costs once its verdicts are
stored (docs/pipeline.md, "Verdict store").

    .venv/bin/python benchmarks/verdicts.py [--rows 1000000] [--new 0.01] [--seed 1] [--json]
    .venv/bin/python benchmarks/verdicts.py --smtp [--rows 7000]

Without ``--smtp`` (the issue's second target): a generated CRM-like CSV of ``--rows`` rows over
a sandbox world (``benchmarks/pipeline.py`` makes both), cleaned with ``--no-smtp`` by the real
command four times:

1. ``--verdicts none``: the baseline, no store;
2. a first run into an empty SQLite store (what keeping every verdict costs);
3. the same file again (everything fresh: reused);
4. a file in which ``--new`` of the distinct addresses were replaced by addresses never seen
   (the nightly case: a few new contacts).

With ``--smtp`` (the first target): a ``--rows``-row list over the same kind of world, with SMTP,
cleaned twice into one store; the sandbox runs in this process, so the second run's SMTP
connections and DNS queries are counted: both must be 0 for reused addresses (only unknown
verdicts, never reused, are asked again).

Printed: wall time and peak RSS of each run, and the ratios against the baseline. Exit 1 when a
target is missed (the nightly run within 1.2x of the baseline; with ``--smtp``, no connection
and no query for the reused addresses, the second run within 3 s plus its quality checks).
"""

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import SandboxProcess
from listhygiene.sandbox.generate import generate_world
from pipeline import SANDBOX_SETTINGS, plan, run_clean, write_csv

TARGET_RATIO = 1.2
TARGET_SMTP_SECONDS = 3.0


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _figures(label: str, run: dict[str, Any], out: Path) -> dict[str, Any]:
    if run["returncode"] != 0:
        raise SystemExit(f"{label}: clean failed:\n{run['output'][-3000:]}")
    summary = _summary(out)
    return {
        "run": label,
        "wall_seconds": round(run["wall_seconds"], 2),
        "peak_rss_mib": round(run["peak_rss_bytes"] / 2**20, 1),
        "verdicts": summary["verdicts"],
        "phases": {k: round(v, 2) for k, v in summary["timings"]["seconds"].items()},
    }


def no_smtp(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    counts = plan(args.rows)
    extra = max(1, round(counts["distinct"] * args.new))
    generated = generate_world(
        args.seed, domains=min(2000, counts["distinct"]), addresses=counts["distinct"] + extra
    )
    world_path = tmp / "world.json"
    generated.write(world_path)
    first = dataclasses.replace(generated, addresses=generated.addresses[: counts["distinct"]])
    nightly = dataclasses.replace(generated, addresses=generated.addresses[extra:])
    write_csv(first, counts, args.seed, tmp / "list.csv")
    write_csv(nightly, counts, args.seed, tmp / "nightly.csv")
    store = f"sqlite:///{tmp / 'verdicts.sqlite'}"
    runs = []
    with SandboxProcess(world_path, tmp / "state") as sandbox:
        env = {
            **os.environ,
            **{k: sandbox.exports[k] for k in SANDBOX_SETTINGS},
            "LISTHYGIENE_HELO": "bench.test",
        }
        plan_ = [
            ("baseline (no store)", "list.csv", "none"),
            ("first run, empty store", "list.csv", store),
            ("same list again", "list.csv", store),
            (f"nightly: {args.new:.0%} new addresses", "nightly.csv", store),
        ]
        for index, (label, csv, verdicts) in enumerate(plan_):
            out = tmp / f"out{index}"
            figures = run_clean(tmp / csv, out, {**env, "LISTHYGIENE_VERDICTS": verdicts})
            runs.append(_figures(label, figures, out))
    base = runs[0]["wall_seconds"]
    for run in runs:
        run["ratio"] = round(run["wall_seconds"] / base, 2)
    return {
        "rows": args.rows,
        "distinct": counts["distinct"],
        "new": extra,
        "runs": runs,
        "target_ratio": TARGET_RATIO,
        "met": runs[3]["ratio"] <= TARGET_RATIO,
    }


def with_smtp(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import subprocess

    from listhygiene.sandbox import Sandbox

    counts = plan(args.rows)
    generated = generate_world(args.seed, domains=300, addresses=counts["distinct"])
    world_path = tmp / "world.json"
    generated.write(world_path)
    write_csv(generated, counts, args.seed, tmp / "list.csv")
    store = f"sqlite:///{tmp / 'verdicts.sqlite'}"
    runs = []
    with Sandbox(world_path) as sandbox:
        env = {
            **os.environ,
            **sandbox.engine_environment(),
            "LISTHYGIENE_HELO": "bench.test",
            "LISTHYGIENE_VERDICTS": store,
        }
        names = list(sandbox.endpoints.hosts)
        for index in range(2):
            connections = sum(sandbox.stats(h).connections for h in names)
            queries = sandbox.dns_queries
            out = tmp / f"out{index}"
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "listhygiene.cli", "clean", f"{tmp}/list.csv", "--out", out],
                env=env,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"clean failed:\n{done.stderr[-3000:]}")
            summary = _summary(out)
            runs.append(
                {
                    "run": "first" if index == 0 else "second",
                    "wall_seconds": round(wall, 2),
                    "quality_seconds": round(summary["timings"]["seconds"].get("quality", 0), 2),
                    "verdicts": summary["verdicts"],
                    "smtp_connections": sum(sandbox.stats(h).connections for h in names)
                    - connections,
                    "dns_queries": sandbox.dns_queries - queries,
                    "by_status": summary["rows"]["by_status"],
                }
            )
    second = runs[1]
    # what the second run verifies is what ended unknown (never reused), nothing else
    met = second["wall_seconds"] - second["quality_seconds"] <= TARGET_SMTP_SECONDS
    return {"rows": args.rows, "distinct": counts["distinct"], "runs": runs, "met": met}


def _human(report: dict[str, Any]) -> str:
    lines = [f"{report['rows']:,} rows, {report['distinct']:,} distinct addresses"]
    for run in report["runs"]:
        extra = ""
        if "ratio" in run:
            extra = f"  x{run['ratio']:.2f}  peak {run['peak_rss_mib']} MiB"
        if "smtp_connections" in run:
            extra = (
                f"  SMTP connections {run['smtp_connections']:,}, DNS queries "
                f"{run['dns_queries']:,}, quality {run['quality_seconds']} s"
            )
        lines.append(
            f"  {run['run']:<32} {run['wall_seconds']:>7.2f} s  verdicts {run['verdicts']}{extra}"
        )
    lines.append(f"target {'met' if report['met'] else 'MISSED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int)
    parser.add_argument("--new", type=float, default=0.01, help="share of new addresses")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smtp", action="store_true", help="the SMTP re-run target")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.rows = args.rows or (7000 if args.smtp else 1_000_000)
    with tempfile.TemporaryDirectory(prefix="lh-verdicts-bench-") as folder:
        report = (with_smtp if args.smtp else no_smtp)(args, Path(folder))
    print(json.dumps(report, indent=2) if args.json else _human(report))
    return 0 if report["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

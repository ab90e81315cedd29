"""How steady this machine's CPUs are: the context of every latency figure measured on it.

    .venv/bin/python benchmarks/machine.py [--samples 20] [--loop 2000000] [--json]

The same pure-Python loop (``--loop`` additions), timed ``--samples`` times on CPU 0:

1. **alone**: nothing else of this script's running;
2. **other CPU busy**: while a second process spins on CPU 1;

one sample of each in turn, so that the host's own changes of speed touch both phases alike.

On a machine whose CPUs are independent cores, both phases give the same times and each phase's
times are close together. In a virtual machine whose two CPUs are hyperthreads of one physical
core, or whose host is shared with busy neighbours, the loop is slower while the other CPU works
and its time moves from sample to sample. A service and its job runner on the two CPUs then slow
each other whatever their priorities (docs/service.md, "Fairness").

Reported: min / median / max seconds of each phase, and the median of each pair's ratio (busy
over the alone sample just before it). Needs two CPUs
(``os.sched_setaffinity``, Linux).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

SPIN = "import os\nos.sched_setaffinity(0, {1})\nx = 0\nwhile True:\n    x += 1\n"


def loop(n: int) -> float:
    """Seconds for ``n`` additions in a Python loop."""
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - started


def summary(times: list[float]) -> dict[str, float]:
    return {
        "min_s": round(min(times), 4),
        "median_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--loop", type=int, default=2_000_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("machine.py needs two CPUs")
    os.sched_setaffinity(0, {0})
    loop(args.loop)  # warm-up
    # The spinner stopped and resumed (SIGSTOP, SIGCONT) around each busy sample: the two
    # phases alternate, so that a change of the host's speed meanwhile touches both alike.
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    alone: list[float] = []
    busy: list[float] = []
    try:
        time.sleep(0.3)  # started and pinned
        spinner.send_signal(signal.SIGSTOP)
        for _ in range(args.samples):
            alone.append(loop(args.loop))
            spinner.send_signal(signal.SIGCONT)
            time.sleep(0.02)
            busy.append(loop(args.loop))
            spinner.send_signal(signal.SIGSTOP)
    finally:
        spinner.kill()
        spinner.wait()
    pairs = [b / a for a, b in zip(alone, busy, strict=True)]
    report = {
        "alone": summary(alone),
        "other_cpu_busy": summary(busy),
        "median_ratio": round(statistics.median(pairs), 2),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"a {args.loop:,}-step Python loop on CPU 0, {args.samples} samples each:")
    for name, key in (("alone", "alone"), ("other CPU busy", "other_cpu_busy")):
        f = report[key]
        print(f"  {name:<15} min {f['min_s']} s  median {f['median_s']} s  max {f['max_s']} s")
    print(f"  busy / alone, median of the pairs: {report['median_ratio']}")
    print(f"  machine load (1-minute average): {report['load_1min']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

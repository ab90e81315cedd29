"""The shared host state's slot round trip (issue 26): how long taking a session slot costs.

    .venv/bin/python benchmarks/host_state.py [--store redis://127.0.0.1:6379/0]
        [--store postgresql://postgres@127.0.0.1:5432/test] [--calls 2000] [--json]

For each store (the in-process default always, then each ``--store``), ``--calls`` times: take a
slot of a host's budget and its provider's (one call: :meth:`HostState.acquire`, one round trip
to the store), then give it back (:meth:`HostState.release`, one more). The budgets are the
engine's defaults (2 sessions at once and 5 a second per host, 5 and 2 per provider), over as
many hosts as calls and a provider for two calls, as a fleet spreads over many hosts, so no call
waits: the figures are the store's own cost. Prints p50, p99 and the largest of each, in
milliseconds. Issue 26's targets: the slot under 1 ms p99 on Redis and 3 ms on PostgreSQL.
"""

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from typing import Any

from listhygiene.engine.host_state import Budget, open_host_state

TARGETS_MS = {"redis": 1.0, "postgresql": 3.0}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(url: str | None, calls: int) -> dict[str, Any]:
    state = open_host_state(url)
    run = secrets.token_hex(4)  # keys of this run alone

    def budgets(i: int) -> list[Budget]:
        return [
            Budget(f"host:bench-{run}-{i}", concurrency=2, per_second=5),
            Budget(f"provider:bench-{run}-{i // 2}", concurrency=5, per_second=2),
        ]

    take: list[float] = []
    give: list[float] = []
    try:
        for i in range(20):  # connect, set up, warm the caches
            await state.release(await state.acquire(budgets(-1 - i)))
        for i in range(calls):
            started = time.perf_counter()
            lease = await state.acquire(budgets(i))
            taken = time.perf_counter()
            await state.release(lease)
            take.append((taken - started) * 1000)
            give.append((time.perf_counter() - taken) * 1000)
    finally:
        await state.close()
    kind = "local" if not url else url.split("://", 1)[0].split("+", 1)[0]
    return {
        "store": kind,
        "calls": calls,
        "acquire_ms": {
            "p50": round(statistics.median(take), 3),
            "p99": round(_percentile(take, 0.99), 3),
            "max": round(max(take), 3),
        },
        "release_ms": {
            "p50": round(statistics.median(give), 3),
            "p99": round(_percentile(give, 0.99), 3),
        },
        "target_p99_ms": TARGETS_MS.get(kind),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", action="append", default=[], help="a store URL (repeatable)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = [asyncio.run(measure(url, args.calls)) for url in [None, *args.store]]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        a, g = r["acquire_ms"], r["release_ms"]
        target = f" (target p99 < {r['target_p99_ms']} ms)" if r["target_p99_ms"] else ""
        print(
            f"{r['store']:<11} slot p50 {a['p50']:.3f} ms, p99 {a['p99']:.3f} ms, "
            f"max {a['max']:.3f} ms{target}; release p50 {g['p50']:.3f} ms, "
            f"p99 {g['p99']:.3f} ms ({r['calls']} calls)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

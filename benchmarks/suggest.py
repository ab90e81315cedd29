"""Typo suggestions: how long ``Suggester.domain`` takes per distinct domain (issue 19).

    .venv/bin/python benchmarks/suggest.py [--domains 10000] [--common 200] [--seed 1]

Random domains (4 to 14 letters, .com/.net/.test), a suggester with the big providers and
``--common`` list domains of similar lengths (the worst case for the length filter), each domain
asked once (the cache is not what is measured). Prints the 1-minute load average with the
figures: taken at a load above 1.5 (2 cores) they are upper bounds.
"""

import argparse
import os
import random
import string
import time

from listhygiene.engine.suggest import Suggester


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=10_000)
    parser.add_argument("--common", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    letters = string.ascii_lowercase
    domains = [
        "".join(rng.choice(letters) for _ in range(rng.randint(4, 14)))
        + rng.choice([".com", ".net", ".test"])
        for _ in range(args.domains)
    ]
    # near-misses of real providers too, so that some lookups find a suggestion
    domains += [d[1] + d[0] + d[2:] for d in ("gmail.com", "hotmail.com", "outlook.com")]
    suggester = Suggester([f"company{i}.com" for i in range(args.common)])
    suggester.domain("warm-up.com")  # rapidfuzz's import is not what is measured
    load = os.getloadavg()[0]
    started = time.perf_counter()
    found = sum(1 for d in domains if suggester.domain(d))
    seconds = time.perf_counter() - started
    print(
        f"{len(domains):,} distinct domains against {len(suggester.candidates)} candidates: "
        f"{seconds:.3f} s, {seconds / len(domains) * 1e6:.0f} us a domain, {found} suggestions "
        f"(load1 {load:.2f} before, {os.getloadavg()[0]:.2f} after)"
    )


if __name__ == "__main__":
    main()

"""``listhygiene doctor``: how long the whole audit takes (issue 29's target: at most 5 s).

    .venv/bin/python benchmarks/doctor.py [--runs 3]

Runs the real command (a subprocess, start-up included) against sandbox worlds of the three
providers it probes by default, two MX hosts each, with the machine's PTR, a HELO name that
resolves back and three DNSBL zones:

* ``good``: every host answers (the first greeting ends the port 25 check);
* ``dropped``: every host accepts the connection and never speaks, the slowest way port 25 can
  fail (a refused connection fails at once): the check waits out its time limit;
* ``lying``: good, but the resolver answers names that do not exist.

Prints each run's wall time, the time the report gives (the checks alone) and the exit code,
with the 1-minute load average (2 cores: figures taken above 1.5 are upper bounds).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from listhygiene.sandbox import Sandbox

PROVIDERS = {
    "gmail.com": ["gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com"],
    "outlook.com": ["outlook-com.olc.protection.outlook.com", "outlook-com.olc2.outlook.com"],
    "yahoo.com": ["mta5.am0.yahoodns.net", "mta6.am0.yahoodns.net"],
}
ZONES = ("zen.sandbox.test", "bl.sandbox.test", "dnsbl.sandbox.test")


def world(behaviour: str, **extra: Any) -> dict[str, Any]:
    return {
        "domains": {
            **{
                domain: {"mx": [{"preference": 5 * i, "host": h} for i, h in enumerate(hosts)]}
                for domain, hosts in PROVIDERS.items()
            },
            "verifier.test": {"a": ["127.0.0.1"]},
        },
        "hosts": {h: {"behaviour": behaviour} for hosts in PROVIDERS.values() for h in hosts},
        "ptr": {"127.0.0.1": "verifier.test"},
        "dnsbl": {zone: ["127.0.0.9"] for zone in ZONES},
        **extra,
    }


SCENARIOS = {
    "good": world("smtp"),
    "dropped": world("silent"),
    "lying": world("smtp", nxdomain_answer="127.0.0.53"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load1 {os.getloadavg()[0]:.2f}")
    for name, spec in SCENARIOS.items():
        with Sandbox(spec) as sandbox:
            env = {
                **os.environ,
                **sandbox.engine_environment(),
                "LISTHYGIENE_HELO": "verifier.test",
                "LISTHYGIENE_DNSBL_ZONES": ",".join(ZONES),
            }
            for _ in range(args.runs):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "listhygiene.cli", "doctor", "--json"],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=False,
                )
                wall = time.perf_counter() - started
                report = json.loads(done.stdout)
                print(
                    f"{name:<8} wall {wall:.2f} s, checks {report['seconds']:.2f} s, "
                    f"exit {done.returncode}"
                )
    print(f"load1 {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

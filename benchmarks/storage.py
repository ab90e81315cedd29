"""Object-storage benchmark: what ``s3://`` costs ``listhygiene clean`` against a local folder.

    .venv/bin/python benchmarks/storage.py [--rows 200000] [--domains 200] [--json]

Set-up (not timed): a sandbox world of ``--domains`` domains that take mail, served on loopback
in this process; a CSV of ``--rows`` rows (``id,name,email``, distinct addresses spread over the
domains) written to a temporary folder and uploaded to a bucket of a moto server (S3 API,
``moto_server`` of moto[server]) started on a free port.

Measured, each run in a fresh child process (``ru_maxrss`` from ``os.wait4`` is its own peak):
``clean(..., check_smtp=False)`` with no verdict store,

- ``local``: the local CSV into a local folder;
- ``s3``: ``s3://bucket/in.csv`` into ``s3://bucket/out`` (the input copied to a spool file, the
  work state mirrored in the bucket, the outputs staged and published by copy).

Printed: wall seconds of the ``clean`` call (imports excluded), the run's phases from its
summary, the child's peak RSS, and the 1-minute load average before and after: on the shared
2-core machine, figures taken at a load above 1.5 are upper bounds. moto is in Python on the
same cores, so the ``s3`` figures also pay the server's CPU; a real bucket costs round trips
instead. Figures are recorded in docs/object-storage.md.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

BUSY_LOAD = 1.5


def _world(domains: int) -> dict[str, Any]:
    return {
        "domains": {
            f"d{i}.test": {"mx": [{"preference": 10, "host": f"mx.d{i}.test"}]}
            for i in range(domains)
        },
        "hosts": {f"mx.d{i}.test": {} for i in range(domains)},
    }


def _write_csv(path: Path, rows: int, domains: int) -> None:
    with path.open("w") as out:
        out.write("id,name,email\n")
        for i in range(rows):
            out.write(f"{i},Person {i},person{i}@d{i % domains}.test\n")


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
            return process, url
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit("moto_server did not start") from None
            time.sleep(0.1)


def _child(source: str, out: str) -> None:
    """One run, in this (child) process: prints its seconds and phases as JSON."""
    import listhygiene

    started = time.perf_counter()
    result = listhygiene.clean(source, out, check_smtp=False, verdicts="none")
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "rows": result.summary["rows"]["total"],
                "phases": {k: round(v, 1) for k, v in result.summary["timings"]["seconds"].items()},
            }
        )
    )


def _measure(env: dict[str, str], source: str, out: str) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", source, out],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        stdout = child.stdout.read() if child.stdout is not None else ""
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = status  # reaped here: Popen must not wait for it again
        if status != 0:
            errors.seek(0)
            raise SystemExit(f"the run failed:\n{errors.read()}")
    figures: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    figures["peak_mib"] = round(usage.ru_maxrss / 1024)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("SOURCE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return

    import s3fs

    from listhygiene.sandbox import Sandbox

    moto, endpoint = _moto()
    aws = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    os.environ.update(aws)
    report: dict[str, Any] = {"rows": args.rows, "domains": args.domains, "runs": {}}
    try:
        with Sandbox(_world(args.domains)) as sandbox, tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            csv = folder / "in.csv"
            _write_csv(csv, args.rows, args.domains)
            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            fs.mkdir("bench")
            fs.put_file(str(csv), "bench/in.csv")
            env = {
                **os.environ,
                **sandbox.engine_environment(),
                "XDG_CACHE_HOME": str(folder / "cache"),
            }
            load_before = os.getloadavg()[0]
            report["runs"]["local"] = _measure(env, str(csv), str(folder / "out"))
            report["runs"]["s3"] = _measure(env, "s3://bench/in.csv", "s3://bench/out")
            load_after = os.getloadavg()[0]
            report["input_mib"] = round(csv.stat().st_size / 2**20, 1)
    finally:
        moto.terminate()
        moto.wait()
    report["load"] = {"before": round(load_before, 2), "after": round(load_after, 2)}
    report["upper_bounds"] = max(load_before, load_after) > BUSY_LOAD
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.rows:,} rows ({report['input_mib']} MiB CSV), {args.domains} domains, --no-smtp; "
        f"load {report['load']['before']} -> {report['load']['after']}"
        + (" (busy: upper bounds)" if report["upper_bounds"] else "")
    )
    for name, run in report["runs"].items():
        print(
            f"  {name:5}  {run['seconds']:7.2f} s  peak {run['peak_mib']:5} MiB  "
            f"phases {run['phases']}"
        )


if __name__ == "__main__":
    main()

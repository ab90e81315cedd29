"""A run killed with its outputs in a bucket resumes on another machine from the work state it
kept there (docs/object-storage.md, "Resume"): here another machine is another cache folder, and
the endpoint given as a storage option instead of ``AWS_ENDPOINT_URL``."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.backends import KEY
from listhygiene.pipeline.result import STATUSES
from listhygiene.sandbox import Sandbox

OUTPUTS = {f"{s}.parquet" for s in STATUSES} | {"summary.json", "report.html"}


def _cli(env: dict[str, str], *args: str, **kwargs: Any) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-m", "listhygiene.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


# three CLI runs' imports, GX's among them, and the world's slow mail host: past 120 s on a busy
# machine
@pytest.mark.timeout(300)
def test_a_killed_run_resumes_on_another_machine_from_the_bucket(
    s3: Any, bucket: str, s3_env: dict[str, str], sandbox: Sandbox, tmp_path: Path
) -> None:
    s3.pipe(
        f"{bucket}/in/slow.csv",
        ("Email\n" + "".join(f"person{i}@slow.test\n" for i in range(60))).encode(),
    )
    source, out = f"s3://{bucket}/in/slow.csv", f"s3://{bucket}/out"
    engine = {
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_RETRY_DELAYS": "",
    }
    first_machine = {
        **os.environ,
        **engine,
        **s3_env,
        "XDG_CACHE_HOME": str(tmp_path / "machine-1"),
    }
    stats = sandbox.stats("mx.slow.test")
    stats.reset()
    first = _cli(first_machine, "clean", source, "--out", out, start_new_session=True)
    parts = f"{bucket}/out/.listhygiene-work/results"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and first.poll() is None:
        if s3.exists(parts) and len(s3.ls(parts, detail=False)) >= 2:
            break
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # nothing under a final name, the work state in the bucket
    assert {p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket}/out", detail=False)} == {
        ".listhygiene-work"
    }
    kept = [p for p in s3.ls(parts, detail=False) if p.endswith(".parquet")]
    saved = {
        key
        for part in kept
        for key in pq.read_table(io.BytesIO(s3.cat(part))).column(KEY).to_pylist()
    }
    assert saved
    asked_before = len(stats.recipients)

    second_machine = {
        **{k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"},
        **engine,
        **{k: v for k, v in s3_env.items() if k != "AWS_ENDPOINT_URL"},
        "XDG_CACHE_HOME": str(tmp_path / "machine-2"),
    }
    endpoint = f"endpoint_url={s3_env['AWS_ENDPOINT_URL']}"
    second = _cli(
        second_machine, "clean", source, "--out", out, "--storage-option", endpoint, "--json"
    )
    stdout, stderr = second.communicate(timeout=180)
    assert second.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["addresses"]["resumed"] is True
    reused = summary["addresses"]["reused"]
    assert reused + summary["addresses"]["verified"] == 60
    # what the killed run had kept in the bucket was not asked again
    asked_again = {r for r in stats.recipients[asked_before:] if not r.startswith("lh-")}
    assert len(saved - asked_again) == reused >= len(saved)
    assert len(asked_again) == summary["addresses"]["verified"]
    assert summary["rows"]["by_status"]["valid"] == 60
    # published: the outputs alone, read from the bucket
    assert {p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket}/out", detail=False)} == OUTPUTS
    assert json.loads(s3.cat(f"{bucket}/out/summary.json")) == summary
    valid = pq.read_table(io.BytesIO(s3.cat(f"{bucket}/out/valid.parquet")))
    assert sorted(valid.column("Email").to_pylist()) == sorted(
        f"person{i}@slow.test" for i in range(60)
    )

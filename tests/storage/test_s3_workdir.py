"""The work folder of a run into a bucket, mirrored under ``<out>/.listhygiene-work/``: which
state a run resumes from when machines take turns (docs/object-storage.md, "Resume"). Each
"machine" is a cache folder of its own."""

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from listhygiene.pipeline.backends import KEY
from listhygiene.pipeline.workdir import WorkDir

FINGERPRINT = {"input": {"name": "s3://b/list.csv", "size": 10}, "email_column": "email"}


def on(machine: Path, out: str, monkeypatch: pytest.MonkeyPatch) -> WorkDir:
    monkeypatch.setenv("XDG_CACHE_HOME", str(machine))
    return WorkDir.for_output(out)


def results(*addresses: str) -> pa.Table:
    return pa.table({KEY: list(addresses), "status": ["valid"] * len(addresses)})


def test_machines_taking_turns_resume_from_the_newest_state(
    s3: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = f"s3://{bucket}/out"
    first = on(tmp_path / "a", out, monkeypatch)
    assert first.open(FINGERPRINT) is False
    first.write_results(results("a@x.test", "b@x.test"))
    first.set_stage("verifying")  # a stage boundary: everything is in the bucket
    assert s3.exists(f"{bucket}/out/.listhygiene-work/results/part-000001.parquet")

    # another machine, nothing local: the bucket's state
    second = on(tmp_path / "b", out, monkeypatch)
    assert second.open(FINGERPRINT) is True
    assert second.stage == "verifying"
    assert sorted(second.results().column(KEY).to_pylist()) == ["a@x.test", "b@x.test"]
    second.write_results(results("c@x.test"))
    second.set_stage("writing")

    # the first machine again: its own state is older than the bucket's, which wins
    again = on(tmp_path / "a", out, monkeypatch)
    assert again.open(FINGERPRINT) is True
    assert again.stage == "writing"
    assert sorted(again.results().column(KEY).to_pylist()) == ["a@x.test", "b@x.test", "c@x.test"]

    # published from the second machine: the first one's local state is not resumed
    second.remove()
    assert not s3.exists(f"{bucket}/out/.listhygiene-work")
    last = on(tmp_path / "a", out, monkeypatch)
    assert last.open(FINGERPRINT) is False
    assert last.results() is None


def test_another_input_starts_afresh_and_clears_the_bucket(
    s3: Any, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = f"s3://{bucket}/out"
    work = on(tmp_path / "a", out, monkeypatch)
    work.open(FINGERPRINT)
    work.write_results(results("a@x.test"))
    work.set_stage("verifying")
    other = {**FINGERPRINT, "input": {"name": "s3://b/list.csv", "size": 11}}
    fresh = on(tmp_path / "b", out, monkeypatch)
    assert fresh.open(other) is False
    assert not s3.exists(f"{bucket}/out/.listhygiene-work/results/part-000001.parquet")
    assert s3.exists(f"{bucket}/out/.listhygiene-work/manifest.json")

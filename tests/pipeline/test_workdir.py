"""The work folder's staged rows: cheap to write and to read back, written while the run goes
on, and never named done in the manifest before they are on disk (docs/pipeline.md, "Speed")."""

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline import workdir
from listhygiene.pipeline.backends import KEY, JobRef
from listhygiene.pipeline.workdir import ADDRESS, ROW, WorkDir


def test_staged_rows_have_no_dictionaries_and_statistics_for_the_row_number_only(
    tmp_path: Path,
) -> None:
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    rows = pa.table(
        {
            "name": pa.array(["Ann", "Bob", "Ann"]),
            "score": pa.array([1.5, None, 3.0]),
            ROW: pa.array([1, 2, 3], pa.int64()),
            ADDRESS: pa.array(["ann@x.test", None, "ann@x.test"]),
        }
    )
    work.write_rows(0, rows)
    work.flush()

    (part,) = (work.path / "rows").glob("part-*.parquet")
    assert pq.read_table(part).equals(rows)
    group = pq.ParquetFile(part).metadata.row_group(0)
    for index in range(group.num_columns):
        column = group.column(index)
        assert not column.has_dictionary_page, column.path_in_schema
        assert column.is_stats_set == (column.path_in_schema == ROW), column.path_in_schema


def test_staged_addresses_alone_are_written_too(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    rows = pa.table({ADDRESS: pa.array(["a@x.test"])})
    work.write_rows(3, rows)
    assert [t.to_pylist() for t in work.rows()] == [[{ADDRESS: "a@x.test"}]]


def test_a_part_is_written_while_the_caller_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller prepares the next batch while a part is encoded (the writes take the other
    core): write_rows returns before its part is written, and reading the parts waits for it."""
    caller_went_on = threading.Event()
    seen: list[bool] = []
    write = workdir._write_atomic

    def slow_write(table: pa.Table, path: Path, **options: Any) -> None:
        seen.append(caller_went_on.wait(timeout=10))  # set by the caller only if not blocked
        write(table, path, **options)

    monkeypatch.setattr(workdir, "_write_atomic", slow_write)
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    work.write_rows(0, pa.table({ROW: pa.array([1], pa.int64()), ADDRESS: ["a@x.test"]}))
    caller_went_on.set()
    assert [t.column(ADDRESS).to_pylist() for t in work.rows()] == [["a@x.test"]]
    assert seen == [True]


def test_a_failed_part_is_raised_and_the_manifest_never_says_its_job_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    job = JobRef("local", "job-1", 1, False)
    work.add_job(job)

    def full(table: pa.Table, path: Path, **options: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workdir, "_write_atomic", full)
    work.write_results(pa.table({KEY: ["a@x.test"], "status": ["valid"]}))
    work.finish_job(job)  # written after the part, so not at all
    with pytest.raises(OSError, match="No space left"):
        work.flush()
    manifest = json.loads((work.path / "manifest.json").read_text())
    assert [entry["done"] for entry in manifest["jobs"]] == [False]  # a rerun collects it again
    assert not list((work.path / "results").glob("part-*"))


def test_a_finished_job_is_recorded_after_its_results_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next job is verified while the last one's results are written: finishing a job does
    not wait for its part, and its record lands after the part."""
    caller_went_on = threading.Event()
    order: list[str] = []
    write = workdir._write_atomic

    def slow_write(table: pa.Table, path: Path, **options: Any) -> None:
        caller_went_on.wait(timeout=10)
        write(table, path, **options)
        order.append("part")

    monkeypatch.setattr(workdir, "_write_atomic", slow_write)
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    job = JobRef("local", "job-1", 1, False)
    work.add_job(job, wait=False)
    work.write_results(pa.table({KEY: ["a@x.test"], "status": ["valid"]}))
    work.finish_job(job)
    on_disk = json.loads((work.path / "manifest.json").read_text())
    order.append("caller went on" if not any(e["done"] for e in on_disk["jobs"]) else "waited")
    caller_went_on.set()
    work.flush()
    assert order == ["caller went on", "part"]
    manifest = json.loads((work.path / "manifest.json").read_text())
    assert [entry["done"] for entry in manifest["jobs"]] == [True]
    assert work.open_jobs() == []

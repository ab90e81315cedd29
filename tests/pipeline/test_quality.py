"""The quality checks pass on a correct output and fail, saying what they found, on each fault."""

import json
import logging
import pickle
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.quality import (
    CHECKS,
    ROW_COLUMN,
    STATUSES,
    QualityReport,
    check_outputs,
    run_quality_checks,
    status_files,
    warm_up,
)


@pytest.fixture(scope="module", autouse=True)
def gx_imported() -> None:
    """Pay GX's 11-14 s import once, here, rather than inside the first test's timing."""
    import great_expectations  # noqa: F401


def output(n: int) -> pd.DataFrame:
    """A correct output: rows 1..n, statuses in turn, each row in its status's file."""
    statuses = np.array(STATUSES)[np.arange(n) % len(STATUSES)]
    return pd.DataFrame(
        {
            "_row": np.arange(1, n + 1),
            "_file": statuses,
            "status": statuses.copy(),
            "score": np.full(n, 0.5),
            "email": [f"user{i}@example.test" for i in range(n)],
        }
    )


def counts(frame: pd.DataFrame) -> dict[str, int]:
    return {status: int((frame["_file"] == status).sum()) for status in STATUSES}


def check(
    frame: pd.DataFrame | pa.Table,
    expected: int = 100,
    *,
    file_rows: dict[str, int] | None = None,
    summary_rows: dict[str, int] | None = None,
) -> QualityReport:
    """Run the checks; the counts default to the frame's own, so they agree."""
    if file_rows is None:
        file_rows = counts(frame if isinstance(frame, pd.DataFrame) else frame.to_pandas())
    if summary_rows is None:
        summary_rows = file_rows
    return run_quality_checks(
        frame, expected_rows=expected, file_rows=file_rows, summary_rows=summary_rows
    )


def verdicts(report: QualityReport) -> dict[str, bool]:
    return {result.name: result.passed for result in report.checks}


def details(report: QualityReport, name: str) -> str:
    return next(result.details for result in report.checks if result.name == name)


def only_failing(report: QualityReport, name: str) -> str:
    assert not report.passed
    assert verdicts(report) == {check: check != name for check in CHECKS}
    return details(report, name)


def test_correct_output_passes_every_check() -> None:
    report = check(output(100))
    assert report.passed
    assert [result.name for result in report.checks] == list(CHECKS)
    assert all(result.description for result in report.checks)
    assert "100 rows expected, 100 written" in details(report, "rows_in_exactly_one_output")
    assert "7 files, 100 rows" in details(report, "file_counts_match_summary")
    assert report.seconds > 0


def test_arrow_table_read_back_from_parquet_passes(tmp_path: Path) -> None:
    # Parquet gives dictionary-encoded text back as categoricals: comparing two of them with
    # different categories would fail in pandas, not in the data.
    frame = output(100)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.set_column(1, "_file", table["_file"].dictionary_encode())
    pq.write_table(table, tmp_path / "rows.parquet")
    report = check(pq.read_table(tmp_path / "rows.parquet"))
    assert report.passed, report.as_dict()


def test_empty_string_email_is_present() -> None:
    frame = output(100)
    frame.loc[3, "email"] = ""
    assert check(frame).passed


def test_missing_row_fails_and_names_it() -> None:
    frame = output(100).drop(index=16)  # input row 17
    text = only_failing(check(frame, file_rows=counts(frame)), "rows_in_exactly_one_output")
    assert "100 rows expected, 99 written" in text
    assert "row 17 is missing" in text


def test_duplicated_row_fails_and_names_it() -> None:
    frame = output(100)
    frame = pd.concat([frame, frame.iloc[[4]]], ignore_index=True)  # row 5 twice
    text = only_failing(check(frame, file_rows=counts(frame)), "rows_in_exactly_one_output")
    assert "101 written" in text
    assert "row 5 written 2 times" in text


def test_duplicate_hiding_a_missing_row_fails() -> None:
    frame = output(100)
    frame.loc[7, "_row"] = 9  # row 8 gone, row 9 twice: the count alone would agree
    text = only_failing(check(frame), "rows_in_exactly_one_output")
    assert "row 9 written 2 times" in text
    assert "row 8 is missing" in text


def test_row_number_out_of_range_fails() -> None:
    frame = output(100)
    frame.loc[99, "_row"] = 101
    text = only_failing(check(frame), "rows_in_exactly_one_output")
    assert "outside 1 to 100: 101" in text
    assert "row 100 is missing" in text


def test_row_in_the_wrong_file_fails() -> None:
    frame = output(100)
    frame.loc[20, "_file"] = "valid"  # row 21 is a role address
    text = only_failing(check(frame), "status_allowed")
    assert "1 row is in the file of another status" in text
    assert "row 21 ('role') in valid.parquet" in text


def test_status_outside_the_seven_fails() -> None:
    frame = output(100)
    frame.loc[5, ["status", "_file"]] = "bogus"
    text = only_failing(check(frame), "status_allowed")
    assert "status outside the seven: 'bogus' in 1 row" in text


def test_null_status_fails() -> None:
    frame = output(100)
    frame["status"] = frame["status"].astype(object)
    frame.loc[2, "status"] = None
    text = only_failing(check(frame), "status_allowed")
    assert "1 row has no status (row 3)" in text


def test_score_above_one_fails() -> None:
    frame = output(100)
    frame.loc[9, "score"] = 1.5
    text = only_failing(check(frame), "score_in_range")
    assert "1 score is outside 0 to 1: 1.5 (row 10)" in text


def test_null_score_fails() -> None:
    frame = output(100)
    frame.loc[[3, 4], "score"] = np.nan
    text = only_failing(check(frame), "score_in_range")
    assert "2 rows have no score (row 4, row 5)" in text


def test_score_of_the_wrong_type_fails_without_raising() -> None:
    frame = output(100)
    frame["score"] = frame["score"].astype(object)
    frame.loc[0, "score"] = "high"
    text = only_failing(check(frame), "score_in_range")
    assert "could not run" in text


def test_null_email_fails() -> None:
    frame = output(100)
    frame["email"] = frame["email"].astype(object)
    frame.loc[10, "email"] = None
    text = only_failing(check(frame), "email_present")
    assert "1 row has a null email (row 11)" in text


def test_missing_email_column_fails() -> None:
    text = only_failing(check(output(100).drop(columns="email")), "email_present")
    assert "no email column" in text


def test_file_count_disagreeing_with_summary_fails() -> None:
    frame = output(100)
    summary = counts(frame)
    summary["catchall"] += 1
    text = only_failing(check(frame, summary_rows=summary), "file_counts_match_summary")
    assert text == "catchall.parquet holds 14, the summary says 15"


def test_unwritten_file_and_stray_file_fail() -> None:
    frame = output(100)
    file_rows = counts(frame)
    del file_rows["role"]
    file_rows["extra"] = 0
    summary = {**counts(frame), "extra": 0}
    text = only_failing(
        check(frame, file_rows=file_rows, summary_rows=summary), "file_counts_match_summary"
    )
    assert "no row count for role.parquet" in text
    assert "extra.parquet counted, but no status has that name" in text


def test_many_faults_are_counted_and_sampled() -> None:
    frame = output(1000)
    frame.loc[frame.index[::10], "score"] = 2.0
    text = details(check(frame, expected=1000), "score_in_range")
    assert text.startswith("100 scores are outside 0 to 1: 2.0 (row 1), 2.0 (row 11)")
    assert text.endswith("and 95 more")


def test_report_as_dict_is_json() -> None:
    report = check(output(100))
    data = json.loads(json.dumps(report.as_dict()))
    assert data["passed"] is True
    assert [item["name"] for item in data["checks"]] == list(CHECKS)
    assert set(data["checks"][0]) == {"name", "description", "passed", "details"}


def test_missing_column_is_misuse() -> None:
    with pytest.raises(ValueError, match=r"_file, status"):
        check(output(10).drop(columns=["_file", "status"]), expected=10, file_rows={})


def test_negative_expected_rows_is_misuse() -> None:
    with pytest.raises(ValueError, match="expected_rows"):
        check(output(10), expected=-1)


def test_importing_the_module_does_not_import_gx() -> None:
    code = "import sys, listhygiene.pipeline.quality; print('great_expectations' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_million_rows_pass() -> None:
    n = 1_000_000
    statuses = np.array(STATUSES)[np.arange(n) % len(STATUSES)]
    frame = pd.DataFrame(
        {
            "_row": np.arange(1, n + 1),
            "_file": statuses,
            "status": statuses.copy(),
            "score": np.full(n, 0.95),
            "email": np.full(n, "someone@example.test"),
        }
    )
    report = check(frame, expected=n)
    assert report.passed, report.as_dict()


# --- check_outputs: the written files, read in bounded batches ------------------------------


def write_outputs(
    folder: Path, frame: pd.DataFrame, *, numbers: str = "column"
) -> tuple[dict[str, str], dict[str, str] | None]:
    """The seven status files of ``frame`` in ``folder``; the row numbers in each file's
    ``_source_row`` (``numbers="column"``) or in a file beside it (``"beside"``)."""
    files, beside = {}, {}
    for status in STATUSES:
        part = frame[frame["_file"] == status]
        table = pa.table(
            {
                "name": pa.array([f"n{i}" for i in range(len(part))], pa.string()),
                "email": pa.array(part["email"].tolist(), pa.string()),
                "status": pa.array(part["status"].tolist(), pa.string()).dictionary_encode(),
                "score": pa.array(part["score"].tolist(), pa.float64()),
            }
        )
        rows = pa.array(part["_row"].tolist(), pa.int64())
        if numbers == "column":
            table = table.append_column(ROW_COLUMN, rows)
        else:
            pq.write_table(pa.table({"n": rows}), folder / f"rows-{status}.parquet")
            beside[status] = str(folder / f"rows-{status}.parquet")
        # small row groups: the reader's batches then end inside a file, not only at its end
        pq.write_table(table, folder / f"{status}.parquet", row_group_size=7)
        files[status] = str(folder / f"{status}.parquet")
    return files, (beside or None)


def check_files(
    folder: Path,
    frame: pd.DataFrame,
    expected: int = 100,
    *,
    numbers: str = "column",
    batch_rows: int = 16,
) -> QualityReport:
    """check_outputs over ``frame`` written as files, in batches of ``batch_rows`` rows."""
    files, beside = write_outputs(folder, frame, numbers=numbers)
    return check_outputs(
        files,
        expected_rows=expected,
        summary_rows=counts(frame),
        row_numbers=beside,
        batch_rows=batch_rows,
    )


def test_files_of_a_correct_output_pass(tmp_path: Path) -> None:
    report = check_files(tmp_path, output(100))
    assert report.passed, report.as_dict()
    assert "100 rows expected, 100 written" in details(report, "rows_in_exactly_one_output")
    assert "7 files, 100 rows" in details(report, "file_counts_match_summary")


def test_row_numbers_beside_the_files_pass(tmp_path: Path) -> None:
    assert check_files(tmp_path, output(100), numbers="beside").passed


def test_row_numbers_as_arrays(tmp_path: Path) -> None:
    frame = output(100)
    files, _ = write_outputs(tmp_path, frame, numbers="beside")
    arrays = {
        s: [np.array(frame.loc[frame["_file"] == s, "_row"].to_numpy()[i : i + 3]) for i in (0, 3)]
        + [pa.array(frame.loc[frame["_file"] == s, "_row"].to_numpy()[6:])]
        for s in STATUSES
    }
    report = check_outputs(
        files, expected_rows=100, summary_rows=counts(frame), row_numbers=arrays, batch_rows=9
    )
    assert report.passed, report.as_dict()


def test_duplicate_in_another_batch_and_missing_row_are_named(tmp_path: Path) -> None:
    # row 8 gone, row 99 twice, the copies in different files and batches: only the ledger
    # across batches can see it (each batch on its own is clean)
    frame = output(100)
    frame.loc[7, "_row"] = 99
    text = only_failing(check_files(tmp_path, frame, batch_rows=5), "rows_in_exactly_one_output")
    assert "2 rows share a row number (row 99 written 2 times)" in text
    assert "row 8 is missing" in text


def test_row_written_three_times_across_batches(tmp_path: Path) -> None:
    frame = output(100)
    frame = pd.concat([frame, frame.iloc[[4, 4]]], ignore_index=True)
    text = only_failing(check_files(tmp_path, frame), "rows_in_exactly_one_output")
    assert "100 rows expected, 102 written" in text
    assert "3 rows share a row number (row 5 written 3 times)" in text


def test_many_missing_rows_are_counted(tmp_path: Path) -> None:
    frame = output(100).iloc[:90]
    text = only_failing(check_files(tmp_path, frame), "rows_in_exactly_one_output")
    assert "100 rows expected, 90 written" in text
    assert "rows 91, 92, 93, 94, 95 and 5 more are missing" in text


def test_faults_in_several_batches_add_up(tmp_path: Path) -> None:
    frame = output(1000)
    frame.loc[frame.index[::10], "score"] = 2.0
    report = check_files(tmp_path, frame, expected=1000, batch_rows=64)
    text = only_failing(report, "score_in_range")
    assert text.startswith("100 scores are outside 0 to 1: 2.0 (row ")
    assert text.endswith("and 95 more")


def test_wrong_file_in_a_later_batch_is_named(tmp_path: Path) -> None:
    frame = output(100)
    frame.loc[97, "status"] = "valid"  # row 98 says valid but sits in the role file's last batch
    text = only_failing(check_files(tmp_path, frame), "status_allowed")
    assert "1 row is in the file of another status: row 98 ('valid') in " in text


def test_files_without_row_numbers_fail(tmp_path: Path) -> None:
    frame = output(50)
    files, _ = write_outputs(tmp_path, frame, numbers="beside")  # numbers written, not given
    report = check_outputs(files, expected_rows=50, summary_rows=counts(frame))
    text = only_failing(report, "rows_in_exactly_one_output")
    assert "50 rows have no row number" in text


def test_unwritten_status_file_fails(tmp_path: Path) -> None:
    frame = output(100)
    files, _ = write_outputs(tmp_path, frame)
    Path(files["role"]).unlink()
    report = check_outputs(files, expected_rows=100, summary_rows=counts(frame))
    assert "no row count for role.parquet" in details(report, "file_counts_match_summary")
    assert "rows 7, 14, 21, 28, 35 and 9 more are missing" in details(
        report, "rows_in_exactly_one_output"
    )


def test_result_columns_renamed_by_the_input_are_read(tmp_path: Path) -> None:
    # an input with its own status and email columns: the results are result_status, ...
    frame = output(30)
    for status in STATUSES:
        part = frame[frame["_file"] == status]
        pq.write_table(
            pa.table(
                {
                    "status": pa.array(["lead"] * len(part)),
                    "email": pa.array([None] * len(part), pa.string()),
                    "result_email": pa.array(part["email"].tolist()),
                    "result_status": pa.array(part["status"].tolist()),
                    "result_score": pa.array(part["score"].tolist()),
                    ROW_COLUMN: pa.array(part["_row"].tolist()),
                }
            ),
            tmp_path / f"{status}.parquet",
        )
    report = check_outputs(
        status_files(str(tmp_path)), expected_rows=30, summary_rows=counts(frame)
    )
    assert report.passed, report.as_dict()


def test_empty_outputs_of_an_empty_input_pass(tmp_path: Path) -> None:
    report = check_files(tmp_path, output(0), expected=0)
    assert report.passed, report.as_dict()


def test_file_without_status_column_is_misuse(tmp_path: Path) -> None:
    pq.write_table(pa.table({"score": [0.5]}), tmp_path / "valid.parquet")
    with pytest.raises(ValueError, match=r"valid\.parquet: the output file has no status column"):
        check_outputs({"valid": str(tmp_path / "valid.parquet")}, expected_rows=1, summary_rows={})


def test_checks_in_the_warm_worker_give_the_same_report(tmp_path: Path) -> None:
    frame = output(100)
    frame.loc[7, "_row"] = 99
    files, _ = write_outputs(tmp_path, frame)
    options = {"expected_rows": 100, "summary_rows": counts(frame), "batch_rows": 16}
    here = check_outputs(files, **options)
    with warm_up() as worker:
        there = check_outputs(files, **options, worker=worker)
        with pytest.raises(ValueError, match="expected_rows"):
            check_outputs(files, **{**options, "expected_rows": -1}, worker=worker)
    assert [c.details for c in there.checks] == [c.details for c in here.checks]
    assert not there.passed


def test_a_thread_warm_up_checks_here(tmp_path: Path) -> None:
    frame = output(100)
    files, _ = write_outputs(tmp_path, frame)
    with warm_up(process=False) as worker:
        report = check_outputs(files, expected_rows=100, summary_rows=counts(frame), worker=worker)
        assert worker.import_seconds is not None
    assert report.passed, report.as_dict()


def test_begun_checks_run_in_the_child_before_anyone_waits_for_them(tmp_path: Path) -> None:
    # a run begins the checks, then compiles its report's template while they run
    # (docs/pipeline.md, "Small lists"): the answer is on its way without the call
    frame = output(60)
    files, _ = write_outputs(tmp_path, frame)
    with warm_up() as worker:
        assert worker.wait_ready()
        process = worker._process
        assert process is not None
        assert process.stdout is not None
        checked = worker.begin(files, expected_rows=60, summary_rows=counts(frame))
        readable, _, _ = select.select([process.stdout], [], [], 120)
        assert readable == [process.stdout]  # the report came without being asked for
        report = checked()
    assert report.passed, report.as_dict()


def test_checks_begun_after_the_child_died_run_here(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frame = output(40)
    frame.loc[3, "score"] = 2.0
    files, _ = write_outputs(tmp_path, frame)
    options = {"expected_rows": 40, "summary_rows": counts(frame)}
    with warm_up() as worker:
        process = worker._process
        assert process is not None
        checked = worker.begin(files, **options)
        process.kill()  # after the request went, before the answer came
        process.wait()
        with caplog.at_level(logging.WARNING, logger="listhygiene.pipeline.quality"):
            report = checked()
        died = worker.begin(files, **options)  # and with the child already gone
        again = died()
    assert "checking here instead" in caplog.text
    assert not report.passed
    assert not again.passed
    assert [c.details for c in report.checks] == [c.details for c in again.checks]


def test_the_report_template_is_compiled_ahead() -> None:
    from listhygiene.pipeline.publish import prepare_report
    from listhygiene.pipeline.report import _environment

    _environment.cache_clear()
    prepare_report()
    cache = _environment().cache
    assert cache is not None
    assert len(cache) == 1  # rendering after the checks compiles nothing


def test_the_warm_worker_child_imports_gx_without_what_our_checks_never_use(
    tmp_path: Path,
) -> None:
    # GX imports scipy.stats and altair for one statistical expectation, and SQLAlchemy and the
    # cloud SDKs for its optional integrations: ~2.5 s of its import, on a small run's critical
    # path (docs/pipeline.md, "Quality checks"). The child keeps them out, and a real check
    # through it still passes.
    frame = output(50)
    files, _ = write_outputs(tmp_path, frame)
    loaded = tmp_path / "loaded.json"
    code = (
        "import json, sys\n"
        "from listhygiene.pipeline.quality.worker import _serve\n"
        "_serve()\n"
        "real = [n for n, m in sys.modules.items() if isinstance(m, type(sys))"
        " and type(m).__name__ != 'DeferredModule']\n"
        f"open({str(loaded)!r}, 'w').write(json.dumps(real))\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None
    assert child.stdout is not None
    assert pickle.load(child.stdout)[0] == "ready"
    options = {"expected_rows": 50, "summary_rows": counts(frame)}
    pickle.dump((files, options), child.stdin)
    child.stdin.flush()
    answer, report = pickle.load(child.stdout)
    child.stdin.close()
    assert child.wait(timeout=60) == 0
    child.stdout.close()
    assert answer == "ok"
    assert report.passed, report
    modules = set(json.loads(loaded.read_text()))
    assert "great_expectations" in modules
    unused = {"scipy.stats", "altair", "jsonschema", "mistune"}
    assert not {*unused, "sqlalchemy", "boto3", "botocore"} & modules


def test_a_deferred_module_loads_on_first_use() -> None:
    code = """if True:
        import sys
        from listhygiene.pipeline.quality.deferred import DeferredModule, defer
        assert defer("xml.dom.minidom", "sys") == ["xml.dom.minidom"]   # sys is already there
        from xml.dom import minidom
        assert isinstance(minidom, DeferredModule)
        assert "xml.dom.minicompat" not in sys.modules                 # minidom's own import
        document = minidom.parseString("<a>b</a>")                     # the real one, now
        assert document.documentElement.tagName == "a"
        assert "xml.dom.minicompat" in sys.modules
        assert not isinstance(sys.modules["xml.dom.minidom"], DeferredModule)
        import xml.dom.minidom as again
        assert not isinstance(again, DeferredModule)
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_child_started_early_is_the_one_the_run_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    # `listhygiene clean` starts the checks' child before it imports the pipeline
    # (docs/pipeline.md, "Small lists"); the run's warm_up() takes that child.
    from listhygiene.pipeline.quality import start_early, worker

    monkeypatch.setenv(worker.WORKER_VARIABLE, "process")
    start_early()
    early = worker._early
    assert early is not None
    assert early._process is not None
    with warm_up() as taken:
        assert taken is early
        assert worker._early is None
    start_early()
    thread_run = worker._early
    assert thread_run is not None
    process = thread_run._process
    assert process is not None
    with warm_up(process=False):  # a run that checks in its own process stops the child
        assert process.poll() is not None
    monkeypatch.setenv(worker.WORKER_VARIABLE, "thread")
    start_early()
    assert worker._early is None


def test_a_default_batch_validates_half_a_million_rows_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GX costs ~50 ms of set-up per validation whatever its size: 10,000,000 rows took 50
    # validations in batches of 200,000, 20 now (docs/pipeline.md, "Every row, in flat memory")
    from listhygiene.pipeline.quality.suite import _Suite

    sizes: list[int] = []
    rows = _Suite.rows

    def counted(self: _Suite, frame: pd.DataFrame) -> list[object]:
        sizes.append(len(frame))
        return rows(self, frame)

    monkeypatch.setattr(_Suite, "rows", counted)
    n = 600_000
    table = pa.table(
        {
            "email": pa.repeat(pa.scalar("a@x.test"), n),
            "status": pa.repeat(pa.scalar("valid"), n),
            "score": pa.repeat(pa.scalar(0.9), n),
            ROW_COLUMN: pa.array(np.arange(1, n + 1)),
        }
    )
    files = {s: str(tmp_path / f"{s}.parquet") for s in STATUSES}
    for status, path in files.items():
        pq.write_table(table if status == "valid" else table.slice(0, 0), path)
    summary = {s: (n if s == "valid" else 0) for s in STATUSES}
    report = check_outputs(files, expected_rows=n, summary_rows=summary)
    assert report.passed, report.as_dict()
    assert sizes == [500_000, 100_000]


def test_the_next_batch_is_read_while_this_one_is_validated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # decoding a batch of the files lets go of the GIL: the checks read the next one in a
    # thread while GX validates this one (docs/pipeline.md, "Every row, in flat memory")
    import threading

    from listhygiene.pipeline.quality import checks
    from listhygiene.pipeline.quality.suite import _Suite

    made = threading.Condition()
    state = {"frames": 0, "done": False}
    ready_when_validated: list[int] = []
    gathered = checks._rebatched

    def counting(*args: Any) -> Iterator[pd.DataFrame]:
        for frame in gathered(*args):
            with made:
                state["frames"] += 1
                made.notify_all()
            yield frame
        with made:
            state["done"] = True
            made.notify_all()

    rows = _Suite.rows

    def validating(self: _Suite, frame: pd.DataFrame) -> list[object]:
        index = len(ready_when_validated)
        with made:  # the reader may go on while this batch is validated: it does not wait for it
            made.wait_for(lambda: state["frames"] > index + 1 or bool(state["done"]), timeout=5)
            ready_when_validated.append(int(state["frames"]))
        # without reading ahead the next batch is read only after this returns: fail at once
        assert state["frames"] > index + 1 or state["done"], ready_when_validated
        return rows(self, frame)

    monkeypatch.setattr(checks, "_rebatched", counting)
    monkeypatch.setattr(_Suite, "rows", validating)
    report = check_files(tmp_path, output(100), batch_rows=16)
    assert report.passed, report.as_dict()
    assert len(ready_when_validated) == state["frames"] > 3
    # while batch i was validated, batch i + 1 had been read
    assert all(ready > i + 1 for i, ready in enumerate(ready_when_validated[:-1]))

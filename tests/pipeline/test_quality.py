"""The quality checks pass on a correct output and fail, saying what they found, on each fault."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.quality import (
    CHECKS,
    STATUSES,
    QualityReport,
    run_quality_checks,
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

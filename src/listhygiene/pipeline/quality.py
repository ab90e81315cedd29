"""Data-quality checks on what a clean run wrote, declared as Great Expectations expectations.

The promise of ``listhygiene clean`` is that every input row comes out in exactly one per-status
file, in the file of its own status, with a score and an email, and that the summary counts what
the files hold. These checks prove it on the written output, not on the pipeline's intentions.
They are GX expectations so that a failure reads like any GX result (unexpected counts and
samples) and a user can rerun the same expectations in their own GX setup.

Two validations on one ephemeral context do all the work: one over the output rows (one row per
written row), one over a small frame of per-file counts. Row-count comparisons with another table
are SQL-only in GX, so the expected counts are passed in as numbers.

GX takes 11-14 s to import, so it is imported inside :func:`run_quality_checks`, never when this
module is imported: importing the pipeline stays cheap, and a run without checks never pays for
GX. A failing check never raises; only misuse does (a missing column, a negative count).
"""

import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from listhygiene.statuses import Status

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["CHECKS", "CheckResult", "QualityReport", "run_quality_checks"]

#: The seven statuses, in the order of the product's table: the allowed values and file names.
STATUSES: tuple[str, ...] = tuple(status.value for status in Status)

#: Columns of ``rows`` without which the checks cannot run (``email`` is checked, not required).
REQUIRED_COLUMNS: tuple[str, ...] = ("_row", "_file", "status", "score")

#: Stable machine names and one sentence for people, in the order they are reported.
CHECKS: dict[str, str] = {
    "rows_in_exactly_one_output": "Every input row is written to exactly one output file.",
    "status_allowed": (
        "Every status is one of the seven, and every row is in the file of its own status."
    ),
    "score_in_range": "Every row has a score between 0 and 1.",
    "email_present": "The email column exists and no row has a null email.",
    "file_counts_match_summary": "Each output file holds as many rows as the summary says.",
}

#: How many offending values a check's details quote before "and N more".
SAMPLE = 5


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict; ``details`` says what was found, concretely, pass or fail."""

    name: str
    description: str
    passed: bool
    details: str


@dataclass(frozen=True)
class QualityReport:
    """All checks of one run; ``seconds`` is the validation time, GX's one-off import excluded."""

    passed: bool
    checks: tuple[CheckResult, ...]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON-safe form written into ``summary.json`` under ``quality``."""
        return {
            "passed": self.passed,
            "checks": [asdict(check) for check in self.checks],
            "seconds": round(self.seconds, 3),
        }

    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.passed)


def run_quality_checks(
    rows: "pd.DataFrame | pa.Table",
    *,
    expected_rows: int,
    file_rows: Mapping[str, int],
    summary_rows: Mapping[str, int],
) -> QualityReport:
    """Check the written output of a run; never raises because a check fails.

    ``rows`` has one row per written row with columns ``_row`` (the 1-based input row number),
    ``_file`` (the status whose file holds the row), ``status``, ``score`` and ``email``;
    ``file_rows`` counts the rows of each written file, ``summary_rows`` the summary's counts.
    Raises :class:`ValueError` when ``rows`` lacks a required column or a count is negative.
    """
    frame = _rows_frame(rows)
    if expected_rows < 0:
        raise ValueError(f"expected_rows must be 0 or more, not {expected_rows}")
    counts = _counts_frame(file_rows, summary_rows)

    gx, gxe = _import_gx()
    started = time.perf_counter()
    context = _ephemeral_context(gx)
    source = context.data_sources.add_pandas("listhygiene_output")
    has_email = "email" in frame.columns
    rows_results = _validate(
        gx,
        context,
        source,
        "rows",
        frame,
        _row_expectations(gxe, expected_rows, has_email=has_email),
        index_column="_row",
    )
    count_results = _validate(
        gx, context, source, "file_counts", counts, _count_expectations(gxe), "status"
    )

    found: dict[str, list[_Outcome]] = {name: [] for name in CHECKS}
    for outcome in (*rows_results, *count_results):
        found[outcome.check].append(outcome)
    checks = (
        _rows_check(found["rows_in_exactly_one_output"], frame, expected_rows),
        _status_check(found["status_allowed"], len(frame)),
        _score_check(found["score_in_range"], len(frame)),
        _email_check(found["email_present"], len(frame)),
        _counts_check(found["file_counts_match_summary"], counts),
    )
    return QualityReport(
        passed=all(check.passed for check in checks),
        checks=checks,
        seconds=time.perf_counter() - started,
    )


# --- inputs ---------------------------------------------------------------------------------


def _rows_frame(rows: "pd.DataFrame | pa.Table") -> "pd.DataFrame":
    """Only the checked columns, as pandas, with categorical (dictionary) text made plain."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        names = set(rows.column_names)
    elif isinstance(rows, pd.DataFrame):
        names = set(rows.columns)
    else:
        raise TypeError(f"rows must be a pandas DataFrame or a pyarrow Table, not {type(rows)}")
    missing = [column for column in REQUIRED_COLUMNS if column not in names]
    if missing:
        raise ValueError(
            f"rows lacks the column(s) {', '.join(missing)}; quality checks need "
            f"{', '.join(REQUIRED_COLUMNS)} and email"
        )
    columns = [*REQUIRED_COLUMNS, *(["email"] if "email" in names else [])]
    frame = rows.select(columns).to_pandas() if isinstance(rows, pa.Table) else rows[columns]
    frame = frame.reset_index(drop=True)
    for column in ("_file", "status"):
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype(str).where(frame[column].notna())
    return frame


def _counts_frame(file_rows: Mapping[str, int], summary_rows: Mapping[str, int]) -> "pd.DataFrame":
    """One row per status (and per stray name): the file's count and the summary's."""
    import pandas as pd

    for label, counts in (("file_rows", file_rows), ("summary_rows", summary_rows)):
        for name, count in counts.items():
            if count is not None and count < 0:
                raise ValueError(f"{label}[{name!r}] is negative: {count}")
    names = [*STATUSES, *sorted(set(file_rows).union(summary_rows).difference(STATUSES))]
    return pd.DataFrame(
        {
            "status": pd.Series(names, dtype=str),
            "file_rows": pd.Series([file_rows.get(n) for n in names], dtype="float64"),
            "summary_rows": pd.Series([summary_rows.get(n) for n in names], dtype="float64"),
        }
    )


# --- GX -------------------------------------------------------------------------------------


def _import_gx() -> tuple[Any, Any]:
    import logging

    # GX logs its housekeeping (temporary docs folders) at INFO; a CLI run should not show it
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    import great_expectations.expectations as gxe

    return gx, gxe


def _ephemeral_context(gx: Any) -> Any:
    """An in-memory context that writes nothing and draws no progress bars on stderr."""
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _row_expectations(gxe: Any, expected_rows: int, *, has_email: bool) -> list[Any]:
    def tag(check: str, part: str) -> dict[str, str]:
        return {"check": check, "part": part}

    one_output = "rows_in_exactly_one_output"
    status = "status_allowed"
    score = "score_in_range"
    email = "email_present"
    expectations = [
        gxe.ExpectTableRowCountToEqual(value=expected_rows, meta=tag(one_output, "count")),
        gxe.ExpectColumnValuesToBeUnique(column="_row", meta=tag(one_output, "unique")),
        gxe.ExpectColumnValuesToNotBeNull(column="_row", meta=tag(one_output, "not_null")),
        gxe.ExpectColumnValuesToBeBetween(
            column="_row",
            min_value=1,
            max_value=max(expected_rows, 1),  # GX refuses min > max; the count catches 0
            meta=tag(one_output, "range"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="status", meta=tag(status, "not_null")),
        gxe.ExpectColumnValuesToBeInSet(
            column="status", value_set=list(STATUSES), meta=tag(status, "in_set")
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="status", column_B="_file", meta=tag(status, "own_file")
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="score", meta=tag(score, "not_null")),
        gxe.ExpectColumnValuesToBeBetween(
            column="score", min_value=0.0, max_value=1.0, meta=tag(score, "range")
        ),
        gxe.ExpectColumnToExist(column="email", meta=tag(email, "exists")),
    ]
    if has_email:
        expectations.append(
            gxe.ExpectColumnValuesToNotBeNull(column="email", meta=tag(email, "not_null"))
        )
    return expectations


def _count_expectations(gxe: Any) -> list[Any]:
    def tag(part: str) -> dict[str, str]:
        return {"check": "file_counts_match_summary", "part": part}

    return [
        gxe.ExpectColumnValuesToBeInSet(
            column="status", value_set=list(STATUSES), meta=tag("known_file")
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="file_rows", meta=tag("file_written")),
        gxe.ExpectColumnValuesToNotBeNull(column="summary_rows", meta=tag("summary_has")),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="file_rows",
            column_B="summary_rows",
            ignore_row_if="either_value_is_missing",
            meta=tag("equal"),
        ),
    ]


@dataclass(frozen=True)
class _Outcome:
    """One expectation's result, reduced to what the details need."""

    check: str
    part: str
    expectation: str
    success: bool
    result: dict[str, Any]
    error: str | None


def _validate(
    gx: Any,
    context: Any,
    source: Any,
    name: str,
    frame: "pd.DataFrame",
    expectations: list[Any],
    index_column: str,
) -> list[_Outcome]:
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
    suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
    # Suite and definition must belong to the context, or run() refuses them as "not fresh".
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=batch, suite=suite)
    )
    result = definition.run(
        batch_parameters={"dataframe": frame},
        result_format={
            "result_format": "SUMMARY",
            "partial_unexpected_count": SAMPLE,
            "unexpected_index_column_names": [index_column],
        },
    )
    return [
        _Outcome(
            check=item.expectation_config.meta["check"],
            part=item.expectation_config.meta["part"],
            expectation=_describe_expectation(item.expectation_config),
            success=bool(item.success),
            result=dict(item.result or {}),
            error=_error_message(item.exception_info),
        )
        for item in result.results
    ]


def _describe_expectation(config: Any) -> str:
    """``expect_column_values_to_be_between(score)``: which expectation, on which columns."""
    kwargs = config.kwargs or {}
    columns = [str(kwargs[key]) for key in ("column", "column_A", "column_B") if key in kwargs]
    return f"{config.type}({', '.join(columns)})"


def _error_message(info: Any) -> str | None:
    """GX reports an expectation that could not run either flat or keyed by metric."""
    if not isinstance(info, Mapping):
        return None
    if "raised_exception" in info:
        return str(info.get("exception_message")) if info.get("raised_exception") else None
    for nested in info.values():
        message = _error_message(nested)
        if message:
            return message
    return None


# --- details --------------------------------------------------------------------------------


def _listing(values: Iterable[str], total: int) -> str:
    shown = list(values)
    more = total - len(shown)
    text = ", ".join(shown)
    return f"{text} and {more:,} more" if more > 0 else text


def _plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def _unexpected(outcome: _Outcome) -> int:
    return int(outcome.result.get("unexpected_count") or 0)


def _indexed(outcome: _Outcome) -> list[dict[str, Any]]:
    """The sampled offending rows, each a dict of the index column and the checked columns."""
    items = outcome.result.get("partial_unexpected_index_list") or []
    return [item for item in items if isinstance(item, Mapping)]


def _row_number(value: Any) -> str:
    try:
        return f"{int(value)}"
    except (TypeError, ValueError):
        return "?"


def _value(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    if isinstance(value, str):
        return repr(str(value))
    return str(value.item() if hasattr(value, "item") else value)


def _verdict(name: str, failures: list[str], passed_details: str) -> CheckResult:
    return CheckResult(
        name=name,
        description=CHECKS[name],
        passed=not failures,
        details="; ".join(failures) if failures else passed_details,
    )


def _failures(outcomes: list[_Outcome], describe: Mapping[str, Any]) -> list[str]:
    """A sentence per failed expectation, in the order of ``describe``."""
    by_part = {outcome.part: outcome for outcome in outcomes}
    failures = []
    for part, sentence in describe.items():
        outcome = by_part.get(part)
        if outcome is None or outcome.success:
            continue
        if outcome.error:
            failures.append(f"{outcome.expectation} could not run: {outcome.error}")
        else:
            failures.append(sentence(outcome))
    return failures


def _rows_check(outcomes: list[_Outcome], frame: "pd.DataFrame", expected: int) -> CheckResult:
    def count(outcome: _Outcome) -> str:
        written = outcome.result.get("observed_value", len(frame))
        return f"{expected:,} rows expected, {written:,} written"

    def unique(outcome: _Outcome) -> str:
        repeats = [
            f"row {_row_number(item['value'])} written {item['count']} times"
            for item in outcome.result.get("partial_unexpected_counts") or []
        ]
        return (
            f"{_plural(_unexpected(outcome), 'row shares', 'rows share')} a row number "
            f"({_listing(repeats, len(repeats))})"
        )

    def not_null(outcome: _Outcome) -> str:
        return f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no row number"

    def out_of_range(outcome: _Outcome) -> str:
        values = [_value(v) for v in outcome.result.get("partial_unexpected_list") or []]
        return (
            f"{_plural(_unexpected(outcome), 'row number is', 'row numbers are')} outside "
            f"1 to {expected:,}: {_listing(values, _unexpected(outcome))}"
        )

    failures = _failures(
        outcomes,
        {"count": count, "unique": unique, "not_null": not_null, "range": out_of_range},
    )
    if failures:
        absent = _missing_rows(frame["_row"], expected)
        if absent:
            numbers = [f"{n}" for n in absent[:SAMPLE]]
            failures.append(
                f"row {numbers[0]} is missing"
                if len(absent) == 1
                else f"rows {_listing(numbers, len(absent))} are missing"
            )
    return _verdict(
        "rows_in_exactly_one_output",
        failures,
        f"{expected:,} rows expected, {len(frame):,} written, each input row exactly once",
    )


def _missing_rows(column: "pd.Series", expected: int) -> list[int]:
    """Input row numbers absent from the output: what the GX counts cannot name."""
    import numpy as np
    import pandas as pd

    present = pd.to_numeric(column, errors="coerce").dropna().to_numpy(dtype="float64")
    absent = np.setdiff1d(np.arange(1, expected + 1, dtype="float64"), present)
    return [int(n) for n in absent]


def _status_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no status "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    def in_set(outcome: _Outcome) -> str:
        values = [
            f"{_value(item['value'])} in {_plural(item['count'], 'row', 'rows')}"
            for item in outcome.result.get("partial_unexpected_counts") or []
        ]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} a status outside the "
            f"seven: {_listing(values, len(values))}"
        )

    def own_file(outcome: _Outcome) -> str:
        rows = [
            f"row {_row_number(item.get('_row'))} ({_value(item.get('status'))}) in "
            f"{item.get('_file')}.parquet"
            for item in _indexed(outcome)
        ]
        return (
            f"{_plural(_unexpected(outcome), 'row is', 'rows are')} in the file of another "
            f"status: {_listing(rows, _unexpected(outcome))}"
        )

    failures = _failures(outcomes, {"not_null": not_null, "in_set": in_set, "own_file": own_file})
    return _verdict(
        "status_allowed",
        failures,
        f"all {total:,} rows have one of the seven statuses and are in that status's file",
    )


def _score_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no score "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    def out_of_range(outcome: _Outcome) -> str:
        rows = [
            f"{_value(item.get('score'))} (row {_row_number(item.get('_row'))})"
            for item in _indexed(outcome)
        ]
        return (
            f"{_plural(_unexpected(outcome), 'score is', 'scores are')} outside 0 to 1: "
            f"{_listing(rows, _unexpected(outcome))}"
        )

    failures = _failures(outcomes, {"not_null": not_null, "range": out_of_range})
    return _verdict("score_in_range", failures, f"all {total:,} scores are between 0 and 1")


def _email_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def exists(outcome: _Outcome) -> str:
        return "the output has no email column"

    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} a null email "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    failures = _failures(outcomes, {"exists": exists, "not_null": not_null})
    return _verdict("email_present", failures, f"all {total:,} rows have an email (or '')")


def _counts_check(outcomes: list[_Outcome], counts: "pd.DataFrame") -> CheckResult:
    def names(outcome: _Outcome) -> list[str]:
        return [f"{item.get('status')}" for item in _indexed(outcome)]

    def known_file(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"{_listing(files, _unexpected(outcome))} counted, but no status has that name"

    def file_written(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"no row count for {_listing(files, _unexpected(outcome))} (file not written?)"

    def summary_has(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"the summary has no count for {_listing(files, _unexpected(outcome))}"

    def equal(outcome: _Outcome) -> str:
        pairs = [
            f"{item.get('status')}.parquet holds {_count(item.get('file_rows'))}, the summary "
            f"says {_count(item.get('summary_rows'))}"
            for item in _indexed(outcome)
        ]
        return _listing(pairs, _unexpected(outcome))

    failures = _failures(
        outcomes,
        {
            "known_file": known_file,
            "file_written": file_written,
            "summary_has": summary_has,
            "equal": equal,
        },
    )
    written = counts["file_rows"].dropna()
    return _verdict(
        "file_counts_match_summary",
        failures,
        f"{len(written)} files, {int(written.sum()):,} rows in all, each as the summary says",
    )


def _count(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "nothing"

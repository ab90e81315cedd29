"""The checks, run in this process: the batches read (ahead, in a thread: decoding the next
overlaps GX's validation of this one), each validated by the GX suite, the rows counted by the
ledger, the outcomes added up and put in words, into one :class:`QualityReport`.

The warm worker runs them too, in its child process, so they sit below both the worker and the
package's :func:`~listhygiene.pipeline.quality.check_outputs`, which picks where they run. A
failing check never raises; only misuse does.
"""

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.quality.ledger import _RowLedger
from listhygiene.pipeline.quality.messages import (
    _counts_check,
    _email_check,
    _rows_check,
    _score_check,
    _status_check,
)
from listhygiene.pipeline.quality.reading import (
    BATCH_ROWS,
    _counts_frame,
    _empty_rows,
    _file_batches,
    _footer_rows,
    _rebatched,
    _rows_frame,
)
from listhygiene.pipeline.quality.results import CHECKS, QualityReport
from listhygiene.pipeline.quality.suite import _combine, _import_gx, _Outcome, _Suite, gx_missing
from listhygiene.pipeline.sources.batches import read_ahead

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.fs

    from listhygiene.pipeline.quality.reading import RowNumbers


def _skipped(reason: str) -> QualityReport:
    return QualityReport(passed=True, checks=(), seconds=0.0, skipped=reason)


def _check_outputs_here(
    files: Mapping[str, str],
    *,
    expected_rows: int,
    summary_rows: Mapping[str, int],
    row_numbers: "Mapping[str, RowNumbers] | None" = None,
    filesystem: "pyarrow.fs.FileSystem | None" = None,
    batch_rows: int = BATCH_ROWS,
) -> QualityReport:
    """:func:`~listhygiene.pipeline.quality.check_outputs` in this process (its docstring says
    the rest): the parent's checks without a worker, and the worker's, in its child."""
    if expected_rows < 0:
        raise ValueError(f"expected_rows must be 0 or more, not {expected_rows}")
    missing = gx_missing()
    if missing is not None:
        return _skipped(missing)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be 1 or more, not {batch_rows}")
    opened: dict[str, Any] = {}  # each file opened once (reading.py, _footer_rows)
    file_rows = {name: _footer_rows(path, filesystem, opened) for name, path in files.items()}
    counts = _counts_frame(file_rows, summary_rows)
    batches = read_ahead(
        _rebatched(
            (
                _file_batches(
                    name,
                    path,
                    filesystem,
                    (row_numbers or {}).get(name),
                    batch_rows,
                    opened,
                )
                for name, path in files.items()
            ),
            batch_rows,
        )
    )
    try:
        return _check(batches, expected_rows, counts)
    finally:
        batches.close()


def run_quality_checks(
    rows: "pd.DataFrame | pa.Table",
    *,
    expected_rows: int,
    file_rows: Mapping[str, int],
    summary_rows: Mapping[str, int],
) -> QualityReport:
    """The checks over rows already in memory (prefer
    :func:`~listhygiene.pipeline.quality.check_outputs`, which reads the files in bounded
    batches); never raises because a check fails.

    ``rows`` has one row per written row with columns ``_row`` (the 1-based input row number),
    ``_file`` (the status whose file holds the row), ``status``, ``score`` and ``email``;
    ``file_rows`` counts the rows of each written file, ``summary_rows`` the summary's counts.
    Raises :class:`ValueError` when ``rows`` lacks a required column or a count is negative.
    """
    frame = _rows_frame(rows)
    if expected_rows < 0:
        raise ValueError(f"expected_rows must be 0 or more, not {expected_rows}")
    counts = _counts_frame(file_rows, summary_rows)
    return _check(iter([frame]), expected_rows, counts)


def _check(
    batches: "Iterator[pd.DataFrame]", expected_rows: int, counts: "pd.DataFrame"
) -> QualityReport:
    """Run the row suite on each batch and the counts suite once; combine into the report."""
    gx, gxe = _import_gx()
    started = time.perf_counter()
    suite = _Suite(gx, gxe, expected_rows)
    ledger = _RowLedger(expected_rows)
    combined: dict[tuple[str, str], _Outcome] = {}
    for frame in batches:
        ledger.add(frame["_row"])
        for outcome in suite.rows(frame):
            key = (outcome.check, outcome.part)
            combined[key] = _combine(combined.get(key), outcome)
    if ledger.written == 0:  # no rows at all: the expectations still run, on an empty frame
        for outcome in suite.rows(_empty_rows()):
            combined[(outcome.check, outcome.part)] = outcome
    found: dict[str, list[_Outcome]] = {name: [] for name in CHECKS}
    for outcome in (*combined.values(), *suite.counts(counts)):
        found[outcome.check].append(outcome)
    checks = (
        _rows_check(found["rows_in_exactly_one_output"], ledger),
        _status_check(found["status_allowed"], ledger.written),
        _score_check(found["score_in_range"], ledger.written),
        _email_check(found["email_present"], ledger.written),
        _counts_check(found["file_counts_match_summary"], counts),
    )
    return QualityReport(
        passed=all(check.passed for check in checks),
        checks=checks,
        seconds=time.perf_counter() - started,
    )

"""The output checks: data-quality checks on what a run wrote, declared as Great Expectations
expectations. The one module the CLI pipeline, the Airflow chunk merge and the Dagster asset checks
all call (docs/pipeline.md, "Quality checks").

The promise of ``listhygiene clean`` is that every input row comes out in exactly one per-status
file, in the file of its own status, with a score and an email, and that the summary counts what
the files hold. These checks prove it on the written output, not on the pipeline's intentions.
They are GX expectations so that a failure reads like any GX result (unexpected counts and
samples) and a user can rerun the same expectations in their own GX setup.

Every row is checked, in flat memory: :func:`check_outputs` reads the files in bounded batches
(:data:`BATCH_ROWS` rows), runs the row expectations on each batch with one ephemeral GX context
and adds the batches' results up (counts summed, the first samples kept). Row conservation
spans batches, so it is counted exactly beside GX: one bit per input row says "seen", one
"seen again" (2.5 MB at 10,000,000 rows), which names the duplicated and the missing row numbers.
The per-file counts against the summary are one more, tiny, GX validation. A SQL data source
over the files (DuckDB through duckdb-engine) would let GX see the whole table, but GX 1.24 reads
its query results after closing the connection, and DuckDB's results are gone by then: every
metric fails (docs/pipeline.md has the figures of both).

The row number of an output row is :data:`ROW_COLUMN` (``_source_row``, 1-based, as the
Dagster status tables carry it), either a column of the file or given beside it (``row_numbers``)
when the published files do not carry it, as ``listhygiene clean``'s do not.

GX takes 11-14 s to import, so it is imported only when checks run, never when this module is
imported; :func:`warm_up` imports it in a child process at the start of a run, so the import
costs neither the critical path nor the pipeline's CPU (a thread would hold the GIL while it
imports), and the checks then run in that child. A failing check never raises; only misuse does.
"""

import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, TypeAlias

from listhygiene.statuses import Status

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.fs

log = logging.getLogger(__name__)

__all__ = [
    "BATCH_ROWS",
    "CHECKS",
    "ROW_COLUMN",
    "STATUSES",
    "WORKER_VARIABLE",
    "CheckResult",
    "QualityReport",
    "QualityWorker",
    "check_outputs",
    "default_worker_kind",
    "run_quality_checks",
    "status_files",
    "warm_up",
]

#: The seven statuses, in the order of the product's table: the allowed values and file names.
STATUSES: tuple[str, ...] = tuple(status.value for status in Status)

#: The 1-based input row number of an output row: one name for the CLI, Airflow and Dagster.
ROW_COLUMN = "_source_row"

#: Rows per GX validation: one batch of this size costs ~60 ms and ~40 MiB (docs/pipeline.md).
BATCH_ROWS = 200_000

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
    #: Why no check ran (great-expectations is not installed); None when they ran.
    skipped: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON-safe form written into ``summary.json`` under ``quality``."""
        found: dict[str, Any] = {
            "passed": self.passed,
            "checks": [asdict(check) for check in self.checks],
            "seconds": round(self.seconds, 3),
        }
        if self.skipped is not None:
            found["skipped"] = self.skipped
        return found

    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(check for check in self.checks if not check.passed)


def gx_missing() -> str | None:
    """Why the checks cannot run here (the ``quality`` extra is not installed), or None."""
    from listhygiene.extras import missing_extra

    if missing_extra("quality") is None:
        return None
    return (
        "great-expectations is not installed, so no data-quality check ran: "
        "pip install 'listhygiene[quality]'"
    )


def _skipped(reason: str) -> QualityReport:
    return QualityReport(passed=True, checks=(), seconds=0.0, skipped=reason)


if TYPE_CHECKING:
    #: Row numbers given beside a status file, in the file's row order: the path of a Parquet
    #: file (its first column), or arrays (pyarrow or numpy) whose concatenation is the column.
    RowNumbers: TypeAlias = "str | os.PathLike[str] | Iterable[pa.Array | np.ndarray]"


def status_files(folder: str) -> dict[str, str]:
    """The seven per-status files of an output folder (a path on the caller's filesystem)."""
    return {status: f"{folder.rstrip('/')}/{status}.parquet" for status in STATUSES}


def check_outputs(
    files: Mapping[str, str],
    *,
    expected_rows: int,
    summary_rows: Mapping[str, int],
    row_numbers: "Mapping[str, RowNumbers] | None" = None,
    filesystem: "pyarrow.fs.FileSystem | None" = None,
    batch_rows: int = BATCH_ROWS,
    worker: "QualityWorker | None" = None,
) -> QualityReport:
    """Check every row of the written per-status Parquet files; never raises because a check
    fails. Memory is bounded by ``batch_rows``, whatever the files hold.

    ``files`` maps each status to its file (:func:`status_files` gives the seven of a folder;
    a status left out is reported as "file not written", a name that is no status as a stray
    file), on ``filesystem`` (pyarrow's; local paths when None). Each file is read for its
    ``status``, ``score`` and ``email`` (``result_<name>`` when the input had such a column) and
    its row numbers: the file's own :data:`ROW_COLUMN`, or ``row_numbers[status]`` when given
    (a Parquet file whose first column holds them in the file's row order, or arrays whose
    concatenation does). A file with neither has no row numbers, which fails the checks.

    ``expected_rows`` is the input's row count; ``summary_rows`` the summary's count per status,
    compared with each file's row count (from its Parquet footer).

    With ``worker`` (from :func:`warm_up`) the checks run in its child process, where GX is
    already imported; the files must then be readable from there (paths, or a picklable
    filesystem). Raises :class:`ValueError` for a negative count or a file without a status or
    score column.

    For a run that writes the files itself (the runner)::

        worker = quality.warm_up()          # at run start: GX imports in a child meanwhile
        ...                                 # read, verify, write the staged files
        report = quality.check_outputs(
            {s: folder.staged(f"{s}.parquet") for s in STATUSES},
            expected_rows=rows, summary_rows=by_status,
            row_numbers={s: work_path / f"rows-{s}.parquet" for s in STATUSES},
            filesystem=folder.fs, worker=worker,
        )
        worker.close()                      # also when the run fails before checking
    """
    if worker is not None:
        return worker.check_outputs(
            files,
            expected_rows=expected_rows,
            summary_rows=summary_rows,
            row_numbers=row_numbers,
            filesystem=filesystem,
            batch_rows=batch_rows,
        )
    if expected_rows < 0:
        raise ValueError(f"expected_rows must be 0 or more, not {expected_rows}")
    missing = gx_missing()
    if missing is not None:
        return _skipped(missing)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be 1 or more, not {batch_rows}")
    file_rows = {name: _footer_rows(path, filesystem) for name, path in files.items()}
    counts = _counts_frame(file_rows, summary_rows)
    batches = _rebatched(
        (
            _file_batches(
                name,
                path,
                filesystem,
                (row_numbers or {}).get(name),
                batch_rows,
            )
            for name, path in files.items()
        ),
        batch_rows,
    )
    return _check(batches, expected_rows, counts)


def run_quality_checks(
    rows: "pd.DataFrame | pa.Table",
    *,
    expected_rows: int,
    file_rows: Mapping[str, int],
    summary_rows: Mapping[str, int],
) -> QualityReport:
    """The checks over rows already in memory (prefer :func:`check_outputs`, which reads the
    files in bounded batches); never raises because a check fails.

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


def _empty_rows() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame(
        {
            "_row": pd.Series([], dtype="int64"),
            "_file": pd.Series([], dtype=str),
            "status": pd.Series([], dtype=str),
            "score": pd.Series([], dtype="float64"),
            "email": pd.Series([], dtype=str),
        }
    )


def _counts_frame(
    file_rows: Mapping[str, int | None], summary_rows: Mapping[str, int]
) -> "pd.DataFrame":
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


def _open(path: str, filesystem: "pyarrow.fs.FileSystem | None") -> Any:
    import pyarrow.parquet as pq

    source = os.fspath(path)
    return pq.ParquetFile(filesystem.open_input_file(source) if filesystem is not None else source)


def _footer_rows(path: str, filesystem: "pyarrow.fs.FileSystem | None") -> int | None:
    """The file's row count from its footer; None when the file is not there."""
    try:
        return int(_open(path, filesystem).metadata.num_rows)
    except FileNotFoundError:
        return None


def _file_batches(
    name: str,
    path: str,
    filesystem: "pyarrow.fs.FileSystem | None",
    numbers: Any,
    batch_rows: int,
) -> "Iterator[pa.Table]":
    """The rows of one file as tables of the checked columns (``_row``, ``_file``, ``status``,
    ``score`` and ``email`` when the file has one), at most ``batch_rows`` rows each."""
    import pyarrow as pa

    try:
        parquet = _open(path, filesystem)
    except FileNotFoundError:
        return
    schema = parquet.schema_arrow
    names = {n: (f"result_{n}" if f"result_{n}" in schema.names else n) for n in _RESULT}
    for needed in ("status", "score"):
        if names[needed] not in schema.names:
            raise ValueError(f"{path}: the output file has no {needed} column")
    read = [names[n] for n in _RESULT if names[n] in schema.names]
    own = numbers is None and ROW_COLUMN in schema.names
    batches = parquet.iter_batches(batch_size=batch_rows, columns=read + ([ROW_COLUMN] * own))
    given = _number_chunks(numbers, filesystem, batch_rows) if numbers is not None else None
    pending: list[pa.Array] = []
    for batch in batches:
        size = batch.num_rows
        if own:
            row = batch.column(ROW_COLUMN)
        elif given is not None:
            row, pending = _take(pending, given, size)
        else:
            row = pa.nulls(size, pa.int64())
        columns = {
            "_row": _plain(row),
            "_file": pa.repeat(pa.scalar(name, pa.string()), size),
            "status": _plain(batch.column(names["status"])),
            "score": _plain(batch.column(names["score"])),
        }
        if names["email"] in schema.names:
            columns["email"] = _presence(batch.column(names["email"]))
        yield pa.table(columns)


_RESULT = ("status", "score", "email")


def _presence(values: "pa.Array") -> "pa.Array":
    """1 where there is a value, null where there is none: all the email check looks at, and
    a third of the checks' time saved (GX fingerprints every batch, long strings cost most)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pc.is_valid(values), pa.scalar(1, pa.int8()), pa.scalar(None, pa.int8()))


def _plain(array: "pa.Array") -> "pa.Array":
    """Dictionary-encoded text as plain text; other types as they are."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        return array.cast(array.type.value_type)
    return array


def _number_chunks(
    numbers: Any, filesystem: "pyarrow.fs.FileSystem | None", batch_rows: int
) -> "Iterator[pa.Array]":
    import pyarrow as pa

    if isinstance(numbers, str | os.PathLike):
        parquet = _open(os.fspath(numbers), filesystem)
        first = parquet.schema_arrow.names[0]
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=[first]):
            yield batch.column(0)
        return
    for chunk in numbers:
        yield chunk if isinstance(chunk, pa.Array | pa.ChunkedArray) else pa.array(chunk)


def _take(
    pending: "list[pa.Array]", chunks: "Iterator[pa.Array]", size: int
) -> "tuple[pa.Array, list[pa.Array]]":
    """``size`` row numbers from ``pending`` then ``chunks``; nulls when they run out."""
    import pyarrow as pa

    have = sum(len(p) for p in pending)
    while have < size:
        chunk = next(chunks, None)
        if chunk is None:
            pending.append(pa.nulls(size - have, pa.int64()))
            break
        chunk = pa.concat_arrays(chunk.chunks) if isinstance(chunk, pa.ChunkedArray) else chunk
        pending.append(chunk.cast(pa.int64()) if chunk.type != pa.int64() else chunk)
        have += len(chunk)
    joined = pa.concat_arrays(pending) if len(pending) > 1 else pending[0]
    return joined.slice(0, size), [joined.slice(size)]


def _rebatched(files: "Iterable[Iterator[pa.Table]]", batch_rows: int) -> "Iterator[pd.DataFrame]":
    """The files' tables gathered into frames of up to ``batch_rows`` rows (small files share
    one validation); tables of another schema start a new frame."""
    import pyarrow as pa

    held: list[pa.Table] = []
    count = 0
    for tables in files:
        for table in tables:
            if held and (count + table.num_rows > batch_rows or table.schema != held[0].schema):
                yield pa.concat_tables(held).to_pandas()
                held, count = [], 0
            held.append(table)
            count += table.num_rows
    if held:
        yield pa.concat_tables(held).to_pandas()


# --- row conservation across batches ----------------------------------------------------------


@dataclass
class _RowLedger:
    """Which input row numbers were written, once or more: two bits per input row.

    GX checks each batch; whether a row number was written in two batches, or in none, needs all
    of them. Null, fractional and out-of-range numbers are GX's to report, not counted here.
    """

    expected: int
    written: int = 0
    #: Rows beyond the first of each repeated number.
    repeats: int = 0
    #: The first repeated numbers found, with how many times each was written.
    sample: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import numpy as np

        size = (self.expected + 7) // 8
        self.seen = np.zeros(size, np.uint8)
        self.again = np.zeros(size, np.uint8)

    def add(self, numbers: "pd.Series") -> None:
        import numpy as np
        import pandas as pd

        self.written += len(numbers)
        plain = numbers.to_numpy() if numbers.dtype == np.int64 else None
        if plain is not None and bool((plain[1:] > plain[:-1]).all()):
            # rising, as a status file's rows are written: no number twice, nothing to sort
            index = plain[(plain >= 1) & (plain <= self.expected)] - 1
            counts = np.ones(len(index), np.int64)
        else:
            values = pd.to_numeric(numbers, errors="coerce").to_numpy(
                dtype="float64", na_value=np.nan
            )
            with np.errstate(invalid="ignore"):
                usable = (values >= 1) & (values <= self.expected) & (values == np.floor(values))
            index, counts = np.unique(values[usable].astype(np.int64) - 1, return_counts=True)
        if not len(index):
            return
        byte, bit = index >> 3, np.left_shift(1, index & 7).astype(np.uint8)
        before = (self.seen[byte] & bit) != 0
        again = before | (counts > 1)
        self.repeats += int(counts[before].sum()) + int((counts[~before & again] - 1).sum())
        np.bitwise_or.at(self.seen, byte, bit)
        if again.any():
            np.bitwise_or.at(self.again, byte[again], bit[again])
            self._sample(index[again] + 1, counts[again], before[again])

    def _sample(self, numbers: "np.ndarray", counts: "np.ndarray", before: "np.ndarray") -> None:
        import numpy as np

        known = np.isin(numbers, np.fromiter(self.sample, np.int64, len(self.sample)))
        for number, count in zip(numbers[known], counts[known], strict=True):
            self.sample[int(number)] += int(count)
        room = SAMPLE - len(self.sample)
        for number, count, was in list(
            zip(numbers[~known], counts[~known], before[~known], strict=True)
        )[:room]:
            self.sample[int(number)] = int(count) + int(was)

    def shared(self) -> int:
        """Rows whose number another row has too (every copy counts, as GX counts them)."""
        import numpy as np

        return self.repeats + int(np.bitwise_count(self.again).sum())

    def missing(self) -> tuple[int, list[int]]:
        """How many input row numbers no row has, and the first few."""
        import numpy as np

        count = self.expected - int(np.bitwise_count(self.seen).sum())
        first: list[int] = []
        step = 1 << 16
        for start in range(0, len(self.seen), step):
            if not count or len(first) >= SAMPLE:
                break
            bits = np.unpackbits(self.seen[start : start + step], bitorder="little")
            absent = np.flatnonzero(bits == 0) + start * 8 + 1
            first.extend(int(n) for n in absent[absent <= self.expected][: SAMPLE - len(first)])
        return count, first


# --- GX -------------------------------------------------------------------------------------


def _import_gx() -> tuple[Any, Any]:
    # GX logs its housekeeping (temporary docs folders) at INFO; a CLI run should not show it
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    import great_expectations.expectations as gxe

    return gx, gxe


class _Suite:
    """One ephemeral GX context holding the row suite (run once per batch) and the counts
    suite; it writes nothing and draws no progress bars on stderr."""

    def __init__(self, gx: Any, gxe: Any, expected_rows: int) -> None:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx, self.gxe, self.expected_rows = gx, gxe, expected_rows
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(
            globally=False, metric_calculations=False
        )
        self.source = self.context.data_sources.add_pandas("listhygiene_output")
        self.definitions: dict[str, Any] = {}

    def rows(self, frame: "pd.DataFrame") -> list["_Outcome"]:
        has_email = "email" in frame.columns
        name = "rows" if has_email else "rows_without_email"
        if name not in self.definitions:
            expectations = _row_expectations(self.gxe, self.expected_rows, has_email=has_email)
            self.definitions[name] = self._define(name, expectations)
        return self._run(name, frame, "_row")

    def counts(self, frame: "pd.DataFrame") -> list["_Outcome"]:
        self.definitions["file_counts"] = self._define("file_counts", _count_expectations(self.gxe))
        return self._run("file_counts", frame, "status")

    def _define(self, name: str, expectations: list[Any]) -> Any:
        gx, context = self.gx, self.context
        batch = self.source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        # Suite and definition must belong to the context, or run() refuses them as "not fresh".
        return context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )

    def _run(self, name: str, frame: "pd.DataFrame", index_column: str) -> list["_Outcome"]:
        result = self.definitions[name].run(
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


def _row_expectations(gxe: Any, expected_rows: int, *, has_email: bool) -> list[Any]:
    """The expectations each batch is held to; row conservation across batches is the
    :class:`_RowLedger`'s."""

    def tag(check: str, part: str) -> dict[str, str]:
        return {"check": check, "part": part}

    one_output = "rows_in_exactly_one_output"
    status = "status_allowed"
    score = "score_in_range"
    email = "email_present"
    expectations = [
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


def _combine(total: _Outcome | None, batch: _Outcome) -> _Outcome:
    """One expectation's results over the batches so far: counts added, first samples kept."""
    if total is None:
        return batch
    old, new = total.result, batch.result
    tallies: dict[str, dict[str, Any]] = {}
    for item in (
        *old.get("partial_unexpected_counts", ()),
        *new.get("partial_unexpected_counts", ()),
    ):
        key = repr(item.get("value"))
        if key in tallies:
            tallies[key] = {**tallies[key], "count": tallies[key]["count"] + item["count"]}
        else:
            tallies[key] = dict(item)
    ranked = sorted(tallies.values(), key=lambda item: -item["count"])  # stable: first seen first
    result = {
        **new,
        "unexpected_count": _unexpected(total) + _unexpected(batch),
        "partial_unexpected_list": [
            *old.get("partial_unexpected_list", ()),
            *new.get("partial_unexpected_list", ()),
        ][:SAMPLE],
        "partial_unexpected_index_list": [
            *old.get("partial_unexpected_index_list", ()),
            *new.get("partial_unexpected_index_list", ()),
        ][:SAMPLE],
        "partial_unexpected_counts": ranked[:SAMPLE],
    }
    return _Outcome(
        check=total.check,
        part=total.part,
        expectation=total.expectation,
        success=total.success and batch.success,
        result=result,
        error=total.error or batch.error,
    )


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


# --- the warm worker --------------------------------------------------------------------------


#: ``process`` (the default) or ``thread``: where :func:`warm_up` imports GX when the caller does
#: not say (docs/pipeline.md, "Quality checks"). ``thread`` suits many short runs in one process
#: (a notebook, a test suite): GX is imported once, not once per run.
WORKER_VARIABLE = "LISTHYGIENE_QUALITY_WORKER"


def default_worker_kind() -> str:
    """``process`` or ``thread``, from :data:`WORKER_VARIABLE`; a wrong value is a config error."""
    kind = os.environ.get(WORKER_VARIABLE, "process").strip().lower() or "process"
    if kind not in ("process", "thread"):
        from listhygiene.errors import ConfigurationError

        raise ConfigurationError(f"{WORKER_VARIABLE}={kind!r}: expected 'process' or 'thread'")
    return kind


def warm_up(*, process: bool = True) -> "QualityWorker":
    """Start importing GX now, in the background, and return the worker that runs the checks.

    Call it when a run starts; pass the worker to :func:`check_outputs` and close it when the
    run ends (or use it as a context manager). With ``process`` (the default) GX is imported in
    a child process, which takes the other core's time, not the run's: a thread importing GX
    holds the GIL for seconds. The child costs more memory, though (its own pandas and pyarrow:
    ~270 MiB with GX against ~140 MiB for GX in this process); ``process=False`` imports in a
    thread and checks here. docs/pipeline.md ("Quality checks") has the figures.
    """
    return QualityWorker(process=process)


class QualityWorker:
    """Where GX is imported ahead of the checks: a child Python process that runs
    :func:`check_outputs` for the parent, one call at a time (if it dies, the checks run in the
    parent instead), or a thread of this process (``process=False``)."""

    def __init__(self, *, process: bool = True) -> None:
        #: GX's import time, once the import has finished (:meth:`wait_ready`).
        self.import_seconds: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        if gx_missing() is not None:  # nothing to import: check_outputs says the checks skipped
            return
        if process:
            code = "from listhygiene.pipeline.quality import _serve; _serve()"
            self._process = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        else:
            self._thread = threading.Thread(
                target=self._import_here, name="listhygiene-gx-import", daemon=True
            )
            self._thread.start()

    def _import_here(self) -> None:
        started = time.perf_counter()
        _import_gx()
        self.import_seconds = time.perf_counter() - started

    def wait_ready(self) -> bool:
        """Wait until GX is imported; False when the child is gone (the checks then run here)."""
        if self._thread is not None:
            self._thread.join()
            return True
        process = self._process
        if self.import_seconds is not None:
            return process is not None
        if process is None or process.stdout is None:
            return False
        try:
            answer, value = pickle.load(process.stdout)
        except (OSError, EOFError, pickle.PickleError) as exc:
            log.warning("the quality checks' process failed (%s); checking here instead", exc)
            self.close()
            return False
        self.import_seconds = float(value)
        return bool(answer == "ready")

    def check_outputs(self, files: Mapping[str, str], **options: Any) -> QualityReport:
        """:func:`check_outputs` where GX was imported; raises what it raises."""
        ready = self.wait_ready()
        process = self._process
        if ready and process is not None and process.stdin and process.stdout:
            try:
                pickle.dump((dict(files), options), process.stdin)
                process.stdin.flush()
                answer, value = pickle.load(process.stdout)
            except (OSError, EOFError, pickle.PickleError) as exc:
                log.warning("the quality checks' process failed (%s); checking here instead", exc)
                self.close()
            else:
                if answer == "error":
                    raise value
                return value  # type: ignore[no-any-return]
        return check_outputs(files, **options)

    def close(self) -> None:
        """Stop the child, even in the middle of GX's import."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> "QualityWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _serve(requests: BinaryIO | None = None, answers: BinaryIO | None = None) -> None:
    """The child's loop: import GX, then answer ``(files, options)`` requests until EOF."""
    if answers is None:
        # the answers use the real stdout; anything printed (by GX or a library) goes to stderr
        answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = requests or sys.stdin.buffer
    started = time.perf_counter()
    _import_gx()
    pickle.dump(("ready", time.perf_counter() - started), answers)
    answers.flush()
    while True:
        try:
            files, options = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", check_outputs(files, **options))
        except Exception as exc:  # the caller raises it; unpicklable ones as RuntimeError
            answer = ("error", exc)
            try:
                pickle.dumps(exc)
            except Exception:
                answer = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"))
        pickle.dump(answer, answers)
        answers.flush()


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
    return [dict(item) for item in items if isinstance(item, Mapping)]


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


def _rows_check(outcomes: list[_Outcome], ledger: _RowLedger) -> CheckResult:
    """Row conservation: the ledger's exact counts across batches, GX's nulls and ranges."""
    expected, written = ledger.expected, ledger.written
    failures = []
    if written != expected:
        failures.append(f"{expected:,} rows expected, {written:,} written")
    shared = ledger.shared()
    if shared:
        repeats = [f"row {n} written {count} times" for n, count in ledger.sample.items()]
        failures.append(
            f"{_plural(shared, 'row shares', 'rows share')} a row number "
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

    failures += _failures(outcomes, {"not_null": not_null, "range": out_of_range})
    if failures:
        count, absent = ledger.missing()
        if count:
            numbers = [f"{n}" for n in absent]
            failures.append(
                f"row {numbers[0]} is missing"
                if count == 1
                else f"rows {_listing(numbers, count)} are missing"
            )
    return _verdict(
        "rows_in_exactly_one_output",
        failures,
        f"{expected:,} rows expected, {written:,} written, each input row exactly once",
    )


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

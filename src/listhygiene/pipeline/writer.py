"""The join and the outputs: every staged row with its address's result, appended batch by batch
to the Parquet file of its status (docs/pipeline.md, "Memory" and "Outputs").

The results come from :meth:`WorkTables.joined <listhygiene.pipeline.worktables.WorkTables.joined>`
in row order and in narrow batches; the staged parts give the input's own columns. Nothing here
holds more than one part of rows, so memory does not grow with the row count. What the summary
and the checks need is tallied on the way (:class:`Written`).
"""

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listhygiene.engine.suggest import Suggester
from listhygiene.errors import PipelineError
from listhygiene.pipeline.advice import Advice
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.verdict_memory import CHANGED
from listhygiene.pipeline.workdir import ADDRESS, ROW, WorkDir
from listhygiene.pipeline.worktables import WorkTables
from listhygiene.results import FORM_A_FIELDS, VerificationResult, arrow_schema
from listhygiene.statuses import Facts

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["JOIN_BATCH", "Written", "result_names", "write_outputs"]

#: Rows of one batch of the join (docs/pipeline.md, "Memory").
JOIN_BATCH = 65_536


@dataclass
class Written:
    """What the writer wrote: the outputs' schema and the tallies the summary and checks use."""

    #: The per-status files' schema (the input's columns, then the result columns).
    schema: "pa.Schema | None" = None
    #: Each status's file of input row numbers (``_row``), in the order its rows were written,
    #: in the work folder: the data-quality checks read them beside the outputs.
    row_numbers: dict[str, str] = field(default_factory=dict)
    by_status: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str | None] = field(default_factory=Counter)
    #: Rows per (domain, status).
    domains: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: One credit per distinct address verified (unknown free), whatever its row count.
    credits: int = 0
    #: Rows without an address.
    blank: int = 0
    #: Suggestions and providers, counted whether or not their columns are written.
    advice: Advice = field(default_factory=Advice)
    #: Rows in ``changed.parquet``, and the addresses whose status changed, by transition.
    changed_rows: int = 0
    transitions: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        """Addresses whose status changed since their stored verdict."""
        return sum(self.transitions.values())


def write_outputs(
    folder: OutputFolder,
    work: WorkDir,
    tables: WorkTables,
    *,
    previous: Any = None,
    changed_file: bool = False,
    extra_columns: tuple[str, ...] = (),
) -> Written:
    """Write every status's file (and ``changed.parquet`` with ``changed_file``) into the
    folder's staging area. ``previous``: the verdict memory's folder of stored statuses;
    ``extra_columns``: of ``suggestion``, ``mx_provider``, written after the result columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unanswered, example = tables.unanswered()
    if unanswered:
        raise PipelineError(
            f"the backend returned no result for {unanswered} addresses (e.g. "
            f"{example!r}); run again with the same --out to resume"
        )
    import pyarrow.parquet as pq

    written = Written(credits=tables.credits())
    written.advice = Advice(Suggester(tables.common_domains()))
    joined = tables.joined(previous, JOIN_BATCH)
    stream = _Rebatcher(joined.batches)
    blank = _blank_result()
    writers: dict[str, Any] = {}
    numbers: dict[str, pq.ParquetWriter] = {}
    numbers_schema = pa.schema([pa.field(ROW, pa.int64())])
    for status in STATUSES:
        path = work.path / f"rows-{status}.parquet"
        written.row_numbers[status] = str(path)
        numbers[status] = pq.ParquetWriter(path, numbers_schema, compression="zstd")
    for part in work.rows():
        if not part.num_rows:
            continue
        part = part.combine_chunks()
        found = stream.take(len(part))
        if not pc.all(pc.equal(found.column(ROW), part.column(ROW))).as_py():
            raise PipelineError("the joined results are out of step with the rows")
        addresses = _flat(part.column(ADDRESS))
        empty = _flat(pc.is_null(addresses))
        profile = joined.profiles.take(_flat(found.column("profile")))
        columns = {
            name: _flat(pc.if_else(empty, blank[name], _flat(profile.column(name))))
            for name in profile.column_names
        }
        email = pc.coalesce(_flat(found.column("email")), addresses)
        columns["email"] = _flat(pc.if_else(empty, blank["email"], email))
        columns["response_time"] = _flat(
            pc.if_else(empty, blank["response_time"], _flat(found.column("response_time")))
        )
        advice = written.advice.columns(columns["email"], columns["domain"], columns["mx_provider"])
        extra = {name: advice[name] for name in extra_columns}
        rows = _join(part.drop_columns([ROW, ADDRESS]), {**columns, **extra}, extra_columns)
        if written.schema is None:
            written.schema = rows.schema
            for status in STATUSES:
                writers[status] = folder.writer(f"{status}.parquet", rows.schema)
        rows = rows.cast(written.schema)
        status = columns["status"]
        for name in STATUSES:
            mask = pc.equal(status, name)
            count = pc.sum(mask).as_py() or 0
            if count:
                writers[name].write_table(rows.filter(mask))
                row = _flat(pc.filter(part.column(ROW), mask))
                numbers[name].write_table(pa.table([row], schema=numbers_schema))
                written.by_status[name] += count
        if changed_file:
            written.changed_rows += _write_changed(folder, writers, rows, found, written.schema)
        written.blank += pc.sum(empty).as_py() or 0
        written.reasons.update(_value_counts(columns["reason"]))
        written.domains.update(_pair_counts(columns["domain"], status))
    stream.finish()
    if not writers:  # no rows at all: empty files with the input's columns
        result_schema = arrow_schema(internal=True)
        written.schema = _join(
            _empty_inputs(work),
            {n: pa.array([], result_schema.field(n).type) for n in FORM_A_FIELDS + extra_columns},
            extra_columns,
        ).schema
        for status in STATUSES:
            writers[status] = folder.writer(f"{status}.parquet", written.schema)
    if changed_file:
        if CHANGED not in writers:
            writers[CHANGED] = folder.writer(CHANGED, _changed_schema(written.schema))
        written.transitions = tables.transitions()
    for writer in [*writers.values(), *numbers.values()]:
        writer.close()
    return written


def result_names(schema: "pa.Schema") -> dict[str, str]:
    """Each result column's name in the outputs (``result_<name>`` where the input has one)."""
    names = schema.names
    return {n: (f"result_{n}" if f"result_{n}" in names else n) for n in FORM_A_FIELDS}


def _write_changed(
    folder: OutputFolder,
    writers: dict[str, Any],
    joined: "pa.Table",
    found: "pa.Table",
    schema: "pa.Schema",
) -> int:
    """The rows of ``joined`` whose address changed status, with its previous status and when
    it was found; how many."""
    import pyarrow as pa
    import pyarrow.compute as pc

    before = _flat(found.column("previous_status"))
    mask = pc.is_valid(before)
    if not pc.any(mask).as_py():
        return 0
    rows = joined.filter(mask)
    seconds = pc.filter(_flat(found.column("previous_checked_at")), mask)
    when = pc.cast(
        pc.round(pc.multiply(seconds, 1_000_000)).cast(pa.int64()),
        pa.timestamp("us", tz="UTC"),
    )
    rows = rows.append_column("previous_status", pc.filter(before, mask))
    rows = rows.append_column("previous_checked_at", when)
    if CHANGED not in writers:
        writers[CHANGED] = folder.writer(CHANGED, _changed_schema(schema))
    writers[CHANGED].write_table(rows.cast(_changed_schema(schema)))
    return int(rows.num_rows)


class _Rebatcher:
    """The rows of a stream of record batches, taken so many at a time: the join's batches
    need not line up with the staged parts."""

    def __init__(self, batches: "Iterator[pa.RecordBatch]") -> None:
        self._batches = batches
        self._held: list[pa.RecordBatch] = []
        self._count = 0

    def take(self, rows: int) -> "pa.Table":
        import pyarrow as pa

        while self._count < rows:
            batch = next(self._batches, None)
            if batch is None:
                raise PipelineError("the joined results ended before the rows")
            if len(batch):
                self._held.append(batch)
                self._count += len(batch)
        table = pa.Table.from_batches(self._held).combine_chunks()
        rest = table.slice(rows)
        self._held = rest.to_batches() if rest.num_rows else []
        self._count = rest.num_rows
        return table.slice(0, rows)

    def finish(self) -> None:
        """Read the stream to its end (its connection serves the next query only then); no
        row may be left."""
        left = self._count + sum(len(batch) for batch in self._batches)
        if left:
            raise PipelineError(f"the joined results have {left} rows more than the input")


def _changed_schema(rows: "pa.Schema") -> "pa.Schema":
    """``changed.parquet``: the rows' columns, then the previous status and when it was found."""
    import pyarrow as pa

    return rows.append(pa.field("previous_status", pa.string())).append(
        pa.field("previous_checked_at", pa.timestamp("us", tz="UTC"))
    )


def _flat(values: "pa.Array | pa.ChunkedArray") -> "pa.Array":
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def _blank_result() -> dict[str, Any]:
    """The result columns of a row whose email cell is empty: invalid, not verified, free."""
    import pyarrow as pa

    row = VerificationResult.from_facts("", Facts(syntax_valid=False)).to_row(internal=True)
    row["credits_used"] = 0
    schema = arrow_schema(internal=True)
    names = (*FORM_A_FIELDS, "mx_provider")
    return {name: pa.scalar(row[name], schema.field(name).type) for name in names}


def _join(
    inputs: "pa.Table", results: Mapping[str, "pa.Array"], extra: tuple[str, ...] = ()
) -> "pa.Table":
    """The input's columns, then the result columns (renamed ``result_<name>`` on a clash),
    then the ``extra`` ones asked for."""
    table = inputs
    taken = set(inputs.column_names)
    for name in FORM_A_FIELDS + extra:
        label = f"result_{name}" if name in taken else name
        table = table.append_column(label, results[name])
    return table


def _empty_inputs(work: WorkDir) -> "pa.Table":
    import pyarrow.parquet as pq

    parts = sorted((work.path / "rows").glob("part-*.parquet"))
    if parts:
        return pq.read_table(parts[0]).drop_columns([ROW, ADDRESS]).slice(0, 0)
    import pyarrow as pa

    return pa.table({})


def _value_counts(values: "pa.Array") -> dict[str, int]:
    import pyarrow.compute as pc

    counts = pc.value_counts(values)
    return {v["values"]: v["counts"] for v in counts.to_pylist() if v["values"] is not None}


def _pair_counts(left: "pa.Array", right: "pa.Array") -> dict[tuple[str, str], int]:
    import pyarrow as pa

    table = pa.table({"a": left, "b": right}).group_by(["a", "b"]).aggregate([([], "count_all")])
    return {
        (a, b): n
        for a, b, n in zip(
            table.column("a").to_pylist(),
            table.column("b").to_pylist(),
            table.column("count_all").to_pylist(),
            strict=True,
        )
    }

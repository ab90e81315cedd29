"""The join and the outputs: every staged row with its address's result, appended batch by batch
to the Parquet file of its status (docs/pipeline.md, "Memory" and "Outputs").

The results come from :meth:`WorkTables.joined <listhygiene.pipeline.worktables.WorkTables.joined>`
in row order and in narrow batches; the staged parts give the input's own columns, or the input
itself when it can be read again (a local Parquet file, an in-memory table). Nothing here holds
more than one part of rows, so memory does not grow with the row count. Each part is put in
status order with one ``take`` and each status's rows appended as a slice; what the summary
needs is counted per profile (a profile is one status, reason and domain), not per row
(docs/pipeline.md, "Speed").
"""

from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from listhygiene.engine.suggest import Suggester
from listhygiene.errors import PipelineError
from listhygiene.pipeline.advice import Advice
from listhygiene.pipeline.layout import CHANGED, STATUSES
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.workdir import ADDRESS, ROW, WorkDir
from listhygiene.pipeline.worktables import WorkTables
from listhygiene.results import FORM_A_FIELDS, VerificationResult, arrow_schema
from listhygiene.statuses import Facts

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.pipeline.sources import Source

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
    source: "Source | None" = None,
) -> Written:
    """Write every status's file (and ``changed.parquet`` with ``changed_file``) into the
    folder's staging area. ``previous``: the verdict memory's folder of stored statuses;
    ``extra_columns``: of ``suggestion``, ``mx_provider``, written after the result columns;
    ``source``: the input, read again for its columns when the work folder did not stage them
    (``WorkDir.inputs_staged``)."""
    import pyarrow as pa

    if not work.inputs_staged and source is None:
        raise PipelineError("the input's columns were not staged and the input is not given")
    written = Written()
    written.advice = Advice(Suggester(tables.common_domains()))
    joined = tables.joined(previous, JOIN_BATCH)
    written.credits = joined.credits
    stream = _Rebatcher(joined.batches)
    inputs = None if work.inputs_staged or source is None else _Rebatcher(source.batches())
    files = _StatusFiles(folder, work, tables, joined.profiles, written, extra_columns)
    try:
        for part in work.rows(None if inputs is None else [ROW, ADDRESS]):
            if part.num_rows:
                found = stream.take(part.num_rows)
                own = inputs.take(part.num_rows) if inputs is not None else None
                files.write(part, found, own, changed_file=changed_file)
                # Arrow's allocator keeps what a part freed unless told (docs/pipeline.md)
                pa.default_memory_pool().release_unused()
        files.wait()
        stream.finish()
        if inputs is not None:
            inputs.finish()
        files.tally()
        if written.schema is None:  # no rows at all: empty files with the input's columns
            result_schema = arrow_schema(internal=True)
            empty_inputs = (
                source.schema.empty_table()
                if not work.inputs_staged and source is not None
                else _empty_inputs(work)
            )
            written.schema = _join(
                empty_inputs,
                {
                    n: pa.array([], result_schema.field(n).type)
                    for n in FORM_A_FIELDS + extra_columns
                },
                extra_columns,
            ).schema
        if changed_file:
            if CHANGED not in files.writers:
                files.writers[CHANGED] = folder.writer(CHANGED, _changed_schema(written.schema))
            written.transitions = tables.transitions()
    except BaseException:
        files.close(quiet=True)  # the run's error stands; its staging folder goes
        raise
    files.close()
    return written


class _StatusFiles:
    """The seven files and their row-number files, written a part at a time."""

    def __init__(
        self,
        folder: OutputFolder,
        work: WorkDir,
        tables: WorkTables,
        profiles: "pa.Table",
        written: Written,
        extra_columns: tuple[str, ...],
    ) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.folder, self.tables, self.written = folder, tables, written
        self.extra_columns = extra_columns
        # the blank result (a row without an address) is one more profile, the last
        self.profiles = _with_blank(profiles)
        self.blank = self.profiles.num_rows - 1
        # a status that is none of the seven (a broken backend's) has no file: the checks
        # find its rows missing
        self.codes = np.array(
            [
                STATUSES.index(s) if s in STATUSES else len(STATUSES)
                for s in self.profiles.column("status").to_pylist()
            ],
            dtype=np.int8,
        )
        self.per_profile = np.zeros(self.profiles.num_rows, dtype=np.int64)
        # A part is encoded in this thread while the next is read and put in status order
        # (pyarrow lets go of the GIL while it encodes): two parts at most are held
        # (docs/pipeline.md, "Speed").
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="listhygiene-writer")
        self._pending: Future[None] | None = None
        self.dictionary: list[str] | bool = True
        # a suggestion is a domain's: found once per profile (pipeline/advice.py)
        self.suggested = written.advice.suggested(_flat(self.profiles.column("domain")))
        # the profile columns a row takes: form A's, and ``mx_provider`` when it is written
        self.shared = [
            n for n in self.profiles.column_names if n in (*FORM_A_FIELDS, *extra_columns)
        ]
        self.writers: dict[str, Any] = {}
        self.numbers: dict[str, pq.ParquetWriter] = {}
        self.numbers_schema = pa.schema([pa.field(ROW, pa.int64())])
        for status in STATUSES:
            path = work.path / f"rows-{status}.parquet"
            written.row_numbers[status] = str(path)
            self.numbers[status] = pq.ParquetWriter(path, self.numbers_schema, compression="zstd")

    def write(
        self,
        part: "pa.Table",
        found: "pa.Table",
        own: "pa.Table | None",
        *,
        changed_file: bool,
    ) -> None:
        """One staged part (``own``: its input columns, when the part holds none), with its
        rows of the join."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        written = self.written
        row = _flat(part.column(ROW))
        if not row.equals(_flat(found.column(ROW))):
            raise _out_of_step(self.tables)
        addresses = _flat(part.column(ADDRESS))
        profile = _flat(found.column("profile"))
        if profile.null_count > addresses.null_count:  # an address without a result
            raise self.tables.unanswered_error()
        index = _flat(pc.fill_null(profile, self.blank)).to_numpy()
        self.per_profile += np.bincount(index, minlength=len(self.per_profile))
        written.blank += addresses.null_count
        status_of = self.codes[index]
        counts = np.bincount(status_of, minlength=len(STATUSES) + 1)
        inputs = part.drop_columns([ROW, ADDRESS]) if own is None else own
        if counts.max() < len(status_of):
            # the rows in status order (stable: row order within each status), taken once
            order = pa.array(np.argsort(status_of, kind="stable"))
            index = index[order.to_numpy()]
            row, addresses = row.take(order), addresses.take(order)
            found, inputs = found.take(order), inputs.take(order)
        columns = _result_columns(self.profiles.select(self.shared), index, found, addresses)
        if "evidence_at" in self.extra_columns:  # the address's own (verdicts/evidence.py)
            columns["evidence_at"] = _flat(found.column("evidence_at")).cast(
                pa.timestamp("us", tz="UTC")
            )
        if "suggestion" in self.extra_columns:
            columns["suggestion"] = written.advice.suggestion(
                columns["email"], self.suggested, index
            )
        rows = _join(inputs, columns, self.extra_columns)
        if written.schema is None:
            written.schema = rows.schema
            self.dictionary = _dictionary_columns(rows)
        rows = rows.cast(written.schema)
        changed = changed_file and "previous_status" in found.column_names
        self.wait()
        self._pending = self._pool.submit(
            self._emit, rows, row, counts[: len(STATUSES)].tolist(), found if changed else None
        )

    def _emit(
        self, rows: "pa.Table", row: "pa.Array", counts: list[int], found: "pa.Table | None"
    ) -> None:
        """Append a part's rows, in status order, to their files (in the writer's thread)."""
        import pyarrow as pa

        start = 0
        for code, count in enumerate(counts):
            if count:
                name = STATUSES[code]
                if name not in self.writers:  # a file is opened at its first rows
                    self.writers[name] = self.folder.writer(
                        f"{name}.parquet", rows.schema, use_dictionary=self.dictionary
                    )
                self.writers[name].write_table(rows.slice(start, count))
                numbers = pa.table([row.slice(start, count)], schema=self.numbers_schema)
                self.numbers[name].write_table(numbers)
                start += count
        if found is not None:
            self.written.changed_rows += _write_changed(
                self.folder, self.writers, rows, found, rows.schema, self.dictionary
            )

    def wait(self) -> None:
        """Until the part being written is written; raises what writing it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _empty_files(self) -> None:
        """The files of the statuses no row has: one written, the others its copies (the
        same schema makes the same bytes; a writer's set-up and footer cost ~0.1 s each at
        10,000 columns, docs/pipeline.md "Speed")."""
        schema = self.written.schema
        if schema is None:
            return
        empty = [s for s in STATUSES if s not in self.writers]
        if not empty:
            return
        first = f"{empty[0]}.parquet"
        self.folder.writer(first, schema, use_dictionary=self.dictionary).close()
        for status in empty[1:]:
            self.folder.copy(first, f"{status}.parquet")

    def tally(self) -> None:
        """The summary's counts from the rows written per profile: a profile is one status,
        one reason and one domain."""
        written = self.written
        statuses = self.profiles.column("status").to_pylist()
        reasons = self.profiles.column("reason").to_pylist()
        domains = self.profiles.column("domain").to_pylist()
        for position in self.per_profile.nonzero()[0].tolist():
            rows = int(self.per_profile[position])
            status, reason = statuses[position], reasons[position]
            if status in STATUSES:
                written.by_status[status] += rows
            if reason is not None:
                written.reasons[reason] += rows
            written.domains[(domains[position], status)] += rows
        written.advice.count(
            _flat(self.profiles.column("domain")),
            self.suggested,
            _flat(self.profiles.column("mx_provider")),
            self.per_profile.tolist(),
        )

    def close(self, *, quiet: bool = False) -> None:
        """Wait for the part being written, then close every file, whatever is raised (a
        second Ctrl-C included): what the wait raised goes on, the files' own errors after it
        are dropped."""
        failed = True
        try:
            self.wait()
            failed = False
            if not quiet:
                self._empty_files()
        except Exception:
            if not quiet:
                raise
        finally:
            self._pool.shutdown()
            for writer in [*self.writers.values(), *self.numbers.values()]:
                try:
                    writer.close()
                except Exception:
                    if not (quiet or failed):
                        raise


def _result_columns(
    profiles: "pa.Table", index: Any, found: "pa.Table", addresses: "pa.Array"
) -> dict[str, "pa.Array"]:
    """The result columns of a batch: the profile columns taken by each row's profile, the
    address's own email (else the row's address, else the blank result's), its response
    time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    shared = profiles.take(pa.array(index))
    columns = {name: _flat(shared.column(name)) for name in shared.column_names}
    blank_row = _blank_result()
    email = addresses
    if "email" in found.column_names:
        email = pc.coalesce(_flat(found.column("email")), email)
    columns["email"] = _flat(pc.fill_null(email, blank_row["email"]))
    columns["response_time"] = _flat(
        pc.fill_null(_flat(found.column("response_time")), blank_row["response_time"])
    )
    return columns


def _with_blank(profiles: "pa.Table") -> "pa.Table":
    """The profiles with the blank result's (the result of a row without an address) last."""
    import pyarrow as pa

    blank = _blank_result()
    row = pa.table(
        {
            name: pa.array([blank[name].as_py()], field.type)
            for name, field in zip(profiles.column_names, profiles.schema, strict=True)
        },
        schema=profiles.schema,
    )
    return pa.concat_tables([profiles, row]).combine_chunks()


def _out_of_step(tables: WorkTables) -> PipelineError:
    """The joined results do not line up with the rows: an address answered twice by a backend
    that also left one out, or a bug; said as the former when it is that."""
    unanswered, _ = tables.unanswered()
    if unanswered:
        return tables.unanswered_error()
    return PipelineError("the joined results are out of step with the rows")


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
    dictionary: list[str] | bool,
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
        writers[CHANGED] = folder.writer(
            CHANGED, _changed_schema(schema), use_dictionary=dictionary
        )
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


@lru_cache(maxsize=1)
def _blank_result() -> dict[str, Any]:
    """The result columns of a row whose email cell is empty: invalid, not verified, free."""
    import pyarrow as pa

    row = VerificationResult.from_facts("", Facts(syntax_valid=False)).to_row(internal=True)
    row["credits_used"] = 0
    schema = arrow_schema(internal=True)
    names = (*FORM_A_FIELDS, "mx_provider", "evidence", "complained", "unsubscribed")
    return {name: pa.scalar(row[name], schema.field(name).type) for name in names}


#: Rows a first part needs for its columns' dictionaries to be judged (:func:`_dictionary_columns`).
_DICTIONARY_JUDGED = 1_000


def _dictionary_columns(rows: "pa.Table") -> list[str] | bool:
    """The Parquet columns (leaf paths) worth a dictionary, judged on the first part: those
    with at most one distinct value in two rows, and every nested one (a profile's). A column
    of unique values (an id, an email) encodes faster and smaller without one; the values read
    back are the same either way (docs/pipeline.md, "Speed"). A first part of fewer than
    :data:`_DICTIONARY_JUDGED` rows says too little to judge by: Parquet's default (a dictionary
    for every column) is kept, and a wide table is spared a count per column."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if rows.num_rows < _DICTIONARY_JUDGED:
        return True
    sink = pa.BufferOutputStream()
    try:
        pq.write_table(rows.schema.empty_table(), sink)
    except pa.ArrowException:  # Parquet cannot store the columns: the writer says so
        return True
    leaves = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata.schema
    chosen: list[str] = []
    position = 0
    for column in rows.columns:
        if pa.types.is_nested(column.type) or pa.types.is_dictionary(column.type):
            few = True
        else:
            try:
                few = 2 * pc.count_distinct(column, mode="all").as_py() <= max(len(column), 1)
            except pa.ArrowNotImplementedError:  # a type it cannot count: Parquet's default
                few = True
        # a column's leaves follow each other, in the order of the columns
        paths = [leaves.column(position + i).path for i in range(_leaves(column.type))]
        position += len(paths)
        if few:
            chosen += paths
    return chosen


def _leaves(kind: "pa.DataType") -> int:
    """How many Parquet columns an Arrow type is stored as."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return _leaves(kind.value_type)
    return 1


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

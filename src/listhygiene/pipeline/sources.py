"""Address tables in: a file, a warehouse table or query, or a DataFrame, read as Arrow batches.

The pipeline verifies a million-row table on two cores in a minute, so every source is read in
chunks with vectorised readers (pyarrow's CSV, JSON and Parquet readers; server-side cursors for
SQL), and yields batches that all share one schema. And every record of the input becomes a row
(PRODUCT.md, "Pipeline rows"): a broken record is kept, repaired as well as a person would, and
reported in :attr:`SourceInfo.bad_records`, never silently dropped.

What :func:`open_source` accepts::

    kind        chosen by                    read with
    csv         .csv .tsv                    pyarrow.csv, chunked (see _delimited.py)
    txt         .txt                         one address per line, column ``email``
    xlsx        .xlsx .xlsm                  openpyxl (read-only), first sheet
    xls         .xls                         xlrd, first sheet
    parquet     .parquet .pq                 pyarrow.parquet, row group by row group
    jsonl       .jsonl .ndjson (.json)       pyarrow.json in line blocks
    (any file)  an fsspec URL (s3://...)     a local copy, as above (pipeline/storage.py)
    sql         a SQLAlchemy URL             a server-side cursor; ``table=`` or ``query=``
    dataframe   a pandas DataFrame, an Arrow table

Errors are :class:`SourceError` (a ``ValueError``) and name the input: the path, or the URL with
its password masked.

Only regular files are read: a path (after its symlinks) that is a FIFO, a device such as
``/dev/zero``, a socket or a directory is refused before it is opened, so nothing ever blocks on
it or reads it forever. And what one record may cost is bounded (docs/pipeline.md, "Reading"):
no line of a text file (CSV, TXT, JSON lines) longer than :data:`MAX_LINE_BYTES`, no JSON value
nested deeper than :data:`MAX_DEPTH` levels; beyond either the input is refused.

Column names are made unique and non-empty (``Email``, ``Email_2``, ``column_3``). Text formats
(CSV, TXT, XLSX, XLS) give string columns; the others keep their own types, except that a column
of type null becomes string, so that every batch has the same schema. JSONL and SQL types come
from the first rows (nested values as their JSON text); a later value that does not fit its
column is null, and its row a bad record. An input without rows gives one empty batch.
"""

import os
import queue
import re
import stat
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from listhygiene.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "BadRecord",
    "Source",
    "SourceError",
    "SourceInfo",
    "open_source",
]

#: Every kind of source, as reported in :attr:`SourceInfo.kind`.
KINDS = ("csv", "txt", "xlsx", "xls", "parquet", "jsonl", "sql", "dataframe")

_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "txt",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".xls": "xls",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",  # JSON lines only; checked when opened
}
#: The longest line a text input (CSV, TXT, JSON lines) may have, in bytes of UTF-8; also the
#: most a CSV record spanning lines may take before it is taken for an unterminated quote.
MAX_LINE_BYTES = 1 << 20
#: The deepest a JSON value may nest (arrays and objects, the line's own object counted).
MAX_DEPTH = 64
#: A bad record's text is kept up to this many characters.
_TEXT_LIMIT = 200
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class SourceError(InputError):
    """Bad input: the message names the input and says what is wrong and what to do."""


@dataclass
class BadRecord:
    """A broken input record, kept as a row."""

    #: 1-based data-row number (the header not counted) of the row that holds the record.
    row: int
    #: What is wrong: "expected 5 fields, found 7", "unterminated quote", "invalid JSON", ...
    problem: str
    #: The record as it was in the input, cut to 200 characters.
    text: str


@dataclass
class SourceInfo:
    """What was detected about an input."""

    kind: str
    #: The path, the URL with its password masked, or ``<DataFrame>``.
    name: str
    encoding: str | None = None
    delimiter: str | None = None
    #: Broken records kept as rows; filled while :meth:`Source.batches` runs.
    bad_records: list[BadRecord] = field(default_factory=list)


class Source(ABC):
    """An input table, read in batches that all have :attr:`schema`."""

    info: SourceInfo
    #: Whether :meth:`batches` gives the same rows again, in this run and in a resumed one (a
    #: local Parquet file, an in-memory table): the run then stages only the addresses and reads
    #: the input's columns again when it writes (docs/pipeline.md, "Speed").
    rereadable: bool = False

    @property
    @abstractmethod
    def schema(self) -> pa.Schema:
        """Every input column, in order."""

    @abstractmethod
    def sample(self, rows: int = 1000) -> pa.Table:
        """The first ``rows`` rows, for column detection; reading them does not disturb batches."""

    @abstractmethod
    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """The whole input, in order, in batches of about ``rows`` rows."""


def open_source(
    source: "str | os.PathLike[str] | pd.DataFrame | pa.Table",
    *,
    table: str | None = None,
    query: str | None = None,
    kind: str | None = None,
    encoding: str | None = None,
) -> Source:
    """Open an input: a file path, a SQLAlchemy URL (with ``table`` or ``query``), or a table.

    ``kind`` overrides the file extension; ``encoding`` applies to text files (a byte-order mark
    still decides). Nothing but the first part of the input is read here; problems found then
    (missing file, unreadable format, empty input, bad SQL) are :class:`SourceError`.
    """
    if kind is not None and kind not in KINDS:
        raise SourceError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    frame = _as_table(source)
    if frame is not None:
        from listhygiene.pipeline._tables import TableSource

        return TableSource(frame, name="<DataFrame>")
    if hasattr(source, "__arrow_c_stream__"):  # polars, DuckDB, ...: streamed, not via pandas
        from listhygiene.pipeline._tables import StreamSource

        return StreamSource(source, name=f"<{type(source).__name__}>")
    if not isinstance(source, (str, os.PathLike)):
        raise SourceError(
            f"cannot read a {type(source).__name__}: give a path, a database URL, "
            "a pandas DataFrame, a pyarrow Table or a table with the Arrow C stream interface"
        )
    text = os.fspath(source)
    if kind != "sql" and _URL.match(text) and not text.startswith("file://"):
        from listhygiene.pipeline.storage import is_filesystem_url, open_remote

        if is_filesystem_url(text):  # s3://, ...: docs/object-storage.md
            if table is not None or query is not None:
                raise SourceError(f"{text}: table= and query= apply to database URLs only")
            return open_remote(text, kind, encoding)
    if kind == "sql" or (kind is None and _URL.match(text) and not text.startswith("file://")):
        from listhygiene.pipeline._sql import SqlSource

        return SqlSource(text, table=table, query=query)
    path = Path(text.removeprefix("file://"))
    if table is not None or query is not None:
        raise SourceError(f"{path}: table= and query= apply to database URLs only")
    return _open_file(path, kind, encoding)


def _open_file(path: Path, kind: str | None, encoding: str | None) -> Source:
    try:
        return _open_file_of_kind(path, kind, encoding)
    except OSError as exc:  # unreadable: permissions, a vanished file, an I/O error
        raise SourceError(f"{path} cannot be read: {exc.strerror or exc}") from None


def _open_file_of_kind(path: Path, kind: str | None, encoding: str | None) -> Source:
    _check_regular(path)
    if kind is None:
        kind = _EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            known = " ".join(sorted(_EXTENSIONS))
            raise SourceError(
                f"{path}: unsupported file type {path.suffix or '(no extension)'!r} "
                f"(supported: {known}); pass the kind explicitly"
            )
    if kind in ("csv", "txt"):
        from listhygiene.pipeline._delimited import CsvSource, TxtSource

        return (CsvSource if kind == "csv" else TxtSource)(path, encoding=encoding)
    if kind in ("jsonl", "json"):
        from listhygiene.pipeline._jsonl import JsonlSource

        return JsonlSource(path, encoding=encoding, require_lines=kind == "json")
    if kind == "parquet":
        from listhygiene.pipeline._tables import ParquetSource

        return ParquetSource(path)
    if kind == "xlsx":
        from listhygiene.pipeline._excel import XlsxSource

        return XlsxSource(path)
    if kind == "xls":
        from listhygiene.pipeline._excel import XlsSource

        return XlsSource(path)
    raise SourceError(f"{path}: a file cannot be read as kind {kind!r}")


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(path: Path) -> None:
    """Refuse anything but a regular file, before opening it: opening a FIFO blocks until a
    writer comes, and a device like ``/dev/zero`` never ends."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: what would be read
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    if stat.S_ISREG(mode):
        return
    what = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file")
    if stat.S_ISDIR(mode):
        raise SourceError(f"{path} is a directory, not a file")
    raise SourceError(f"{path} is {what}, not a regular file; give a file")


class LineTooLong(Exception):
    """A text input's line is longer than :data:`MAX_LINE_BYTES` (at byte ``offset``); the
    readers turn it into a :class:`SourceError` naming the input."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def line_too_long(path: object, offset: int) -> SourceError:
    return SourceError(
        f"{path}: the line at byte offset {offset:,} is longer than {MAX_LINE_BYTES:,} bytes "
        "(the most one line may take); this does not look like an address table"
    )


def _as_table(source: object) -> pa.Table | None:
    """An Arrow table for an in-memory source; None for anything else."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    pandas = sys.modules.get("pandas")  # a DataFrame means pandas is imported already
    if pandas is not None and isinstance(source, pandas.DataFrame):
        from listhygiene.pipeline._tables import frame_to_table

        return frame_to_table(source)
    return None


# -- helpers shared by the readers ------------------------------------------------------------


def bad_record(row: int, problem: str, text: str) -> BadRecord:
    """A :class:`BadRecord` with its text cut to the kept length."""
    return BadRecord(row=row, problem=problem, text=text[:_TEXT_LIMIT])


def unique_names(raw: Sequence[object]) -> list[str]:
    """Header cells as column names: trimmed, non-empty (``column_3``), unique (``Email_2``)."""
    names: list[str] = []
    taken: set[str] = set()
    for position, value in enumerate(raw, start=1):
        name = "" if value is None else str(value).strip()
        name = name or f"column_{position}"
        if name in taken:
            suffix = 2
            while f"{name}_{suffix}" in taken:
                suffix += 1
            name = f"{name}_{suffix}"
        taken.add(name)
        names.append(name)
    return names


def string_schema(names: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(name, pa.string()) for name in names])


def settle_schema(schema: pa.Schema) -> pa.Schema:
    """Unique names, and string where a column's type is null."""
    names = unique_names(schema.names)
    return pa.schema(
        [
            pa.field(name, pa.string() if pa.types.is_null(f.type) else f.type)
            for name, f in zip(names, schema, strict=True)
        ]
    )


def conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.RecordBatch | pa.Table:
    """The same data under ``schema``: columns renamed positionally and cast where types differ."""
    columns = [
        column if column.type == target.type else column.cast(target.type)
        for column, target in zip(batch.columns, schema, strict=True)
    ]
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(columns, schema=schema)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def rebatched_ahead(
    pieces: Generator[pa.Table, None, None], rows: int, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """:func:`rebatch` over ``pieces`` read one ahead (:func:`read_ahead`); the reading thread
    stops when this generator does, not when a traceback lets go of it."""
    ahead = read_ahead(pieces)
    try:
        yield from rebatch(ahead, rows, schema)
    finally:
        ahead.close()


def read_ahead(pieces: Generator[pa.Table, None, None]) -> Generator[pa.Table, None, None]:
    """``pieces``, each read one ahead in a thread of its own: the next chunk is parsed (or
    fetched) while the caller cleans and stages this one (pyarrow's parser and ADBC let go of
    the GIL; docs/pipeline.md, "Speed"). What reading raises is raised here, in its place; a
    caller that stops early stops the thread, and the file (or connection) is closed before this
    generator is."""
    handoff: queue.Queue[tuple[pa.Table | None, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand(item: tuple[pa.Table | None, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            for piece in pieces:
                if not hand((piece, None)):
                    return
        except BaseException as exc:  # handed over, raised in the caller's thread
            hand((None, exc))
            return
        finally:
            pieces.close()
        hand((None, None))

    thread = threading.Thread(target=produce, name="listhygiene-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            piece, error = handoff.get()
            if error is not None:
                raise error
            if piece is None:
                return
            yield piece
    finally:
        stop.set()
        thread.join()


def rebatch(
    pieces: Iterable[pa.Table | pa.RecordBatch], rows: int, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Batches of exactly ``rows`` rows (the last one shorter) from pieces of any size.

    An input without rows gives one empty batch, so that a consumer still sees the schema.
    """
    if rows < 1:
        raise ValueError(f"rows must be at least 1, not {rows}")
    pending: list[pa.RecordBatch] = []
    count = 0
    yielded = False
    for piece in pieces:
        parts = piece.to_batches() if isinstance(piece, pa.Table) else [piece]
        for part in parts:
            if part.num_rows == 0:
                continue
            pending.append(part)
            count += part.num_rows
            while count >= rows:
                head, pending = _take(pending, rows, schema)
                count -= rows
                yielded = True
                yield head
    if count:
        yield _take(pending, count, schema)[0]
    elif not yielded:  # no rows at all: one empty batch still carries the schema
        yield empty_batch(schema)


def _take(
    pending: list[pa.RecordBatch], rows: int, schema: pa.Schema
) -> tuple[pa.RecordBatch, list[pa.RecordBatch]]:
    first = pending[0]
    if first.num_rows >= rows:  # the common case: a zero-copy slice
        rest = [first.slice(rows)] if first.num_rows > rows else []
        return first.slice(0, rows), rest + pending[1:]
    table = pa.Table.from_batches(pending, schema=schema)
    head = table.slice(0, rows).combine_chunks()
    rest = table.slice(rows).to_batches()
    return _single_batch(head, schema), [b for b in rest if b.num_rows]


def _single_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays(column.chunks) for column in table.columns], schema=schema
    )


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def as_text(value: object) -> str:
    """A Python value as the text a person would read in a cell."""
    import datetime as dt
    import json

    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0) and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def infer_type(values: Sequence[Any]) -> pa.DataType:
    """The Arrow type of sample values; string when they mix types, nest (JSON objects and
    arrays, kept as their JSON text) or pyarrow cannot tell."""
    if any(isinstance(v, (dict, list, tuple)) for v in values):
        return pa.string()
    try:
        inferred = pa.array(values).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return pa.string()
    return pa.string() if pa.types.is_null(inferred) else inferred


def values_to_array(values: Sequence[Any], type_: pa.DataType) -> tuple[pa.Array, list[int]]:
    """An array of ``type_``; values that do not fit become null and their indexes are returned.

    A string column takes anything, as text (see :func:`as_text`), so only typed columns can
    refuse a value: a warehouse or JSON column whose sample said int64 meeting "n/a" later.
    """
    try:
        return pa.array(values, type=type_), []
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return pa.array([None if v is None else as_text(v) for v in values], type=type_), []
    fitted: list[Any] = []
    refused: list[int] = []
    for index, value in enumerate(values):
        try:
            fitted.append(pa.scalar(value, type=type_))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            fitted.append(pa.scalar(None, type=type_))
            refused.append(index)
    return pa.array([s.as_py() for s in fitted], type=type_), refused

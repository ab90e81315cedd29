"""Batches of one schema: the schema and rebatching helpers every reader shares.

Every batch of a source has the same schema (docs/pipeline.md, "Reading"), whatever the
reader's natural unit (a CSV chunk, a row group, a cursor's fetch): these turn pieces into
batches of about the asked size, settle null-typed columns as strings, and read ahead in a
thread so that parsing overlaps the consumer's work.
"""

import queue
import threading
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from listhygiene.pipeline.sources.base import unique_names

__all__ = [
    "as_text",
    "conform",
    "empty_batch",
    "infer_type",
    "read_ahead",
    "rebatch",
    "rebatched_ahead",
    "settle_schema",
    "string_schema",
    "values_to_array",
]

T = TypeVar("T")


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


def read_ahead(pieces: Generator[T, None, None]) -> Generator[T, None, None]:
    """``pieces``, read ahead in a thread of its own: the next chunk is parsed (or fetched)
    while the caller cleans and stages this one (pyarrow's parser and ADBC let go of the GIL;
    docs/pipeline.md, "Speed"). Up to two pieces wait beside the caller's: one handed over, one
    read and waiting to be. What reading raises is raised here, in its place; a caller that
    stops early stops the thread, and the file (or connection) is closed before this generator
    is."""
    # a piece, what reading raised (wrapped: a piece may be anything), or the end
    handoff: queue.Queue[T | _Failed | _End] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand(item: "T | _Failed | _End") -> bool:
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
                if not hand(piece):
                    return
        except BaseException as exc:  # handed over, raised in the caller's thread
            hand(_Failed(exc))
            return
        finally:
            pieces.close()
        hand(_END)

    thread = threading.Thread(target=produce, name="listhygiene-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if isinstance(item, _End):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


class _Failed:
    """What reading raised, as :func:`read_ahead`'s thread hands it over."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _End:
    """What :func:`read_ahead`'s thread hands over when ``pieces`` are all read."""


_END = _End()


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

"""MySQL and MariaDB results read through PyMySQL, in bounded memory (``sources/sql.py``).

Every read is one unbuffered query (PyMySQL's ``SSCursor``: the server streams the rows and the
client holds one chunk at a time). PyMySQL turns each field of each row into a Python object in
Python, 12 s for a 1,000,000-row, 7-column table; the rows of a result are therefore read here
straight off PyMySQL's connection as the bytes of the text protocol, a few MiB at a time, split
into rows and fields with numpy and turned into Arrow arrays in bulk (:func:`arrow_pieces`, 2 s
for the same table; the packets are split in a thread of their own, the one loop over every row
in Python, while the block before becomes arrays). Each column is converted to the type the
sample settled on, as the cursor path converts it: a text column as its UTF-8 text, a number,
date or timestamp by Arrow's cast of its text; a column whose cast fails in a chunk (a zero
date, a value past the column's precision), or of any other type (``TIME``, ``BIT``, a number
read as text), through PyMySQL's own converter for each value and :func:`values_to_array`, so
that the values, the nulls and the bad records are the ones the cursor gives.
:func:`cursor_pieces` is the cursor itself, used when PyMySQL's connection does not look as this
module expects.

A query stopped before its end (the sample's first rows, a consumer that stops early) closes its
connection instead of reading the rest: MySQL has no way to cancel a result on the connection
that streams it, and PyMySQL would read every remaining row to find its end.
"""

import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from listhygiene.pipeline.sources.base import BadRecord, bad_record
from listhygiene.pipeline.sources.batches import read_ahead, values_to_array

log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "arrow_pieces",
    "connect_arguments",
    "cursor_pieces",
    "declared_type",
    "first_rows",
    "select_table",
]

#: SQLAlchemy backend names read and written through PyMySQL.
BACKENDS = ("mysql", "mariadb")

#: Bytes of the text protocol parsed at once (a piece of a few tens of thousands of rows).
CHUNK_BYTES = 4 << 20
#: Bytes asked of the socket at a time.
_READ_BYTES = 1 << 18

_MAX_PACKET = 0xFFFFFF
_NULL = 0xFB
_EOF = 0xFE
_ERROR = 0xFF
_BINARY_CHARSET = 63
_UNSIGNED = 32  # a column definition's UNSIGNED flag
_INLINE = 12  # Arrow's binary views hold up to 12 bytes in the view itself
_PAD = 16
#: Row n keeps the first n of 12 bytes (a short value's view is zero past its end).
_KEEP = np.array([[255] * n + [0] * (_INLINE - n) for n in range(_INLINE + 1)], dtype=np.uint8)

# PyMySQL's FIELD_TYPE codes
_DECIMALS = {0, 246}
_INTEGERS = {1, 2, 3, 8, 9, 13}  # TINY, SHORT, LONG, LONGLONG, INT24, YEAR
_FLOATS = {4, 5}
_DATES = {10, 14}
_DATETIMES = {7, 12}  # TIMESTAMP, DATETIME
_JSON = 245
_TEXTS = {15, 247, 248, 249, 250, 251, 252, 253, 254}  # VARCHAR, ENUM, SET, BLOBs, strings


def connect_arguments(url: Any, dialect: Any, extra: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """PyMySQL's ``connect`` arguments for a SQLAlchemy URL (as SQLAlchemy's dialect gives
    them), with ``extra`` on top."""
    args, params = dialect.create_connect_args(url)
    return args, {**params, **extra}


def select_table(table: str) -> str:
    """``SELECT *`` of a table name (``name`` or ``database.name``) quoted as MySQL quotes it."""
    return "SELECT * FROM " + ".".join(
        "`" + part.replace("`", "``") + "`" for part in table.split(".")
    )


def open_connection(args: Sequence[Any], params: dict[str, Any]) -> Any:
    import pymysql

    return pymysql.connect(*args, **params)


def abandon(connection: Any, cursor: Any) -> None:
    """Close a connection whose result may still be streaming, without reading the rest."""
    result = getattr(cursor, "_result", None)
    if result is not None:  # PyMySQL would otherwise drain it when the result is collected
        result.unbuffered_active = False
    connection._result = None
    try:
        connection.close()
    except Exception:  # already closed, or the server went away: nothing left to release
        connection._force_close()


def _query(connection: Any, sql: str) -> Any:
    """An unbuffered cursor over ``sql`` (run as written: no parameters, so ``%`` is ``%``)."""
    import pymysql.cursors

    cursor = connection.cursor(pymysql.cursors.SSCursor)
    cursor.execute(sql)
    return cursor


def first_rows(
    args: Sequence[Any], params: dict[str, Any], sql: str, rows: int
) -> tuple[list[str] | None, list[tuple[Any, ...]], list[pa.DataType | None]]:
    """The column names (None when the statement returns no rows), the first ``rows`` rows, and
    the Arrow type each column declares where that is more exact than its values (see
    :func:`declared_type`)."""
    connection = open_connection(args, params)
    cursor = None
    try:
        cursor = _query(connection, sql)
        if cursor.description is None:
            return None, [], []
        names = [str(d[0]) for d in cursor.description]
        declared = [declared_type(field) for field in cursor._result.fields]
        return names, [tuple(row) for row in cursor.fetchmany(rows)], declared
    finally:
        abandon(connection, cursor)


def declared_type(field: Any) -> pa.DataType | None:
    """A ``DECIMAL(p, s)`` column's ``decimal128(p, s)`` (``decimal256`` past 38 digits): the
    sample's values would give the precision of the largest of them, and refuse a later, larger
    value. None for every other column (its type is the sample's)."""
    if field.type_code not in _DECIMALS:
        return None
    scale = int(field.scale)
    signed = not field.flags & _UNSIGNED
    precision = int(field.length) - (1 if scale else 0) - (1 if signed else 0)
    if not 0 < precision <= 76 or not 0 <= scale <= precision:
        return None
    return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)


def cursor_pieces(
    args: Sequence[Any],
    params: dict[str, Any],
    sql: str,
    rows: int,
    to_table: Callable[[list[tuple[Any, ...]], int], pa.Table],
) -> Generator[pa.Table, None, None]:
    """The rows through PyMySQL's ``SSCursor``, ``rows`` at a time, as tables."""
    connection = open_connection(args, params)
    cursor = None
    emitted = 0
    try:
        cursor = _query(connection, sql)
        while part := cursor.fetchmany(rows):
            table = to_table(list(part), emitted)
            emitted += table.num_rows
            yield table
    finally:
        abandon(connection, cursor)


def wire_readable(connection: Any) -> bool:
    """Whether PyMySQL's connection has the parts :func:`arrow_pieces` reads."""
    return all(hasattr(connection, name) for name in ("_rfile", "_result", "encoding"))


def arrow_pieces(
    args: Sequence[Any],
    params: dict[str, Any],
    sql: str,
    schema: pa.Schema,
    rows: int,
    bad: list[BadRecord],
) -> Iterator[pa.Table] | None:
    """The rows of ``sql`` as tables of ``schema``, parsed from the text protocol; None when
    PyMySQL's connection is not one this module knows (the caller reads through the cursor)."""
    connection = open_connection(args, params)
    if not wire_readable(connection):
        connection.close()
        return None
    cursor = None
    try:
        cursor = _query(connection, sql)
        result = cursor._result
        fields = list(result.fields)
        if len(fields) != len(schema):
            abandon(connection, cursor)
            return None
    except BaseException:
        abandon(connection, cursor)
        raise
    columns = [
        _Column(f, t, connection.encoding) for f, t in zip(fields, schema.types, strict=True)
    ]
    return _pieces(connection, cursor, columns, schema, rows, bad)


class _Column:
    """How one result column's text becomes values of its Arrow type."""

    def __init__(self, field: Any, wanted: pa.DataType, encoding: str) -> None:
        from pymysql import converters

        code = field.type_code
        binary = field.charsetnr == _BINARY_CHARSET and code != _JSON
        self.wanted = wanted
        self.encoding: str | None
        if code in _TEXTS or code == _JSON:
            self.encoding = None if binary else encoding
        else:
            self.encoding = "ascii"
        converter = converters.decoders.get(code)
        self.converter = None if converter is converters.through else converter
        self.cast: pa.DataType | None = None  # the type whose cast of the text is exact
        if (code in _TEXTS or code == _JSON) and not binary:
            utf8 = encoding.lower().replace("-", "") in ("utf8", "utf8mb4")
            if utf8 and (pa.types.is_string(wanted) or pa.types.is_large_string(wanted)):
                self.cast = wanted  # else (?charset=latin1) decoded value by value
        elif code in _TEXTS and binary:
            if pa.types.is_binary(wanted) or pa.types.is_large_binary(wanted):
                self.cast = wanted
        elif (
            (code in _INTEGERS and pa.types.is_integer(wanted))
            or (code in _FLOATS and pa.types.is_floating(wanted))
            or (code in _DECIMALS and pa.types.is_decimal(wanted))
            or (code in _DATES and pa.types.is_date32(wanted))
            or (
                code in _DATETIMES
                and pa.types.is_timestamp(wanted)
                and wanted.tz is None
                and wanted.unit == "us"
            )
        ):
            self.cast = wanted

    def value(self, raw: bytes | None) -> Any:
        """The value PyMySQL's cursor gives for one field's bytes."""
        if raw is None:
            return None
        data: Any = raw if self.encoding is None else raw.decode(self.encoding)
        return data if self.converter is None else self.converter(data)


def _pieces(
    connection: Any,
    cursor: Any,
    columns: list["_Column"],
    schema: pa.Schema,
    rows: int,
    bad: list[BadRecord],
) -> Generator[pa.Table, None, None]:
    emitted = 0
    # the packets are split in a thread of their own (a loop in Python, holding the GIL) while
    # this one turns the block before into arrays (numpy and Arrow, which let go of it)
    blocks = read_ahead(_row_blocks(connection, cursor, max(rows, 1)))
    try:
        for block, starts in blocks:
            table, refused = _table(block, starts, columns, schema)
            for index in sorted(refused):
                fields = _fields(block, np.array([starts[index]]), len(columns))
                values = tuple(c.value(f[0]) for c, f in zip(columns, fields, strict=True))
                bad.append(bad_record(emitted + index + 1, "; ".join(refused[index]), repr(values)))
            emitted += table.num_rows
            yield table
    finally:
        blocks.close()
        abandon(connection, cursor)


def _row_blocks(
    connection: Any, cursor: Any, rows: int
) -> Generator[tuple[bytes, np.ndarray], None, None]:
    """Buffers of whole row packets (about :data:`CHUNK_BYTES`, at most ``rows`` rows) and the
    offsets of the rows' payloads in them, until the result's end."""
    source = connection._rfile
    buffer = bytearray()
    position = 0
    starts: list[int] = []
    long_rows: dict[int, list[tuple[int, int]]] = {}
    while True:
        known = len(starts)
        scanned = _scan(buffer, position, starts)
        special = _special(buffer, starts, known)
        done = False
        if special is None:
            position = scanned
        else:  # the result's end, an error, or a long row: packet by packet from there
            position = starts[special] - 4
            del starts[special:]
            position, done, error = _split(buffer, position, starts, long_rows)
            if error is not None:
                from pymysql.protocol import MysqlPacket

                cursor._result.unbuffered_active = False
                packet = MysqlPacket(bytes(buffer[error[0] : error[1]]), connection.encoding)
                packet.raise_for_error()
        if len(starts) > rows:  # the rest waits for the next piece
            cut = starts[rows] if starts[rows] >= 0 else long_rows[rows][0][0]
            position = cut - 4
            del starts[rows:]
            long_rows = {i: parts for i, parts in long_rows.items() if i < rows}
            done = False
        if done or position >= CHUNK_BYTES or len(starts) >= rows:
            block = bytes(buffer[:position])
            del buffer[:position]
            if long_rows:
                block, starts = _joined(block, starts, long_rows)
            if starts:
                yield block, np.asarray(starts, dtype=np.int64)
            if done:
                cursor._result.unbuffered_active = False
                return
            position = 0
            starts = []
            long_rows = {}
            continue  # the buffer may hold more whole rows
        data = source.read1(_READ_BYTES)
        if not data:
            from pymysql import err

            connection._force_close()
            raise err.OperationalError(2013, "Lost connection to server during query")
        buffer += data


def _scan(buffer: bytearray, position: int, starts: list[int]) -> int:
    """Add the payload offsets of the whole packets of ``buffer`` from ``position`` to
    ``starts``, taking each for a row (:func:`_special` checks), up to :data:`CHUNK_BYTES`;
    return where the next packet starts. The one loop over every row in Python: kept to the
    bone."""
    append = starts.append
    size = len(buffer)
    last = min(size - 4, CHUNK_BYTES - 1)  # where the last packet of a piece may start
    while position <= last:
        length = buffer[position] | (buffer[position + 1] << 8) | (buffer[position + 2] << 16)
        end = position + 4 + length
        if end > size:
            break
        append(position + 4)
        position = end
    return position


def _special(buffer: bytearray, starts: list[int], known: int) -> int | None:
    """The index of the first packet from ``starts[known]`` on that is not a one-packet row:
    the result's end (EOF), an error, or the first packet of a row of 16 MiB or more."""
    if len(starts) == known:
        return None
    found = np.asarray(starts[known:], dtype=np.int64)
    view = np.frombuffer(buffer, dtype=np.uint8)
    length = (
        view[found - 4].astype(np.int64)
        | (view[found - 3].astype(np.int64) << 8)
        | (view[found - 2].astype(np.int64) << 16)
    )
    first = np.where(length > 0, view[np.minimum(found, len(view) - 1)], 0)
    odd = ((first == _EOF) & (length < 9)) | (first == _ERROR) | (length == _MAX_PACKET)
    hits = np.flatnonzero(odd)
    return None if not len(hits) else known + int(hits[0])


def _split(
    buffer: bytearray,
    position: int,
    starts: list[int],
    long_rows: dict[int, list[tuple[int, int]]],
) -> tuple[int, bool, tuple[int, int] | None]:
    """Add the payload offsets of the complete row packets of ``buffer`` from ``position`` to
    ``starts``, packet by packet; return where the first incomplete packet starts, whether the
    result ended there, and the bounds of the error packet that ended it, if one did.

    A row of 16 MiB or more spans packets: its offset is -1 and ``long_rows`` has the (start,
    end) of each of its packets' payloads."""
    append = starts.append
    size = len(buffer)
    while position + 4 <= size:
        length = buffer[position] | (buffer[position + 1] << 8) | (buffer[position + 2] << 16)
        end = position + 4 + length
        if end > size:
            break
        first = buffer[position + 4] if length else -1
        if first == _EOF and length < 9:
            return end, True, None
        if first == _ERROR:
            return end, True, (position + 4, end)
        if length == _MAX_PACKET:
            pieces = []
            cursor = position
            complete = False
            while cursor + 4 <= size:
                part = buffer[cursor] | (buffer[cursor + 1] << 8) | (buffer[cursor + 2] << 16)
                if cursor + 4 + part > size:
                    break
                pieces.append((cursor + 4, cursor + 4 + part))
                cursor += 4 + part
                if part < _MAX_PACKET:
                    complete = True
                    break
            if not complete:
                break
            long_rows[len(starts)] = pieces
            append(-1)
            position = cursor
            continue
        append(position + 4)
        position = end
    return position, False, None


def _joined(
    block: bytes, starts: list[int], long_rows: dict[int, list[tuple[int, int]]]
) -> tuple[bytes, list[int]]:
    """A block holding each row's payload whole (a long row's packets joined), and the rows'
    offsets in it."""
    parts: list[bytes] = []
    offsets: list[int] = []
    size = 0
    for index, start in enumerate(starts):
        if start < 0:
            payload = b"".join(block[s:e] for s, e in long_rows[index])
        else:
            length = block[start - 4] | (block[start - 3] << 8) | (block[start - 2] << 16)
            payload = block[start : start + length]
        offsets.append(size)
        parts.append(payload)
        size += len(payload)
    return b"".join(parts), offsets


def _fields(block: bytes, starts: np.ndarray, count: int) -> list[list[bytes | None]]:
    """The raw fields of the rows at ``starts`` (one list per column), for the slow path."""
    padded = np.frombuffer(block + bytes(_PAD), dtype=np.uint8)
    position = starts
    out: list[list[bytes | None]] = []
    for _ in range(count):
        start, length, null, position = _lenenc(padded, position)
        out.append(
            [
                None if n else block[s : s + n_]
                for s, n_, n in zip(start.tolist(), length.tolist(), null.tolist(), strict=True)
            ]
        )
    return out


def _lenenc(
    padded: np.ndarray, position: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For a length-encoded string at each position: where its bytes start, how many, whether
    it is NULL, and where the next field starts."""
    first = padded[position].astype(np.int64)
    null = first == _NULL
    length = np.where(null, 0, first)
    header = np.ones_like(first)
    long = first >= 0xFC
    if long.any():
        byte = [padded[position + i].astype(np.int64) for i in range(1, 9)]
        two = byte[0] | (byte[1] << 8)
        three = two | (byte[2] << 16)
        eight = three | (byte[3] << 24) | (byte[4] << 32) | (byte[5] << 40) | (byte[6] << 48)
        eight |= byte[7] << 56
        length = np.select(
            [first == 0xFC, first == 0xFD, first == 0xFE], [two, three, eight], length
        )
        header = np.select([first == 0xFC, first == 0xFD, first == 0xFE], [3, 4, 9], header)
    start = position + header
    return start, length, null, start + length


def _table(
    block: bytes, starts: np.ndarray, columns: list["_Column"], schema: pa.Schema
) -> tuple[pa.Table, dict[int, list[str]]]:
    """The rows as a table of ``schema``, and the problems of the rows a column refused."""
    padded = np.frombuffer(block + bytes(_PAD), dtype=np.uint8)
    data = pa.py_buffer(block)
    count = len(starts)
    position = starts
    arrays = []
    refused: dict[int, list[str]] = {}
    for column, field in zip(columns, schema, strict=True):
        start, length, null, position = _lenenc(padded, position)
        array = None
        if column.cast is not None:
            views = _views(padded, start, length, null, data, count)
            try:
                array = views.cast(column.cast)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                array = None  # a value the cast refuses: each value as the cursor gives it
        if array is None:
            values = [
                None if n else column.value(block[s : s + n_])
                for s, n_, n in zip(start.tolist(), length.tolist(), null.tolist(), strict=True)
            ]
            array, bad_rows = values_to_array(values, field.type)
            for index in bad_rows:
                refused.setdefault(index, []).append(f"column {field.name!r} is not {field.type}")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema), refused


def _views(
    padded: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    null: np.ndarray,
    data: pa.Buffer,
    count: int,
) -> pa.Array:
    """The fields as an Arrow binary-view array over ``data`` (no copy of a long value)."""
    from numpy.lib.stride_tricks import sliding_window_view

    views = np.empty((count, 4), dtype="<i4")
    views[:, 0] = length
    window = sliding_window_view(padded, _INLINE)[start]
    np.bitwise_and(window, _KEEP[np.minimum(length, _INLINE)], out=window)  # zeros past the end
    views.view(np.uint8).reshape(count, 16)[:, 4:] = window
    long = length > _INLINE
    if long.any():  # a prefix of 4 bytes, buffer 0, the offset
        views[long, 2] = 0
        views[long, 3] = start[long]
    nulls = int(null.sum())
    validity = pa.array(~null).buffers()[1] if nulls else None
    return pa.Array.from_buffers(
        pa.binary_view(), count, [validity, pa.py_buffer(views), data], null_count=nulls
    )

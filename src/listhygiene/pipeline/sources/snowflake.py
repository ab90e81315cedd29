"""Snowflake tables and queries through Snowflake's own connector, as Arrow batches.

``snowflake://user:password@account/database/schema?warehouse=...&role=...`` is the URL shape of
snowflake-sqlalchemy; SQLAlchemy (a core dependency) only parses it here, and the connector
(``snowflake-connector-python``, the ``snowflake`` extra) is used directly, with no dialect
package: its ``fetch_arrow_batches()`` gives each result chunk Snowflake sends as one Arrow
table, converted in C++ by the connector, so nothing of a large table is ever a Python row.
Every other query parameter goes to ``snowflake.connector.connect`` as it is (``authenticator``,
``host``, ``port`` and ``protocol`` for a private link or a local emulator), with a 10-second
``login_timeout`` unless the URL sets one.

Each column's type is the one the result declares, whatever a chunk's values look like
(Snowflake sends each chunk's integers as narrow as they allow): ``NUMBER(p, 0)`` is ``int64``
(Snowflake's ``INT`` is ``NUMBER(38, 0)``, and an id column should not come out as decimals),
one with a scale ``decimal128(p, s)``, ``FLOAT`` ``float64``, text, ``VARIANT``, ``OBJECT`` and
``ARRAY`` their (JSON) text, ``DATE`` ``date32``, timestamps in microseconds (the connector's
``force_microsecond_precision``: year 9999 fits), any other type as the connector gives it. A
value its column's type refuses (an integer past ``int64``'s range) is null and its row a bad
record, as in the other readers.

Identifiers are written as Snowflake resolves unquoted ones: a name of letters, digits, ``_``
and ``$`` all in one case is its upper case (``contacts`` is ``CONTACTS``), any other name is
quoted as it is (``"Contacts 2024"``); a table is ``name``, ``schema.name`` or
``database.schema.name``. Errors are one line naming the URL with its password masked.
"""

import re
from collections.abc import Generator, Iterator
from typing import Any

import pyarrow as pa

from listhygiene.pipeline.sources.base import (
    BadRecord,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    mask_url,
)
from listhygiene.pipeline.sources.batches import rebatched_ahead, settle_schema, values_to_array

__all__ = [
    "SCHEME",
    "SnowflakeSource",
    "connect",
    "connection_arguments",
    "error_text",
    "identifier",
    "is_snowflake_url",
    "stored_name",
    "table_name",
]

SCHEME = "snowflake"
_CONNECT_TIMEOUT = 10
_SAMPLE_ROWS = 1000
_INTEGERS = (
    "port",
    "login_timeout",
    "network_timeout",
    "socket_timeout",
    "client_prefetch_threads",
)
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")

# The connector's type codes (snowflake.connector.constants.FIELD_TYPES)
_FIXED, _REAL, _TEXT, _DATE, _TIMESTAMP, _VARIANT = 0, 1, 2, 3, 4, 5
_NTZ, _OBJECT, _ARRAY, _BINARY, _BOOLEAN = 8, 9, 10, 11, 13  # LTZ 6, TZ 7: the connector's
_JSON_TEXT = {_TEXT, _VARIANT, _OBJECT, _ARRAY}


def is_snowflake_url(url: str) -> bool:
    """Whether ``url`` is a ``snowflake://`` URL (read and written through the connector)."""
    return url.split("://", 1)[0].lower() == SCHEME and "://" in url


def connection_arguments(url: str) -> tuple[dict[str, Any], str, str | None]:
    """``snowflake.connector.connect``'s arguments for a URL, the URL with its password masked,
    and the password (to mask in the connector's messages). Raises :class:`SourceError`."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SourceError(f"{mask_url(url)} is not a database URL") from None
    name = parsed.render_as_string(hide_password=True)
    if not parsed.host or not parsed.username:
        raise SourceError(
            f"{name}: a Snowflake URL names a user and an account "
            "(snowflake://user:password@account/database/schema?warehouse=...)"
        )
    path = [part for part in (parsed.database or "").split("/") if part]
    if len(path) > 2:
        raise SourceError(f"{name}: the path is /database or /database/schema, not more")
    arguments: dict[str, Any] = {"user": parsed.username, "account": parsed.host}
    if parsed.password is not None:
        arguments["password"] = parsed.password
    if path:
        arguments["database"] = path[0]
    if len(path) == 2:
        arguments["schema"] = path[1]
    for key, value in parsed.query.items():
        text = value[-1] if isinstance(value, tuple) else value
        if key in _INTEGERS:
            try:
                arguments[key] = int(text)
            except ValueError:
                raise SourceError(f"{name}: {key}={text!r} is not a number") from None
        else:
            arguments[key] = text
    arguments.setdefault("login_timeout", _CONNECT_TIMEOUT)
    return arguments, name, parsed.password


def connect(arguments: dict[str, Any]) -> Any:
    """A connection; ImportError without the ``snowflake`` extra."""
    import snowflake.connector

    return snowflake.connector.connect(**arguments)


def error_text(exc: BaseException, password: str | None) -> str:
    """The connector's message on one line (Snowflake's own spans several: ``SQL compilation
    error:`` then what), without its code, and with the password masked."""
    said = getattr(exc, "raw_msg", None) or getattr(exc, "msg", None) or str(exc)
    text = " ".join(line.strip() for line in str(said).splitlines() if line.strip())
    text = text or type(exc).__name__
    return text.replace(password, "***") if password else text


def identifier(name: str) -> str:
    """A column or table name quoted as Snowflake stores it (:func:`stored_name`)."""
    return '"' + stored_name(name).replace('"', '""') + '"'


def stored_name(name: str) -> str:
    """The name Snowflake gives a column or table called ``name`` unquoted, where it may be
    (one case, letters, digits, ``_`` and ``$``): its upper case; any other name as it is."""
    simple = _SIMPLE.match(name) and (name == name.lower() or name == name.upper())
    return name.upper() if simple else name


def table_name(table: str) -> str:
    """``name``, ``schema.name`` or ``database.schema.name``, quoted; ValueError otherwise."""
    parts = table.split(".")
    if len(parts) > 3 or not all(part.strip() for part in parts):
        raise ValueError(f"{table!r} is not a table name (name, schema.name or db.schema.name)")
    return ".".join(identifier(part) for part in parts)


def declared_type(column: Any) -> pa.DataType | None:
    """The Arrow type of a result column as the result declares it (``cursor.description``);
    None where the connector's own type of the first chunk decides."""
    code = column.type_code
    if code == _FIXED:
        scale = column.scale or 0
        return pa.int64() if scale == 0 else pa.decimal128(column.precision or 38, scale)
    if code in _JSON_TEXT:
        return pa.string()
    simple: dict[int, pa.DataType] = {
        _REAL: pa.float64(),
        _DATE: pa.date32(),
        _NTZ: pa.timestamp("us"),
        _TIMESTAMP: pa.timestamp("us"),
        _BINARY: pa.binary(),
        _BOOLEAN: pa.bool_(),
    }
    return simple.get(code)


class SnowflakeSource(Source):
    """The rows of a Snowflake table, or of a query, read as the connector's Arrow batches."""

    def __init__(self, url: str, *, table: str | None = None, query: str | None = None) -> None:
        self._arguments, self._name, self._password = connection_arguments(url)
        self.info = SourceInfo(kind="sql", name=self._name)
        if (table is None) == (query is None):
            raise SourceError(
                f"{self._name}: give exactly one of a table (--table) and a query (--query)"
            )
        if table is not None:
            try:
                self._statement = "SELECT * FROM " + table_name(table)
            except ValueError as exc:
                raise SourceError(f"{self._name}: {exc}") from None
            # any rows are a table's first: the server stops after these
            first = f"{self._statement} LIMIT {_SAMPLE_ROWS}"
        else:
            self._statement = first = str(query)
        self._schema: pa.Schema | None = None  # settled by the first result's description
        pieces = list(self._pieces(first, [], limit=_SAMPLE_ROWS))
        assert self._schema is not None
        self._sample: pa.Table = pa.concat_tables([self._schema.empty_table(), *pieces])

    @property
    def schema(self) -> pa.Schema:
        assert self._schema is not None
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        if rows <= _SAMPLE_ROWS:
            return self._sample.slice(0, rows)
        pieces = self._pieces(self._statement, [], limit=rows)
        return pa.concat_tables([self._sample.slice(0, 0), *pieces])

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        pieces = self._pieces(self._statement, self.info.bad_records)
        yield from rebatched_ahead(pieces, rows, self.schema)

    def _pieces(
        self, sql: str, bad: list[BadRecord], *, limit: int | None = None
    ) -> Generator[pa.Table, None, None]:
        """The result's chunks as tables of the schema, up to ``limit`` rows."""
        try:
            from snowflake.connector.errors import Error, NotSupportedError
        except ImportError as exc:
            raise SourceError(
                f"{self._name}: cannot use this database: {exc} "
                "(pip install 'listhygiene[snowflake]')"
            ) from None
        emitted = 0
        connection = None
        try:
            connection = connect(self._arguments)
            cursor = connection.cursor()
            cursor.execute(sql)
            try:
                chunks = cursor.fetch_arrow_batches(force_microsecond_precision=True)
            except NotSupportedError:  # a result sent as JSON: no rows of a SELECT
                raise SourceError(
                    f"{self._name}: the query returns no rows to read as Arrow "
                    "(not a SELECT, or PYTHON_CONNECTOR_QUERY_RESULT_FORMAT is json)"
                ) from None
            for chunk in chunks:
                if self._schema is None:
                    self._schema = _settled(cursor.description, chunk.schema)
                piece = self._conform(chunk, emitted, bad)
                if limit is not None and emitted + piece.num_rows >= limit:
                    yield piece.slice(0, limit - emitted)
                    return
                emitted += piece.num_rows
                yield piece
            if self._schema is None:  # no rows: the description alone
                self._schema = _settled(cursor.description, None)
        except Error as exc:
            raise SourceError(f"{self._name}: {error_text(exc, self._password)}") from None
        finally:
            if connection is not None:
                connection.close()

    def _conform(self, chunk: pa.Table, emitted: int, bad: list[BadRecord]) -> pa.Table:
        """A chunk under the schema: each column cast to its type, or, where a value does not
        fit, value by value (that value null, its row a bad record)."""
        schema = self.schema
        arrays = []
        problems: dict[int, list[str]] = {}
        for column, field in zip(chunk.columns, schema, strict=True):
            if column.type == field.type:
                arrays.append(column)
                continue
            try:
                arrays.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                array, refused = values_to_array(column.to_pylist(), field.type)
                arrays.append(array)
                for index in refused:
                    problems.setdefault(index, []).append(
                        f"column {field.name!r} is not {field.type}"
                    )
        table = pa.Table.from_arrays(arrays, schema=schema)
        for index in sorted(problems):
            row = tuple(c[index].as_py() for c in chunk.columns)
            bad.append(bad_record(emitted + index + 1, "; ".join(problems[index]), repr(row)))
        return table


def _settled(description: Any, first: pa.Schema | None) -> pa.Schema:
    """The schema: each column's declared type, else the first chunk's, else text."""
    fields = []
    for position, column in enumerate(description):
        wanted = declared_type(column)
        if wanted is None:
            wanted = first.field(position).type if first is not None else pa.string()
        fields.append(pa.field(column.name, wanted))
    return settle_schema(pa.schema(fields))

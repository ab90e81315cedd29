"""A warehouse table or query through SQLAlchemy, streamed with a server-side cursor.

A big table is never loaded whole: rows come through ``stream_results`` / ``yield_per`` (a named
cursor on PostgreSQL) one batch at a time. ``postgresql://`` (and Heroku's ``postgres://``)
without a driver means psycopg 3, with a 10-second ``connect_timeout`` unless the URL sets one,
so that a wrong host fails quickly. ``mysql://`` and ``mariadb://`` without a driver mean PyMySQL
(the ``mysql`` extra), in utf8mb4 and with the same 10-second connection timeout. A table name is
quoted by SQLAlchemy (``schema.table`` is split at the dot; on MySQL the schema is the database);
a query is run as given.

Column types are those of the first rows (up to 1,000), as pyarrow infers them from what the
driver returns; a column empty there, of mixed types, or holding nested values (JSON) is text.
A MySQL ``DECIMAL(p, s)`` is ``decimal128(p, s)`` as declared (the sample's largest value would
refuse a larger one later).
A later value that does not fit its column's type (SQLite lets a column hold anything) becomes
null and the row is reported as a bad record.

On PostgreSQL the rows themselves come as Arrow batches over binary ``COPY`` (ADBC's libpq
driver), four times faster than the driver's Python rows, whenever each column ADBC gives
converts to the type the sample settled on without a value changing (the same type, a wider
integer or float, text, a timestamp in another zone); otherwise, or when ADBC cannot run the
statement (a query ``COPY`` does not take), through the cursor as above. The schema is the same
either way (docs/pipeline.md, "Speed"). On MySQL and MariaDB the rows come through one unbuffered
query (PyMySQL's ``SSCursor``), parsed from the text protocol into Arrow in bulk and converted
column by column to the sampled types exactly as the cursor's values would be
(``sources/mysql.py``).

Every error names the URL with its password masked and gives the first line of the database's
own message; the password never appears in a message.
"""

import logging
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from listhygiene.pipeline.sources import mysql
from listhygiene.pipeline.sources.base import (
    BadRecord,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    mask_url,
)
from listhygiene.pipeline.sources.batches import (
    conform,
    infer_type,
    rebatched_ahead,
    settle_schema,
    values_to_array,
)

log = logging.getLogger(__name__)

__all__ = ["SqlSource"]

_SAMPLE_ROWS = 1000
_CONNECT_TIMEOUT = 10
_FILE_BACKENDS = ("sqlite", "duckdb")


class SqlSource(Source):
    """The rows of a table, or of a query, of a SQLAlchemy database URL."""

    def __init__(self, url: str, *, table: str | None = None, query: str | None = None) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError
        from sqlalchemy.pool import NullPool

        try:
            given = make_url(url)
        except ArgumentError:
            raise SourceError(f"{mask_url(url)} is not a database URL") from None
        parsed = _with_driver(given)
        self._url = parsed
        self._name = given.render_as_string(hide_password=True)
        self._password = parsed.password
        self.info = SourceInfo(kind="sql", name=self._name)
        try:
            parsed.get_dialect()
        except (NoSuchModuleError, ImportError) as exc:
            raise SourceError(
                f"{self._name}: not a database SQLAlchemy can read ({exc}); "
                "is its driver installed?"
            ) from None
        self._mysql: tuple[Any, dict[str, Any]] | None = None
        self._declared: list[pa.DataType | None] = []
        if (table is None) == (query is None):
            raise SourceError(
                f"{self._name}: give exactly one of a table (--table) and a query (--query)"
            )
        _check_database_file(parsed, self._name)
        self._statement = (
            _select_table(table, self._name) if table is not None else text(str(query))
        )
        try:
            self._engine = create_engine(
                parsed, poolclass=NullPool, connect_args=_connect_args(parsed)
            )
        except (NoSuchModuleError, ImportError, ArgumentError) as exc:
            hint = (
                " (pip install 'listhygiene[mysql]')"
                if parsed.get_backend_name() in mysql.BACKENDS
                else ""
            )
            raise SourceError(f"{self._name}: cannot use this database: {exc}{hint}") from None
        if parsed.get_backend_name() in mysql.BACKENDS and parsed.get_driver_name() == "pymysql":
            self._mysql = mysql.connect_arguments(
                self._engine.url, self._engine.dialect, _connect_args(parsed)
            )
            if table is not None:
                self._statement = text(mysql.select_table(table))
        names, rows = self._first_rows(_SAMPLE_ROWS)
        if not names:
            raise SourceError(f"{self._name} is empty (the result has no columns)")
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
        declared = self._declared or [None] * len(names)
        self._schema = settle_schema(
            pa.schema(
                [
                    pa.field(n, known or infer_type(list(v)))
                    for n, v, known in zip(names, columns, declared, strict=True)
                ]
            )
        )
        self._sample = self._table(rows, 0, [])

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        if rows <= _SAMPLE_ROWS:
            return self._sample.slice(0, rows)
        return self._table(self._first_rows(rows)[1], 0, [])

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        yield from rebatched_ahead(self._read(rows, self.info.bad_records), rows, self._schema)

    def _read(self, rows: int, bad: list[BadRecord]) -> Generator[pa.Table, None, None]:
        from sqlalchemy.exc import SQLAlchemyError

        if self._mysql is not None:
            yield from self._read_mysql(rows, bad)
            return
        arrow = self._arrow_stream()
        if arrow is not None:
            yield from arrow
            return
        emitted = 0
        try:
            with self._engine.connect() as connection:
                result = connection.execution_options(stream_results=True, yield_per=rows).execute(
                    self._statement
                )
                for part in result.partitions(rows):
                    table = self._table(part, emitted, bad)
                    emitted += table.num_rows
                    yield table
        except SQLAlchemyError as exc:
            raise self._error(exc) from None

    def _read_mysql(self, rows: int, bad: list[BadRecord]) -> Generator[pa.Table, None, None]:
        """MySQL's rows parsed from the wire, or through the cursor where that cannot run."""
        from pymysql.err import MySQLError

        assert self._mysql is not None
        args, params = self._mysql
        sql = self._sql()
        try:
            pieces = mysql.arrow_pieces(args, params, sql, self._schema, rows, bad)
            if pieces is None:
                log.debug("%s: read through the cursor", self._name)
                pieces = mysql.cursor_pieces(
                    args, params, sql, rows, lambda part, emitted: self._table(part, emitted, bad)
                )
            yield from pieces
        except (MySQLError, OSError, UnicodeDecodeError) as exc:
            raise self._error(exc) from None

    def _sql(self) -> str:
        """The statement as the text sent to the server (a query exactly as written)."""
        from sqlalchemy import TextClause

        if isinstance(self._statement, TextClause):
            return self._statement.text
        return str(self._statement.compile(dialect=self._engine.dialect))

    def _arrow_stream(self) -> Iterator[pa.Table] | None:
        """The rows as Arrow batches over PostgreSQL's binary COPY (ADBC), cast to the
        schema; None where that cannot give exactly what the cursor would."""
        if self._url.get_backend_name() != "postgresql":
            return None
        try:
            import adbc_driver_postgresql.dbapi as adbc
        except ImportError:
            return None
        uri = self._url.set(drivername="postgresql")
        if "connect_timeout" not in uri.query:
            uri = uri.update_query_dict({"connect_timeout": str(_CONNECT_TIMEOUT)})
        from sqlalchemy import TextClause

        # a query as written (compiled for psycopg, its % signs would double)
        statement = (
            self._statement.text
            if isinstance(self._statement, TextClause)
            else str(self._statement.compile(dialect=self._engine.dialect))
        )
        try:
            connection = adbc.connect(uri.render_as_string(hide_password=False))
        except Exception as exc:  # any refusal: the cursor's way decides
            log.debug("read through the cursor, ADBC could not connect: %s", self._error(exc))
            return None
        try:
            cursor = connection.cursor()
            cursor.execute(statement)
            reader = cursor.fetch_record_batch()
        except Exception as exc:
            connection.close()
            log.debug("read through the cursor, not COPY: %s", self._error(exc))
            return None
        given = reader.schema
        if len(given) != len(self._schema) or not all(
            _converts(found.type, wanted.type)
            for found, wanted in zip(given, self._schema, strict=True)
        ):
            connection.close()
            log.debug("%s: read through the cursor, ADBC's types are %s", self._name, given)
            return None
        return self._arrow_batches(connection, cursor, reader, adbc.Error)

    def _arrow_batches(
        self, connection: Any, cursor: Any, reader: Any, error: type[Exception]
    ) -> Iterator[pa.Table]:
        """The batches of ``reader`` (whose cursor must stay open while it is read)."""
        try:
            for batch in reader:
                yield pa.Table.from_batches([conform(batch, self._schema)])
        except (error, pa.ArrowException, OSError) as exc:  # libpq's, through Arrow's stream
            raise self._error(exc) from None
        finally:
            cursor.close()
            connection.close()

    def _first_rows(self, rows: int) -> tuple[list[str], list[Sequence[Any]]]:
        from sqlalchemy.exc import SQLAlchemyError

        if self._mysql is not None:
            from pymysql.err import MySQLError

            try:
                found, head, self._declared = mysql.first_rows(*self._mysql, self._sql(), rows)
            except (MySQLError, OSError, UnicodeDecodeError) as exc:
                raise self._error(exc) from None
            if found is None:
                raise SourceError(f"{self._name}: the query returns no rows to read")
            return found, list(head)
        try:
            with self._engine.connect() as connection:
                result = connection.execution_options(stream_results=True, yield_per=rows).execute(
                    self._statement
                )
                if not result.returns_rows:
                    raise SourceError(f"{self._name}: the query returns no rows to read")
                names = [str(key) for key in result.keys()]  # noqa: SIM118
                first = result.fetchmany(rows)
                result.close()
        except SQLAlchemyError as exc:
            raise self._error(exc) from None
        return names, [tuple(row) for row in first]

    def _table(self, rows: Sequence[Sequence[Any]], emitted: int, bad: list[BadRecord]) -> pa.Table:
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(self._schema)
        arrays = []
        problems: dict[int, list[str]] = {}
        for values, field in zip(columns, self._schema, strict=True):
            array, refused = values_to_array(list(values), field.type)
            arrays.append(array)
            for index in refused:
                problems.setdefault(index, []).append(f"column {field.name!r} is not {field.type}")
        for index in sorted(problems):
            text = repr(tuple(rows[index]))
            bad.append(bad_record(emitted + index + 1, "; ".join(problems[index]), text))
        return pa.Table.from_arrays(arrays, schema=self._schema)

    def _error(self, exc: BaseException) -> SourceError:
        original = getattr(exc, "orig", None) or exc
        said = str(original)
        code_and_text: tuple[Any, ...] = getattr(original, "args", ())
        if (
            len(code_and_text) == 2
            and isinstance(code_and_text[0], int)
            and isinstance(code_and_text[1], str)
        ):  # MySQL's (code, message)
            said = code_and_text[1]
        lines = [line.strip() for line in said.strip().splitlines() if line.strip()]
        message = lines[0] if lines else type(original).__name__
        if self._password:
            message = message.replace(self._password, "***")
        return SourceError(f"{self._name}: {message}")


def _converts(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column of ``found`` cast to ``wanted`` holds the values the cursor's rows would
    have given (no value changes, none refused)."""
    if found == wanted:
        return True
    if pa.types.is_integer(found) and pa.types.is_integer(wanted):
        return bool(found.bit_width <= wanted.bit_width and pa.types.is_signed_integer(found))
    if pa.types.is_floating(found) and pa.types.is_floating(wanted):
        return bool(found.bit_width <= wanted.bit_width)
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(wanted):
        # the same instants in another zone; a zone-less timestamp stays zone-less
        return found.unit == wanted.unit and (found.tz is None) == (wanted.tz is None)
    return False


def _with_driver(url: Any) -> Any:
    """``postgresql://`` and ``postgres://`` read with psycopg 3, ``mysql://`` and
    ``mariadb://`` with PyMySQL."""
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    if url.drivername in mysql.BACKENDS:
        return url.set(drivername=f"{url.drivername}+pymysql")
    return url


def _connect_args(url: Any) -> dict[str, Any]:
    if url.get_backend_name() in mysql.BACKENDS and url.get_driver_name() == "pymysql":
        args: dict[str, Any] = {}
        if "connect_timeout" not in url.query:
            args["connect_timeout"] = _CONNECT_TIMEOUT
        if "charset" not in url.query:
            args["charset"] = "utf8mb4"
        return args
    libpq = url.get_backend_name() == "postgresql" and url.get_driver_name() in (
        "psycopg",
        "psycopg2",
    )
    return (
        {"connect_timeout": _CONNECT_TIMEOUT}
        if libpq and "connect_timeout" not in url.query
        else {}
    )


def _check_database_file(url: Any, name: str) -> None:
    """A file database that does not exist is an error, not a new empty file."""
    if url.get_backend_name() not in _FILE_BACKENDS:
        return
    database = url.database
    in_memory = not database or database == ":memory:" or database.startswith("file:")
    if not in_memory and not Path(database).exists():
        raise SourceError(f"{name}: no such database file {database}")


def _select_table(table: str, name: str) -> Any:
    from sqlalchemy import literal_column, select
    from sqlalchemy import table as table_clause

    parts = table.split(".")
    if len(parts) > 2 or not all(part.strip() for part in parts):
        raise SourceError(f"{name}: {table!r} is not a table name (name or schema.name)")
    schema = parts[0] if len(parts) == 2 else None
    return select(literal_column("*")).select_from(table_clause(parts[-1], schema=schema))

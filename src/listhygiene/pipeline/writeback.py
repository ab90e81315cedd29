"""Write a run's results back to a warehouse table: one row per key, upserted in batches.

The per-status Parquet files of a run's output folder are read a batch at a time; each row's
key (an input column such as ``id``, or the verified address) and its result columns are
upserted into the target table (``INSERT … ON CONFLICT (key) DO UPDATE``; on MySQL and MariaDB
``INSERT … ON DUPLICATE KEY UPDATE``, which PyMySQL sends as multi-row statements of up to 1 MB),
so a rerun writes the same rows again and changes nothing else (docs/pipeline.md, "Writing
back"). Each batch is one transaction.

- The table is created when it does not exist (the key as its primary key, then the result
  columns under the names the output files give them); an existing table must have a primary
  key or unique constraint on the key column, and gains the result columns it lacks.
- List and struct results (``mx_records``, ``domain_reputation``) are written as JSON text, so
  that every warehouse takes them.
- A row whose key is null or empty (a blank cell's address when the key is the address) is not
  written and is counted as skipped.
- On MySQL and MariaDB (``mysql://``, ``mariadb://``: PyMySQL, the ``mysql`` extra) a new table
  is InnoDB in utf8mb4, its text key a ``VARCHAR(768)`` (the longest InnoDB indexes in utf8mb4)
  compared byte for byte (``utf8mb4_bin``: ``Bob@`` and ``bob@`` are two keys, as elsewhere),
  and scores are ``DOUBLE``; an existing table must be of an engine with transactions (InnoDB),
  or a batch cut short would stay half-written.

- On Snowflake (``snowflake://``: its connector, the ``snowflake`` extra, no SQLAlchemy
  dialect) a batch is one transaction of ``UPDATE … FROM (VALUES …)`` and ``INSERT … SELECT …
  WHERE NOT EXISTS`` statements of up to 1 MB (Snowflake's limit on query text), the values
  cast to the columns' types; names are written as Snowflake stores unquoted ones (``status``
  is ``STATUS``), and a result column whose name an input column has, case aside, is
  ``result_<name>``. Snowflake enforces no key, so none is asked of an existing table: rows
  are matched on the key column itself.

PostgreSQL, SQLite and DuckDB speak the same upsert, MySQL and MariaDB their own, Snowflake
the pair above; another dialect is refused up front.
"""

import contextlib
import datetime as dt
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from listhygiene.errors import ConfigurationError, StorageError, first_line
from listhygiene.pipeline.layout import STATUSES, status_file
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.sources import snowflake
from listhygiene.pipeline.sources.snowflake import identifier, is_snowflake_url, stored_name
from listhygiene.pipeline.writer import result_names
from listhygiene.results import FORM_A_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection, Engine

__all__ = ["WriteBack", "write_back"]

#: Dialects whose ``INSERT … ON CONFLICT … DO UPDATE`` the upsert is written in.
ON_CONFLICT_DIALECTS = ("postgresql", "sqlite", "duckdb")
#: Dialects whose ``INSERT … ON DUPLICATE KEY UPDATE`` it is written in (through PyMySQL).
MYSQL_DIALECTS = ("mysql", "mariadb")
#: Every dialect write-back upserts into.
UPSERT_DIALECTS = ON_CONFLICT_DIALECTS + MYSQL_DIALECTS
#: The longest text key MySQL indexes in utf8mb4 (InnoDB's 3,072 bytes, 4 bytes a character).
MYSQL_KEY_CHARACTERS = 768
#: The longest multi-row INSERT sent to MySQL (its max_allowed_packet is 16 MiB by default,
#: 4 MiB on old servers).
MYSQL_STATEMENT_BYTES = 1 << 20
#: The longest statement sent to Snowflake (its documented limit on query text, 1 MB), and the
#: most rows one VALUES list may hold there.
SNOWFLAKE_STATEMENT_BYTES = 1 << 20
SNOWFLAKE_VALUES_ROWS = 16_384
_CONNECT_TIMEOUT = 10

_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class WriteBack:
    """What a write-back did: rows upserted, rows without a key, and where."""

    table: str
    key: str
    written: int
    skipped: int
    columns: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "key": self.key,
            "written": self.written,
            "skipped": self.skipped,
            "columns": list(self.columns),
        }


def write_back(
    out: str,
    url: str,
    table: str,
    *,
    key: str | None = None,
    batch_rows: int = _BATCH_ROWS,
) -> WriteBack:
    """Upsert the results of the run in ``out`` into ``table`` at the SQLAlchemy ``url``.

    ``key`` names an input column (``id``); without it the key is the verified address (the
    ``email`` result column, ``result_email`` when the input has its own ``email``).
    """
    import pyarrow.parquet as pq

    folder = OutputFolder(str(out))
    files = {s: folder.final(status_file(s)) for s in STATUSES}
    try:
        schema = pq.read_schema(files[STATUSES[0]], filesystem=folder.fs)
    except (OSError, ValueError) as exc:
        raise StorageError(f"{out}: not a run's output folder ({first_line(exc)})") from None
    names = result_names(schema)
    key_column = key or names["email"]
    if key_column not in schema.names:
        raise ConfigurationError(
            f"write-back key {key_column!r} is not a column of the outputs in {out}"
        )
    columns = [names[f] for f in FORM_A_FIELDS if names[f] != key_column]
    batches = _rows(files, folder, key_column, columns, batch_rows)
    if is_snowflake_url(url):
        return _write_back_snowflake(url, table, key_column, schema, columns, batches)
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            target = _prepare_table(conn, table, key_column, schema, columns)
        written = skipped = 0
        statement = _upsert(engine, table, key_column, columns)
        for rows, without_key in batches:
            skipped += without_key
            if rows:
                with engine.begin() as conn:
                    if conn.dialect.name in MYSQL_DIALECTS:
                        _upsert_mysql(conn, statement, rows)
                    else:
                        conn.execute(statement, rows)
                written += len(rows)
    except ConfigurationError:
        raise
    except Exception as exc:  # the driver's errors: one line naming the table
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(exc, SQLAlchemyError | OSError):
            raise
        raise StorageError(f"write-back to {table}: {_said(exc)}") from None
    finally:
        engine.dispose()
    return WriteBack(target, key_column, written, skipped, tuple(columns))


def _said(exc: BaseException) -> str:
    """The first line of a driver's error; MySQL's ``(code, message)`` as its message."""
    original = getattr(exc, "orig", None)
    args: tuple[Any, ...] = getattr(original, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str) and args[1].strip():
        return args[1].strip().splitlines()[0]
    return first_line(exc)


def _engine(url: str) -> "Engine":
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(f"write-back: {url!r} is not a database URL") from None
    if parsed.get_backend_name() not in UPSERT_DIALECTS:
        raise ConfigurationError(
            f"write-back: {parsed.get_backend_name()} is not supported "
            f"(one of {', '.join(UPSERT_DIALECTS)})"
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() in MYSQL_DIALECTS:
        if parsed.drivername in MYSQL_DIALECTS:
            parsed = parsed.set(drivername=f"{parsed.drivername}+pymysql")
        connect_args = {
            name: value
            for name, value in (("charset", "utf8mb4"), ("connect_timeout", _CONNECT_TIMEOUT))
            if name not in parsed.query
        }
    extra = "mysql" if parsed.get_backend_name() in MYSQL_DIALECTS else "warehouses"
    try:
        return create_engine(parsed, connect_args=connect_args)
    except (NoSuchModuleError, ImportError):
        raise ConfigurationError(
            f"write-back: no driver for {parsed.drivername} (install listhygiene[{extra}])"
        ) from None


def _split(table: str) -> tuple[str | None, str]:
    parts = table.split(".")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise ConfigurationError(f"write-back: {table!r} is not a table name (name or schema.name)")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def _prepare_table(
    conn: "Connection", table: str, key: str, schema: "pa.Schema", columns: list[str]
) -> str:
    """Create the table, or check its key and add the result columns it lacks."""
    from sqlalchemy import Column, MetaData, Table, inspect

    schema_name, name = _split(table)
    inspector = inspect(conn)
    mysql = conn.dialect.name in MYSQL_DIALECTS
    if not inspector.has_table(name, schema=schema_name):
        metadata = MetaData(schema=schema_name)
        options: dict[str, Any] = (
            {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"} if mysql else {}
        )
        Table(
            name,
            metadata,
            Column(key, _key_type(schema.field(key).type), primary_key=True),
            *(Column(c, _sql_type(schema.field(c).type)) for c in columns),
            **options,
        ).create(conn)
        return table
    if mysql:
        _check_transactional(conn, table, schema_name, name)
    existing, unique = _catalog(conn, schema_name, name)
    if key not in existing:
        raise ConfigurationError(f"write-back: table {table} has no column {key!r}")
    if [key] not in unique:
        raise ConfigurationError(
            f"write-back: table {table} has no primary key or unique constraint on {key!r}, "
            "which the upsert needs"
        )
    preparer = conn.dialect.identifier_preparer
    for column in columns:
        if column not in existing:
            sql_type = _sql_type(schema.field(column).type).compile(dialect=conn.dialect)
            conn.exec_driver_sql(
                f"ALTER TABLE {_quoted(conn.engine, table)} "
                f"ADD COLUMN {preparer.quote(column)} {sql_type}"
            )
    return table


def _catalog(
    conn: "Connection", schema_name: str | None, name: str
) -> tuple[set[str], list[list[str]]]:
    """An existing table's columns, and its primary key and unique column sets."""
    from sqlalchemy import inspect, text

    if conn.dialect.name == "duckdb":  # duckdb-engine cannot reflect columns: DuckDB's catalog
        where = "table_name = :name AND schema_name = coalesce(:schema, current_schema())"
        columns = (
            conn.execute(
                text(f"SELECT column_name FROM duckdb_columns() WHERE {where}"),
                {"name": name, "schema": schema_name},
            )
            .scalars()
            .all()
        )
        keys = (
            conn.execute(
                text(
                    "SELECT constraint_column_names FROM duckdb_constraints() WHERE "
                    f"{where} AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
                ),
                {"name": name, "schema": schema_name},
            )
            .scalars()
            .all()
        )
        return set(columns), [list(k) for k in keys]
    inspector = inspect(conn)
    existing = {c["name"] for c in inspector.get_columns(name, schema=schema_name)}
    unique: list[list[str]] = [
        list(inspector.get_pk_constraint(name, schema=schema_name).get("constrained_columns") or [])
    ]
    unique += [list(u["column_names"]) for u in inspector.get_unique_constraints(name, schema_name)]
    unique += [
        [str(c) for c in i["column_names"] if c is not None]
        for i in inspector.get_indexes(name, schema_name)
        if i["unique"]
    ]
    return existing, [u for u in unique if u]


def _check_transactional(
    conn: "Connection", table: str, schema_name: str | None, name: str
) -> None:
    """Refuse a MySQL table whose engine has no transactions (MyISAM, MEMORY, ...)."""
    from sqlalchemy import text

    found = conn.execute(
        text(
            "SELECT t.ENGINE, e.TRANSACTIONS FROM information_schema.TABLES t "
            "LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE "
            "WHERE t.TABLE_SCHEMA = coalesce(:schema, DATABASE()) AND t.TABLE_NAME = :name"
        ),
        {"schema": schema_name, "name": name},
    ).first()
    if found is not None and found[0] is not None and found[1] != "YES":
        raise ConfigurationError(
            f"write-back: table {table} uses the {found[0]} engine, which has no transactions, "
            f"so a batch cut short would stay half-written (ALTER TABLE {table} ENGINE=InnoDB)"
        )


def _key_type(arrow_type: "pa.DataType") -> Any:
    """The key column's type: on MySQL, text as an indexable, byte-compared VARCHAR."""
    import pyarrow as pa
    import sqlalchemy as sa

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        mysql = sa.String(MYSQL_KEY_CHARACTERS, collation="utf8mb4_bin")
        return sa.Text().with_variant(mysql, *MYSQL_DIALECTS)
    return _sql_type(arrow_type)


def _sql_type(arrow_type: "pa.DataType") -> Any:
    import pyarrow as pa
    import sqlalchemy as sa

    if pa.types.is_boolean(arrow_type):
        return sa.Boolean()
    if pa.types.is_integer(arrow_type):
        return sa.BigInteger()
    if pa.types.is_floating(arrow_type):
        # MySQL's FLOAT is 4 bytes: 0.95 would come back 0.949999988
        return sa.Float().with_variant(sa.Double(), *MYSQL_DIALECTS)
    return sa.Text()


def _quoted(engine: "Engine", table: str) -> str:
    preparer = engine.dialect.identifier_preparer
    return ".".join(preparer.quote(p) for p in table.split("."))


def _upsert(engine: "Engine", table: str, key: str, columns: list[str]) -> Any:
    from sqlalchemy import text

    quote = engine.dialect.identifier_preparer.quote
    names = [key, *columns]
    params = [f":p{i}" for i in range(len(names))]
    insert = (
        f"INSERT INTO {_quoted(engine, table)} ({', '.join(quote(n) for n in names)}) "
        f"VALUES ({', '.join(params)})"
    )
    if engine.dialect.name in MYSQL_DIALECTS:
        # (head, tail) of multi-row INSERTs (_upsert_mysql); VALUES() is what MariaDB takes
        # (MySQL 8 too, with a deprecation note for its row alias). Sent without parameters:
        # names quoted here, where SQLAlchemy's quoting would double a % for PyMySQL
        names_sql = ", ".join(_backticked(n) for n in names)
        target = ".".join(_backticked(p) for p in table.split("."))
        updates = ", ".join(f"{_backticked(c)} = VALUES({_backticked(c)})" for c in columns)
        return (
            f"INSERT INTO {target} ({names_sql}) VALUES ",
            f" ON DUPLICATE KEY UPDATE {updates}",
        )
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in columns)
    return text(f"{insert} ON CONFLICT ({quote(key)}) DO UPDATE SET {updates}")


def _backticked(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _upsert_mysql(
    conn: "Connection", statement: tuple[str, str], rows: list[dict[str, Any]]
) -> None:
    """``rows`` as multi-row ``INSERT … ON DUPLICATE KEY UPDATE`` statements of up to
    :data:`MYSQL_STATEMENT_BYTES`, in the caller's transaction. The values are escaped by
    PyMySQL's own ``escape`` (which knows ``NO_BACKSLASH_ESCAPES``), text, numbers and nulls
    without its per-value dispatch and argument mapping, which took most of ``executemany``'s
    time.
    A key met twice is inserted, then updated: the last one wins."""
    head, tail = statement
    driver = conn.connection.driver_connection
    assert driver is not None
    escape: Callable[[Any], str] = driver.escape

    def literal(value: Any) -> str:
        kind = type(value)
        if value is None:
            return "NULL"
        if kind is str:  # quoted and escaped, by its first test
            return escape(value)
        if kind is bool:
            return "1" if value else "0"
        if kind is int:
            return str(value)
        return escape(value)  # floats (refusing NaN), dates, bytes, ...

    run = conn.execution_options(no_parameters=True).exec_driver_sql
    values: list[str] = []
    size = 0
    for row in rows:
        text = "(" + ",".join([literal(v) for v in row.values()]) + ")"
        if values and size + len(text) > MYSQL_STATEMENT_BYTES:
            run(head + ",".join(values) + tail)
            values, size = [], 0
        values.append(text)
        size += len(text) + 1
    if values:
        run(head + ",".join(values) + tail)


def _write_back_snowflake(
    url: str,
    table: str,
    key: str,
    schema: "pa.Schema",
    columns: list[str],
    batches: Iterator[tuple[list[dict[str, Any]], int]],
) -> WriteBack:
    """The upsert on Snowflake, through its connector: each batch in one transaction, as
    ``UPDATE … FROM (VALUES …)`` then ``INSERT … SELECT … WHERE NOT EXISTS`` statements of up to
    :data:`SNOWFLAKE_STATEMENT_BYTES`."""
    try:
        arguments, _, password = snowflake.connection_arguments(url)
        target = snowflake.table_name(table)
    except ValueError as exc:
        raise ConfigurationError(f"write-back: {exc}") from None
    try:
        from snowflake.connector.errors import Error, ProgrammingError
    except ImportError:
        raise ConfigurationError(
            "write-back: no driver for snowflake (install listhygiene[snowflake])"
        ) from None
    names = _snowflake_names(schema, key, columns)
    written = skipped = 0
    connection = None
    try:
        connection = snowflake.connect(arguments)
        cursor = connection.cursor()
        _prepare_snowflake(cursor, table, target, schema, names, ProgrammingError)
        types = [_snowflake_type(schema.field(c).type) for c in names]
        statements = _SnowflakeUpsert(target, list(names.values()), types)
        for rows, without_key in batches:
            skipped += without_key
            if not rows:
                continue
            cursor.execute("BEGIN")
            try:
                for values in statements.chunks(rows):
                    cursor.execute(statements.update(values))
                    cursor.execute(statements.insert(values))
                cursor.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Error):  # a connection gone takes its transaction
                    cursor.execute("ROLLBACK")
                raise
            written += len(rows)
    except Error as exc:
        raise StorageError(
            f"write-back to {table}: {snowflake.error_text(exc, password)}"
        ) from None
    finally:
        if connection is not None:
            connection.close()
    return WriteBack(table, key, written, skipped, tuple(list(names.values())[1:]))


def _snowflake_names(schema: "pa.Schema", key: str, columns: list[str]) -> dict[str, str]:
    """The key and each result column, and the name it is written under: ``result_<name>``
    for a result column that an input column's name matches case aside (``email`` beside an
    input ``EMAIL``), as the outputs name it where the case matches too. Snowflake takes
    unquoted names in any case for one name, so writing ``email`` into the table the input
    came from would overwrite its ``EMAIL``."""
    inputs = {stored_name(n) for n in schema.names if n not in columns}
    names = {key: key}
    for column in columns:
        names[column] = f"result_{column}" if stored_name(column) in inputs else column
    return names


def _prepare_snowflake(
    cursor: Any,
    table: str,
    target: str,
    schema: "pa.Schema",
    names: dict[str, str],
    missing: type[Exception],
) -> None:
    """Create the table (the key its primary key), or check that it has the key column and add
    the result columns it lacks. Snowflake enforces no primary key or unique constraint, and
    the upsert does not need one: it matches rows on the key column itself."""
    key = next(iter(names))
    try:
        cursor.execute(f"SELECT * FROM {target} LIMIT 0")
    except missing as exc:
        if getattr(exc, "errno", None) != _SNOWFLAKE_NO_SUCH_OBJECT:
            raise
        definitions = [
            f"{identifier(name)} {_snowflake_type(schema.field(column).type)}"
            + (" PRIMARY KEY" if column == key else "")
            for column, name in names.items()
        ]
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {target} ({', '.join(definitions)})")
        return
    existing = {column[0] for column in cursor.description}
    if stored_name(key) not in existing:
        raise ConfigurationError(f"write-back: table {table} has no column {key!r}")
    for column, name in names.items():
        if stored_name(name) not in existing:
            sql_type = _snowflake_type(schema.field(column).type)
            cursor.execute(f"ALTER TABLE {target} ADD COLUMN {identifier(name)} {sql_type}")


#: Snowflake's "does not exist or not authorized".
_SNOWFLAKE_NO_SUCH_OBJECT = 2003


def _snowflake_type(arrow_type: "pa.DataType") -> str:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "BOOLEAN"
    if pa.types.is_integer(arrow_type):
        return "NUMBER(38, 0)"
    if pa.types.is_floating(arrow_type):
        return "FLOAT"
    if pa.types.is_decimal(arrow_type) and arrow_type.precision <= 38:
        return f"NUMBER({arrow_type.precision}, {arrow_type.scale})"
    if pa.types.is_date(arrow_type):
        return "DATE"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMP_NTZ" if arrow_type.tz is None else "TIMESTAMP_TZ"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "BINARY"
    return "VARCHAR"


class _SnowflakeUpsert:
    """The statements of one chunk of rows: the rows as a ``VALUES`` list, each column cast to
    its type and named, updating the rows whose key is there, then inserting the others."""

    def __init__(self, target: str, names: list[str], types: list[str]) -> None:
        self._target = target
        self._quoted = [identifier(n) for n in names]
        key = self._quoted[0]
        typed = enumerate(zip(self._quoted, types, strict=True), start=1)
        columns = ", ".join(f"column{i}::{t} AS {q}" for i, (q, t) in typed)
        self._source = (f"(SELECT {columns} FROM VALUES ", ") AS s")
        updates = ", ".join(f"{q} = s.{q}" for q in self._quoted[1:])
        self._update = (f"UPDATE {target} AS t SET {updates} FROM ", f" WHERE t.{key} = s.{key}")
        self._insert = (
            f"INSERT INTO {target} ({', '.join(self._quoted)}) "
            f"SELECT {', '.join(f's.{q}' for q in self._quoted)} FROM ",
            f" WHERE NOT EXISTS (SELECT 1 FROM {target} AS t WHERE t.{key} = s.{key})",
        )
        self._room = (
            SNOWFLAKE_STATEMENT_BYTES
            - max(len("".join(self._update)), len("".join(self._insert)))
            - len("".join(self._source))
        )

    def chunks(self, rows: list[dict[str, Any]]) -> Iterator[str]:
        """The rows as ``VALUES`` lists that keep each statement within its limits."""
        values: list[str] = []
        size = 0
        for row in rows:
            text = "(" + ",".join([_snowflake_literal(v) for v in row.values()]) + ")"
            full = size + len(text.encode()) > self._room or len(values) >= SNOWFLAKE_VALUES_ROWS
            if values and full:
                yield ",".join(values)
                values, size = [], 0
            values.append(text)
            size += len(text.encode()) + 1
        if values:
            yield ",".join(values)

    def update(self, values: str) -> str:
        return self._update[0] + self._source[0] + values + self._source[1] + self._update[1]

    def insert(self, values: str) -> str:
        return self._insert[0] + self._source[0] + values + self._source[1] + self._insert[1]


def _snowflake_literal(value: Any) -> str:
    """A value as a Snowflake literal (cast to its column's type by the ``VALUES`` list's
    ``SELECT``)."""
    if value is None:
        return "NULL"
    if value is True or value is False:
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, bytes):
        text = value.hex()  # BINARY_INPUT_FORMAT's default, HEX
    elif isinstance(value, dt.date | dt.datetime):
        text = value.isoformat()
    else:  # text, a NaN, a decimal
        text = str(value)
    # backslashes are escapes in Snowflake's strings
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _rows(
    files: dict[str, str], folder: OutputFolder, key: str, columns: list[str], batch_rows: int
) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Each batch's rows as statement parameters, one per key (the last wins), and how many
    rows had no key."""
    import pyarrow.parquet as pq

    names = [key, *columns]
    for status in STATUSES:
        with folder.fs.open_input_file(files[status]) as handle:
            parquet = pq.ParquetFile(handle)
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=names):
                values = [batch.column(n).to_pylist() for n in names]
                by_key: dict[Any, dict[str, Any]] = {}
                without_key = 0
                for row in zip(*values, strict=True):
                    if row[0] is None or row[0] == "":
                        without_key += 1
                        continue
                    by_key[row[0]] = {f"p{i}": _plain(v) for i, v in enumerate(row)}
                yield list(by_key.values()), without_key


def _plain(value: Any) -> Any:
    """A value every driver takes: lists and structs as JSON text."""
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), default=str)
    return value

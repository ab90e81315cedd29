"""Write a run's results back to a warehouse table: one row per key, upserted in batches.

The per-status Parquet files of a run's output folder are read a batch at a time; each row's
key (an input column such as ``id``, or the verified address) and its result columns are
upserted into the target table (``INSERT … ON CONFLICT (key) DO UPDATE``), so a rerun writes
the same rows again and changes nothing else (docs/pipeline.md, "Writing back").

- The table is created when it does not exist (the key as its primary key, then the result
  columns under the names the output files give them); an existing table must have a primary
  key or unique constraint on the key column, and gains the result columns it lacks.
- List and struct results (``mx_records``, ``domain_reputation``) are written as JSON text, so
  that every warehouse takes them.
- A row whose key is null or empty (a blank cell's address when the key is the address) is not
  written and is counted as skipped.

PostgreSQL, SQLite and DuckDB speak the same upsert; another dialect is refused up front.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from listhygiene.errors import ConfigurationError, StorageError, first_line
from listhygiene.pipeline.layout import STATUSES, status_file
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.writer import result_names
from listhygiene.results import FORM_A_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.engine import Connection, Engine

__all__ = ["WriteBack", "write_back"]

#: Dialects whose ``INSERT … ON CONFLICT … DO UPDATE`` the upsert is written in.
UPSERT_DIALECTS = ("postgresql", "sqlite", "duckdb")

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
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            target = _prepare_table(conn, table, key_column, schema, columns)
        written = skipped = 0
        statement = _upsert(engine, table, key_column, columns)
        for rows, without_key in _rows(files, folder, key_column, columns, batch_rows):
            skipped += without_key
            if rows:
                with engine.begin() as conn:
                    conn.execute(statement, rows)
                written += len(rows)
    except ConfigurationError:
        raise
    except Exception as exc:  # the driver's errors: one line naming the table
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(exc, SQLAlchemyError | OSError):
            raise
        raise StorageError(f"write-back to {table}: {first_line(exc)}") from None
    finally:
        engine.dispose()
    return WriteBack(target, key_column, written, skipped, tuple(columns))


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
    try:
        return create_engine(parsed)
    except NoSuchModuleError:
        raise ConfigurationError(
            f"write-back: no driver for {parsed.drivername} (install listhygiene[warehouses])"
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
    if not inspector.has_table(name, schema=schema_name):
        metadata = MetaData(schema=schema_name)
        Table(
            name,
            metadata,
            Column(key, _sql_type(schema.field(key).type), primary_key=True),
            *(Column(c, _sql_type(schema.field(c).type)) for c in columns),
        ).create(conn)
        return table
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


def _sql_type(arrow_type: "pa.DataType") -> Any:
    import pyarrow as pa
    import sqlalchemy as sa

    if pa.types.is_boolean(arrow_type):
        return sa.Boolean()
    if pa.types.is_integer(arrow_type):
        return sa.BigInteger()
    if pa.types.is_floating(arrow_type):
        return sa.Float()
    return sa.Text()


def _quoted(engine: "Engine", table: str) -> str:
    preparer = engine.dialect.identifier_preparer
    return ".".join(preparer.quote(p) for p in table.split("."))


def _upsert(engine: "Engine", table: str, key: str, columns: list[str]) -> Any:
    from sqlalchemy import text

    quote = engine.dialect.identifier_preparer.quote
    names = [key, *columns]
    params = [f":p{i}" for i in range(len(names))]
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in columns)
    return text(
        f"INSERT INTO {_quoted(engine, table)} ({', '.join(quote(n) for n in names)}) "
        f"VALUES ({', '.join(params)}) ON CONFLICT ({quote(key)}) DO UPDATE SET {updates}"
    )


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

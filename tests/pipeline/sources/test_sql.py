"""Warehouse tables and queries (``sources/sql.py``): SQLite, DuckDB and PostgreSQL, streamed."""

import datetime as dt
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import Source, SourceError, open_source
from tests.pipeline.sources.helpers import column, rows_of

POSTGRES_URL = os.environ.get(
    "LISTHYGIENE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    import sqlite3

    path = tmp_path / "people.db"
    with sqlite3.connect(path) as connection:
        connection.execute("create table people (id integer, email text, note)")  # note: no type
        connection.execute('create table "My People" (email text)')
        connection.executemany(
            "insert into people values (?, ?, ?)",
            [(i, f"u{i}@example.com", None if i % 2 else "n") for i in range(1250)],
        )
        connection.execute("insert into people values (1250, 'odd@example.com', 42)")
        connection.execute("insert into people values ('x', 'text-id@example.com', null)")
        connection.execute("insert into \"My People\" values ('quoted@example.com')")
    connection.close()
    return path


def test_sqlite_table(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    source = open_source(url, table="people")
    assert source.info.kind == "sql"
    assert source.info.name == url
    assert source.schema == pa.schema(
        [("id", pa.int64()), ("email", pa.string()), ("note", pa.string())]
    )
    rows = rows_of(source, rows=100)
    assert len(rows) == 1252
    assert rows[1250] == {"id": 1250, "email": "odd@example.com", "note": "42"}
    assert rows[1251] == {"id": None, "email": "text-id@example.com", "note": None}
    assert [(b.row, b.problem) for b in source.info.bad_records] == [
        (1252, "column 'id' is not int64")
    ]


def test_sqlite_query_and_quoted_table(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    source = open_source(url, query="select email from people where id < 3 order by id")
    assert column(source, "email") == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert column(open_source(url, table="My People"), "email") == ["quoted@example.com"]
    assert column(open_source(url, table="main.people"), "id")[:2] == [0, 1]


def test_sql_errors_name_the_url(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    with pytest.raises(SourceError, match=f"^{re.escape(str(url))}: no such table: nope$"):
        open_source(url, table="nope")
    with pytest.raises(SourceError, match=f"^{re.escape(str(url))}: .*syntax error"):
        open_source(url, query="selec oops")
    with pytest.raises(SourceError, match="exactly one of a table"):
        open_source(url)
    with pytest.raises(SourceError, match="exactly one of a table"):
        open_source(url, table="people", query="select 1")
    with pytest.raises(SourceError, match="no such database file"):
        open_source(f"sqlite:///{sqlite_db.parent / 'missing.db'}", table="people")
    assert not (sqlite_db.parent / "missing.db").exists()


def test_unknown_url_scheme() -> None:
    with pytest.raises(SourceError, match="not a database SQLAlchemy can read"):
        open_source("nosuchdb://host/db", table="t")


def test_duckdb_file(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("duckdb_engine")
    path = tmp_path / "people.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute(
        "create table people as select i as id, 'u' || i || '@example.com' as email, "
        "date '2024-01-01' + i::integer as joined from range(1500) t(i)"
    )
    connection.close()
    source = open_source(f"duckdb:///{path}", table="people")
    assert source.schema.field("email").type == pa.string()
    assert source.schema.field("joined").type == pa.date32()
    batches = list(source.batches(rows=500))
    assert [b.num_rows for b in batches] == [500, 500, 500]
    query = open_source(f"duckdb:///{path}", query="select email from main.people where id = 7")
    assert column(query, "email") == ["u7@example.com"]


def _postgres() -> Any:
    """An autocommit connection to the test database (the test is skipped without one)."""
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(POSTGRES_URL, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {POSTGRES_URL}: {exc}")


@pytest.fixture
def postgres_table() -> Iterator[str]:
    connection = _postgres()
    name = f"LH_people_{uuid.uuid4().hex[:10]}"  # mixed case: must be quoted
    connection.execute(f'create table "{name}" (id int, "Email" text, joined date, spent numeric)')
    with connection.cursor() as cursor:
        cursor.executemany(
            f'insert into "{name}" values (%s, %s, %s, %s)',
            [(i, f"u{i}@example.com", dt.date(2024, 1, 1), 1.5) for i in range(2500)],
        )
    try:
        yield name
    finally:
        connection.execute(f'drop table if exists "{name}"')
        connection.close()


def test_postgres_table_is_streamed(postgres_table: str) -> None:
    source = open_source(POSTGRES_URL, table=postgres_table)
    assert source.info.name == POSTGRES_URL
    assert source.schema.names == ["id", "Email", "joined", "spent"]
    assert source.schema.field("joined").type == pa.date32()
    batches = list(source.batches(rows=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert batches[0].column("Email")[0].as_py() == "u0@example.com"
    assert column(open_source(POSTGRES_URL, table=f"public.{postgres_table}"), "id")[:1] == [0]


def test_postgres_query(postgres_table: str) -> None:
    query = (
        f'select "Email" as email from "{postgres_table}" where id between 10 and 12 order by id'
    )
    source = open_source(POSTGRES_URL, query=query)
    assert column(source, "email") == ["u10@example.com", "u11@example.com", "u12@example.com"]


def test_postgres_errors(postgres_table: str) -> None:
    with pytest.raises(SourceError, match=r'relation "no_such_table_here" does not exist'):
        open_source(POSTGRES_URL, table="no_such_table_here")
    with pytest.raises(SourceError, match=f"^{re.escape(str(POSTGRES_URL))}: .*syntax error"):
        open_source(POSTGRES_URL, query="selec 1")


@pytest.fixture
def postgres_typed_table() -> Iterator[str]:
    """Columns of every type that reaches Arrow over COPY unchanged or widened."""
    connection = _postgres()
    name = f"lh_typed_{uuid.uuid4().hex[:10]}"
    connection.execute(
        f"create table {name} (id int, big bigint, email text, ok boolean, weight float8, "
        "born date, seen timestamptz, local_seen timestamp, note varchar(20))"
    )
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"insert into {name} values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    i,
                    None if i % 7 == 0 else 2**40 + i,
                    f"u{i}@example.com" if i % 11 else None,
                    i % 2 == 0,
                    i / 3,
                    dt.date(2024, 1, 1) + dt.timedelta(days=i % 400),
                    at + dt.timedelta(seconds=i),
                    at.replace(tzinfo=None),
                    f"100% ü {i}",
                )
                for i in range(2500)
            ],
        )
    try:
        yield name
    finally:
        connection.execute(f"drop table if exists {name}")
        connection.close()


def _read_all(source: Source) -> pa.Table:
    return pa.Table.from_batches(list(source.batches(rows=1000)))


def test_postgres_rows_come_over_copy_as_the_cursor_gives_them(
    postgres_typed_table: str, postgres_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADBC's binary COPY gives the same schema and values as the cursor's rows; a column it
    would give otherwise (numeric) sends the whole read through the cursor."""
    from listhygiene.pipeline.sources.sql import SqlSource

    # a % written in a query is one % (compiled for psycopg, it would be two)
    like = f"select id, note from {postgres_typed_table} where note in ('100% ü 12', 'x') or id < 3"
    sources = [
        lambda: open_source(POSTGRES_URL, table=postgres_typed_table),
        lambda: open_source(POSTGRES_URL, query=like),
    ]
    over_copy = []
    for make in sources:
        source = make()
        stream = source._arrow_stream()  # type: ignore[attr-defined]
        assert stream is not None
        assert list(stream)
        over_copy.append(_read_all(source))
    assert over_copy[1].column("id").to_pylist() == [0, 1, 2, 12]
    assert open_source(POSTGRES_URL, table=postgres_table)._arrow_stream() is None  # type: ignore[attr-defined]

    monkeypatch.setattr(SqlSource, "_arrow_stream", lambda self: None)
    for make, table in zip(sources, over_copy, strict=True):
        through_cursor = _read_all(make())
        assert table.schema == through_cursor.schema
        assert table.equals(through_cursor)


def test_postgres_error_while_copying_is_a_source_error(postgres_typed_table: str) -> None:
    query = f"select id, 1 / (2000 - id) as x from {postgres_typed_table}"
    source = open_source(POSTGRES_URL, query=query)  # the sample's rows divide
    with pytest.raises(SourceError, match=f"^{re.escape(str(POSTGRES_URL))}: .*division by zero"):
        _read_all(source)


def test_postgres_unreachable_fails_quickly_and_masks_the_password() -> None:
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test?connect_timeout=3"
    with pytest.raises(SourceError) as caught:
        open_source(url, query="select 1")
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith("postgresql://postgres:***@127.0.0.1:1/test")
    assert "connection" in message.lower()

"""Snowflake as a source and a write-back target, against fakesnow's server.

The module starts the emulator as a process of its own on a free port (fakesnow_server.py:
fakesnow's server, which also refuses a wrong password), so the real connector talks to it over
HTTP with Snowflake's protocol, as to Snowflake. Without the ``snowflake`` extra and fakesnow
(``make install`` installs both) the tests are skipped, with the reason.
"""

import datetime as dt
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import listhygiene
from listhygiene.errors import ConfigurationError, StorageError
from listhygiene.pipeline import writeback
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.sources import Source, SourceError, open_source
from listhygiene.pipeline.sources import snowflake as reader
from listhygiene.pipeline.writeback import write_back
from listhygiene.sandbox import Sandbox
from tests.conftest import write_contacts
from tests.pipeline import fakesnow_server
from tests.pipeline.test_mysql import cli
from tests.pipeline.test_writeback import ROWS as CONTACTS
from tests.pipeline.test_writeback import outputs_by

pytest.importorskip("snowflake.connector", reason="the 'snowflake' extra is not installed")
pytest.importorskip("fakesnow", reason="fakesnow (a dev dependency) is not installed")

PASSWORD = "fake-pw"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def emulator() -> Iterator[int]:
    """fakesnow's server on a free port, with the database ``crm`` and its schema ``public``."""
    server, port = fakesnow_server.start(PASSWORD, wait=30)
    try:
        run_sql(port, "CREATE DATABASE IF NOT EXISTS crm", path="")
        run_sql(port, "CREATE SCHEMA IF NOT EXISTS crm.public", path="")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def url_of(port: int, *, password: str = PASSWORD, path: str = "/crm/public") -> str:
    return f"snowflake://fake:{password}@fakesnow{path}?host=127.0.0.1&port={port}&protocol=http"


def run_sql(port: int, *statements: str, path: str = "/crm/public") -> list[tuple[Any, ...]]:
    """The last statement's rows, the statements run through the connector."""
    arguments, _, _ = reader.connection_arguments(url_of(port, path=path))
    connection = reader.connect(arguments)
    try:
        cursor = connection.cursor()
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())
    finally:
        connection.close()


@pytest.fixture
def url(emulator: int) -> str:
    return url_of(emulator)


@pytest.fixture
def new_table(emulator: int) -> Iterator[Callable[[str], str]]:
    """Unique table names (made by the test); dropped afterwards."""
    made: list[str] = []

    def name(prefix: str) -> str:
        made.append(f"{prefix}_{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield name
    for table in made:
        run_sql(emulator, f"DROP TABLE IF EXISTS {reader.table_name(table)}")


AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
ROWS = 2500


@pytest.fixture
def typed_table(emulator: int, new_table: Callable[[str], str]) -> str:
    """Every kind of column a CRM table has, more rows than one batch, and NULLs."""
    name = new_table("lh_people")
    run_sql(
        emulator,
        f"CREATE TABLE {name} (id INT, price NUMBER(10, 2), weight FLOAT, vip BOOLEAN, "
        "born DATE, seen TIMESTAMP_NTZ, email VARCHAR, note TEXT, extra VARIANT)",
        f"INSERT INTO {name} SELECT seq4(), (seq4() % 1000) / 100, seq4() / 4, seq4() % 2 = 0, "
        "DATEADD(day, seq4() % 400, '2024-01-01'::DATE), "
        "DATEADD(second, seq4(), '2024-05-06 07:08:09.123456'::TIMESTAMP_NTZ), "
        "IFF(seq4() % 11 = 0, NULL, 'u' || seq4() || '@exämple.com'), "
        "IFF(seq4() % 2 = 1, 'note 😀 ' || seq4(), NULL), PARSE_JSON('{\"tier\": 2}') "
        f"FROM TABLE(GENERATOR(ROWCOUNT => {ROWS}))",
    )
    return name


def read_all(source: Source, rows: int = 1000) -> pa.Table:
    return pa.Table.from_batches(list(source.batches(rows)))


def test_a_table_is_read_with_its_declared_types(url: str, typed_table: str) -> None:
    source = open_source(url, table=typed_table)
    assert source.info.kind == "sql"
    assert source.info.name == url.replace(PASSWORD, "***")
    assert source.schema == pa.schema(
        [
            ("ID", pa.int64()),  # INT is NUMBER(38, 0): int64, not decimals
            ("PRICE", pa.decimal128(10, 2)),
            ("WEIGHT", pa.float64()),
            ("VIP", pa.bool_()),
            ("BORN", pa.date32()),
            ("SEEN", pa.timestamp("us")),
            ("EMAIL", pa.string()),
            ("NOTE", pa.string()),
            ("EXTRA", pa.string()),  # VARIANT: its JSON text
        ]
    )
    batches = list(source.batches(rows=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    rows = sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda row: row["ID"])
    assert rows[0]["EMAIL"] is None  # 0 % 11
    assert json.loads(rows[1].pop("EXTRA")) == {"tier": 2}  # Snowflake indents it, fakesnow not
    assert rows[1] == {
        "ID": 1,
        "PRICE": Decimal("0.01"),
        "WEIGHT": 0.25,
        "VIP": False,
        "BORN": dt.date(2024, 1, 2),
        "SEEN": AT + dt.timedelta(seconds=1),
        "EMAIL": "u1@exämple.com",
        "NOTE": "note 😀 1",
    }
    assert rows[2]["NOTE"] is None
    assert source.info.bad_records == []
    assert source.sample(5).num_rows == 5
    # the same table named with its schema, its database, or quoted in its stored case
    for name in (f"public.{typed_table}", f"crm.public.{typed_table}", typed_table.upper()):
        assert open_source(url, table=name).schema == source.schema


def test_a_query_is_run_as_written(url: str, typed_table: str) -> None:
    query = (
        f"SELECT email AS address, '100%' || ' ' || id AS tag FROM {typed_table} "
        "WHERE id BETWEEN 10 AND 12 ORDER BY id"
    )
    source = open_source(url, query=query)
    assert read_all(source).to_pylist() == [
        {"ADDRESS": "u10@exämple.com", "TAG": "100% 10"},
        {"ADDRESS": None, "TAG": "100% 11"},
        {"ADDRESS": "u12@exämple.com", "TAG": "100% 12"},
    ]
    empty = open_source(url, query=f"SELECT id, email FROM {typed_table} WHERE id < 0")
    assert empty.schema == pa.schema([("ID", pa.int64()), ("EMAIL", pa.string())])
    assert read_all(empty).num_rows == 0


def test_rows_come_as_the_connectors_arrow_batches_and_the_sample_reads_no_table(
    url: str, typed_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snowflake.connector.cursor import SnowflakeCursor

    sent: list[str] = []
    fetched: list[int] = []
    execute, fetch = SnowflakeCursor.execute, SnowflakeCursor.fetch_arrow_batches

    def recorded(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return execute(self, command, *args, **kwargs)

    def arrow(self: Any, *args: Any, **kwargs: Any) -> Any:
        for table in fetch(self, *args, **kwargs):
            fetched.append(table.num_rows)
            yield table

    monkeypatch.setattr(SnowflakeCursor, "execute", recorded)
    monkeypatch.setattr(SnowflakeCursor, "fetch_arrow_batches", arrow)
    source = open_source(url, table=typed_table)
    assert sent == [f'SELECT * FROM "{typed_table.upper()}" LIMIT 1000']
    assert sum(b.num_rows for b in source.batches(rows=700)) == ROWS
    assert sent[-1] == f'SELECT * FROM "{typed_table.upper()}"'
    assert sum(fetched[1:]) == ROWS  # every row came through the Arrow fetch


def test_chunks_of_other_widths_become_batches_of_one_schema(
    url: str, typed_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snowflake sends a result in chunks, each with its integers as narrow as its values allow;
    fakesnow sends one, so here its result is cut into chunks of 300 rows, every other one with
    its ids as int16: the batches are one schema, every row once, in order."""
    from snowflake.connector.cursor import SnowflakeCursor

    fetch = SnowflakeCursor.fetch_arrow_batches

    def chunked(self: Any, *args: Any, **kwargs: Any) -> Iterator[pa.Table]:
        for table in fetch(self, *args, **kwargs):
            for number, start in enumerate(range(0, table.num_rows, 300)):
                chunk = table.slice(start, 300)
                if number % 2:
                    chunk = chunk.set_column(0, "ID", chunk.column("ID").cast(pa.int16()))
                yield chunk

    monkeypatch.setattr(SnowflakeCursor, "fetch_arrow_batches", chunked)
    source = open_source(url, query=f"SELECT id, email FROM {typed_table} ORDER BY id")
    batches = list(source.batches(rows=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert all(b.schema == source.schema for b in batches)
    assert source.schema.field("ID").type == pa.int64()
    assert pa.Table.from_batches(batches).column("ID").to_pylist() == list(range(ROWS))
    assert source.info.bad_records == []


def test_a_value_its_column_type_refuses_is_a_bad_record(url: str, typed_table: str) -> None:
    """A chunk whose integers are past int64 (Snowflake sends them as decimals) keeps its rows:
    that value null, the row reported. fakesnow keeps INT in 64 bits, so the chunk is made."""
    source = open_source(url, query=f"SELECT id, email FROM {typed_table} ORDER BY id")
    chunk = pa.table(
        {
            "ID": pa.array([Decimal(1), Decimal(2**70)], pa.decimal128(38, 0)),
            "EMAIL": ["a@example.com", "b@example.com"],
        }
    )
    bad: list[Any] = []
    table = source._conform(chunk, 100, bad)  # type: ignore[attr-defined]
    assert table.schema == source.schema
    assert table.column("ID").to_pylist() == [1, None]
    assert [(b.row, b.problem) for b in bad] == [(102, "column 'ID' is not int64")]


def test_errors_are_one_line_naming_the_url_with_its_password_masked(
    emulator: int, url: str, typed_table: str
) -> None:
    masked = url.replace(PASSWORD, "***")
    with pytest.raises(SourceError, match=r"does not exist") as caught:
        open_source(url, table="nope")
    assert str(caught.value).startswith(masked + ": ")
    with pytest.raises(SourceError, match=r"Invalid expression|syntax"):
        open_source(url, query="SELEC 1")
    with pytest.raises(SourceError, match="returns no rows"):
        open_source(url, query=f"UPDATE {typed_table} SET id = id WHERE id < 0")
    with pytest.raises(SourceError, match=r"not a table name"):
        open_source(url, table="a.b.c.d")

    wrong = url_of(emulator, password="s3cret-pw")
    with pytest.raises(SourceError) as caught:
        open_source(wrong, table=typed_table)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith(masked + ": ")
    assert "Incorrect username or password" in message
    assert "\n" not in message

    closed = url_of(_free_port(), password="s3cret-pw")
    with pytest.raises(SourceError) as caught:
        open_source(closed, query="SELECT 1")
    assert "s3cret-pw" not in str(caught.value)
    assert str(caught.value).startswith("snowflake://fake:***@fakesnow/crm/public?")

    with pytest.raises(SourceError, match="names a user and an account"):
        open_source("snowflake://s3cret-pw@/crm", table="t")
    with pytest.raises(SourceError, match=r"/database or /database/schema"):
        open_source(url_of(emulator, path="/crm/public/more"), table="t")


# -- the command line ----------------------------------------------------------------------------


def test_clean_reads_a_snowflake_table_end_to_end(
    mail_sandbox: Sandbox, emulator: int, url: str, new_table: Callable[[str], str], tmp_path: Path
) -> None:
    name = new_table("lh_contacts")
    run_sql(
        emulator,
        f"CREATE TABLE {name} (id INT PRIMARY KEY, name TEXT, email VARCHAR(320))",
        f"INSERT INTO {name} VALUES (1, 'Ann 😀', 'info@acme-corp.test'), "
        "(2, 'Bob', 'alice.johnson@acme-corp.test'), (3, 'Cy', 'not an address'), (4, 'Di', NULL)",
    )
    env = {**os.environ, **mail_sandbox.engine_environment(), "LISTHYGIENE_HELO": "v.test"}
    out = tmp_path / "out"
    done = cli(
        "clean", url, "--table", name, "--out", str(out), "--no-smtp",
        "--verdicts", "none", "--json",
        "--write-back", url, "--write-back-table", name, "--write-back-key", "ID", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows"]["total"] == 4
    assert summary["write_back"]["written"] == 4
    # the results beside the table's own columns, its addresses as they were
    back = table_rows(emulator, name, "ID")
    assert back["1"]["NAME"] == "Ann 😀"
    assert back["1"]["EMAIL"] == "info@acme-corp.test"
    assert back["1"]["STATUS"] == "role"
    assert back["3"]["STATUS"] == "invalid"
    results = pd.concat([pd.read_parquet(out / f"{s}.parquet") for s in STATUSES])
    by_id = {int(row["ID"]): row for _, row in results.iterrows()}
    assert by_id[1]["NAME"] == "Ann 😀"
    assert by_id[1]["status"] == "role"
    assert by_id[2]["status"] == "valid"
    assert by_id[3]["status"] == "invalid"

    done = cli("clean", url, "--table", "no_such_table", "--out", str(tmp_path / "o2"))
    assert done.returncode == 3
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: {url.replace(PASSWORD, '***')}: ")
    assert "does not exist" in last

    wrong = url_of(emulator, password="s3cret-pw")
    done = cli("clean", wrong, "--table", name, "--out", str(tmp_path / "o3"))
    assert done.returncode == 3
    assert "s3cret-pw" not in done.stderr + done.stdout
    assert "Incorrect username or password" in done.stderr
    assert "Traceback" not in done.stderr


# -- write-back ----------------------------------------------------------------------------------

# CONTACTS: the write-back tests' contacts, the same as for PostgreSQL, SQLite, DuckDB and MySQL.


@pytest.fixture(scope="module")
def run(mail_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("snowflake-writeback")
    source = write_contacts(folder, CONTACTS, header=("id", "name", "email"))
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    return listhygiene.clean(source, folder / "out", settings=settings, check_smtp=False).out


def table_rows(port: int, table: str, key: str) -> dict[str, dict[str, Any]]:
    arguments, _, _ = reader.connection_arguments(url_of(port))
    connection = reader.connect(arguments)
    try:
        from snowflake.connector import DictCursor

        cursor = connection.cursor(DictCursor)
        cursor.execute(f"SELECT * FROM {reader.table_name(table)}")
        return {str(row[key]): row for row in cursor.fetchall()}
    finally:
        connection.close()


def test_write_back_by_input_key_upserts_every_row_once(
    run: str, emulator: int, url: str, new_table: Callable[[str], str]
) -> None:
    table = new_table("lh_results")
    done = write_back(run, url, table, key="id")
    assert (done.written, done.skipped) == (len(CONTACTS), 0)
    written = table_rows(emulator, table, "ID")
    expected = outputs_by(run, "id")
    assert set(written) == set(expected)
    for key, row in written.items():
        assert row["RESULT_EMAIL"] == expected[key]["result_email"]
        assert row["STATUS"] == expected[key]["status"]
        assert row["SCORE"] == expected[key]["score"]
        assert bool(row["IS_ROLE"]) == bool(expected[key]["is_role"])
        assert json.loads(str(row["MX_RECORDS"])) == list(expected[key]["mx_records"])
    assert written["2"]["RESULT_EMAIL"] == "bob@example.com"
    assert written["4"]["REASON"] == "invalid_syntax"

    # a rerun writes the same rows: nothing added, nothing changed
    again = write_back(run, url, table, key="id")
    assert again.written == len(CONTACTS)
    assert table_rows(emulator, table, "ID") == written


def test_write_back_by_address_keeps_one_row_per_mailbox(
    run: str, emulator: int, url: str, new_table: Callable[[str], str]
) -> None:
    table = new_table("lh_addresses")
    done = write_back(run, url, table)
    assert done.key == "result_email"
    assert done.skipped == 1
    addresses = {a for a in outputs_by(run, "result_email") if a}
    assert set(table_rows(emulator, table, "RESULT_EMAIL")) == addresses
    assert len(addresses) == len(CONTACTS) - 2


def test_write_back_into_the_input_table_keeps_its_columns_and_its_addresses(
    mail_sandbox: Sandbox, emulator: int, url: str, new_table: Callable[[str], str], tmp_path: Path
) -> None:
    """Results written into the table they were read from: its own columns stay, and the
    verified address does not overwrite its EMAIL (Snowflake's names know no case)."""
    table = new_table("lh_crm")
    run_sql(
        emulator,
        f"CREATE TABLE {table} (id INT PRIMARY KEY, owner TEXT, email TEXT)",
        f"INSERT INTO {table} VALUES (1, 'sales', 'Info@Example.com'), "
        "(2, 'support', 'not an address')",
    )
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    result = listhygiene.clean(
        url, tmp_path / "out", table=table, settings=settings, check_smtp=False
    )
    done = write_back(result.out, url, table, key="ID")
    assert "result_email" in done.columns
    written = table_rows(emulator, table, "ID")
    assert written["1"]["OWNER"] == "sales"
    assert written["1"]["EMAIL"] == "Info@Example.com"
    assert written["1"]["RESULT_EMAIL"] == "info@example.com"
    assert written["2"]["STATUS"] == "invalid"
    assert len(written) == 2


def test_an_existing_table_gains_the_result_columns_and_keeps_its_own(
    run: str, emulator: int, url: str, new_table: Callable[[str], str]
) -> None:
    table = new_table("lh_existing")
    run_sql(
        emulator,
        f"CREATE TABLE {table} (id VARCHAR PRIMARY KEY, owner TEXT)",
        f"INSERT INTO {table} VALUES ('1', 'it''s sales'), ('2', 'back\\\\slash')",
    )
    write_back(run, url, table, key="id")
    written = table_rows(emulator, table, "ID")
    assert written["1"]["OWNER"] == "it's sales"
    assert written["2"]["OWNER"] == "back\\slash"
    assert written["1"]["STATUS"] == outputs_by(run, "id")["1"]["status"]
    assert len(written) == len(CONTACTS)
    no_key = new_table("lh_nokey")
    run_sql(emulator, f"CREATE TABLE {no_key} (other VARCHAR)")
    with pytest.raises(ConfigurationError, match=f"table {no_key} has no column 'id'"):
        write_back(run, url, no_key, key="id")


def test_text_is_written_exactly(emulator: int, new_table: Callable[[str], str]) -> None:
    """Quotes, backslashes, newlines and emoji survive the VALUES lists."""
    table = new_table("lh_text")
    upsert = writeback._SnowflakeUpsert(
        reader.table_name(table), ["k", "v"], ["VARCHAR", "VARCHAR"]
    )
    values = ["it's", "back\\slash \\n", "two\nlines", "😀 ünïcode", "'; DROP TABLE x; --", ""]
    rows = [{"p0": str(i), "p1": v} for i, v in enumerate(values)]
    run_sql(
        emulator,
        f"CREATE TABLE {table} (k VARCHAR, v VARCHAR)",
        *[upsert.insert(chunk) for chunk in upsert.chunks(rows)],
    )
    found = table_rows(emulator, table, "K")
    assert [found[str(i)]["V"] for i in range(len(values))] == values


def test_errors_name_the_table_on_one_line(run: str, emulator: int, url: str) -> None:
    wrong = url_of(emulator, password="s3cret-pw")
    with pytest.raises(StorageError) as caught:
        write_back(run, wrong, "lh_results", key="id")
    assert str(caught.value).startswith("write-back to lh_results: ")
    assert "Incorrect username or password" in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="not a table name"):
        write_back(run, url, "a.b.c.d", key="id")
    with pytest.raises(ConfigurationError, match="names a user and an account"):
        write_back(run, "snowflake:///crm", "t", key="id")


def test_a_write_back_cut_short_keeps_whole_batches_and_a_rerun_completes_it(
    run: str, emulator: int, url: str, new_table: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Each batch is one transaction, even when it is sent as several statements: a batch
    that fails leaves none of its rows, the batches before it stay, and running the write-back
    again writes everything."""
    monkeypatch.setattr(writeback, "SNOWFLAKE_VALUES_ROWS", 1)  # a pair of statements a row
    folder = writeback.OutputFolder(run)
    files = {s: folder.final(writeback.status_file(s)) for s in writeback.STATUSES}
    batches = [
        [row["p0"] for row in rows]
        for rows, _ in writeback._rows(files, folder, "id", ["status"], 2)
        if rows
    ]
    failing = next(i for i, keys in enumerate(batches) if len(keys) == 2)
    refused = batches[failing][1]
    # the failing batch's second row is sent as a value the server cannot convert (fakesnow
    # answers a broken constraint with HTTP 500s, which the connector retries for minutes)
    literal = writeback._snowflake_literal
    monkeypatch.setattr(
        writeback,
        "_snowflake_literal",
        lambda value: "'not a number'::NUMBER" if value == refused else literal(value),
    )
    table = new_table("lh_cut")
    with pytest.raises(StorageError, match=f"^write-back to {table}: .*not a number"):
        write_back(run, url, table, key="id", batch_rows=2)
    kept = set(table_rows(emulator, table, "ID"))
    assert kept == {key for keys in batches[:failing] for key in keys}
    assert batches[failing][0] not in kept  # written, then rolled back

    monkeypatch.setattr(writeback, "_snowflake_literal", literal)
    done = write_back(run, url, table, key="id", batch_rows=2)
    assert done.written == len(CONTACTS)
    assert set(table_rows(emulator, table, "ID")) == {i for i, _, _ in CONTACTS}

"""MySQL and MariaDB as a source and a write-back target, against the machine's MariaDB.

``mysql://root@127.0.0.1:3306/test`` unless ``LISTHYGIENE_TEST_MYSQL`` names another server; the
tests create uniquely named tables in its database and drop them afterwards (two pytest-xdist
workers share it). Without a reachable server they are skipped, with the reason.
"""

import datetime as dt
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy.engine import make_url

import listhygiene
from listhygiene.errors import ConfigurationError, StorageError
from listhygiene.pipeline import writeback
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.sources import Source, SourceError, mysql, open_source
from listhygiene.pipeline.writeback import write_back
from listhygiene.sandbox import Sandbox
from tests.conftest import write_contacts
from tests.pipeline.test_writeback import ROWS as CONTACTS

MYSQL_URL = os.environ.get("LISTHYGIENE_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
_URL = make_url(MYSQL_URL)


def _connect(**options: Any) -> Any:
    pymysql = pytest.importorskip("pymysql")
    try:
        return pymysql.connect(
            host=_URL.host,
            port=_URL.port or 3306,
            user=_URL.username,
            password=_URL.password or "",
            database=_URL.database,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=3,
            **options,
        )
    except pymysql.err.OperationalError as exc:
        pytest.skip(f"no MySQL/MariaDB at {MYSQL_URL}: {exc}")


def sql(statement: str, *args: Any) -> list[tuple[Any, ...]]:
    connection = _connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement, args or None)
            return list(cursor.fetchall())
    finally:
        connection.close()


@pytest.fixture
def new_table() -> Iterator[Callable[[str], str]]:
    """Unique table names in the test database (made by the test); dropped afterwards."""
    made: list[str] = []

    def name(prefix: str) -> str:
        made.append(f"{prefix}_{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield name
    if made:
        sql("DROP TABLE IF EXISTS " + ", ".join(f"`{t}`" for t in made))


AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
ROWS = 2500


@pytest.fixture
def typed_table(new_table: Callable[[str], str]) -> str:
    """Every kind of column a CRM table has, more rows than one batch, and NULLs."""
    name = new_table("LH_people")  # mixed case: quoted
    connection = _connect()
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE `{name}` (id INT PRIMARY KEY, big BIGINT, small TINYINT, "
            "price DECIMAL(10,2), weight DOUBLE, born DATE, seen DATETIME(6), "
            "email VARCHAR(320), note TEXT, wide VARCHAR(5000), raw VARBINARY(8)) "
            "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        )
        cursor.executemany(
            f"INSERT INTO `{name}` VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    i,
                    None if i % 7 == 0 else 2**40 + i,
                    i % 100 - 50,
                    Decimal(f"{i}.{i % 100:02d}"),
                    i / 3,
                    dt.date(2024, 1, 1) + dt.timedelta(days=i % 400),
                    AT + dt.timedelta(seconds=i),
                    None if i % 11 == 0 else f"u{i}@exämple.com",
                    f"note 😀 {i}" if i % 2 else None,
                    ("w" * 4000 + str(i)) if i % 500 == 1 else f"short {i}",
                    bytes([i % 256, 0, 255]),
                )
                for i in range(ROWS)
            ],
        )
    connection.close()
    return name


def read_all(source: Source, rows: int = 1000) -> pa.Table:
    return pa.Table.from_batches(list(source.batches(rows)))


def through_the_cursor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read through PyMySQL's SSCursor rows instead of the text protocol's bytes."""
    monkeypatch.setattr(mysql, "arrow_pieces", lambda *args, **kwargs: None)


def test_a_table_is_read_with_its_types(typed_table: str) -> None:
    source = open_source(MYSQL_URL, table=typed_table)
    assert source.info.kind == "sql"
    assert source.info.name == MYSQL_URL
    assert source.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("big", pa.int64()),
            ("small", pa.int64()),
            ("price", pa.decimal128(10, 2)),  # as declared, not as the sample's values
            ("weight", pa.float64()),
            ("born", pa.date32()),
            ("seen", pa.timestamp("us")),
            ("email", pa.string()),
            ("note", pa.string()),
            ("wide", pa.string()),
            ("raw", pa.binary()),
        ]
    )
    batches = list(source.batches(rows=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    table = pa.Table.from_batches(batches)
    rows = table.to_pylist()
    assert rows[0]["big"] is None  # 0 % 7
    assert rows[0]["email"] is None  # 0 % 11
    assert rows[1] == {
        "id": 1,
        "big": 2**40 + 1,
        "small": -49,
        "price": Decimal("1.01"),
        "weight": pytest.approx(1 / 3),
        "born": dt.date(2024, 1, 2),
        "seen": AT + dt.timedelta(seconds=1),
        "email": "u1@exämple.com",
        "note": "note 😀 1",
        "wide": "w" * 4000 + "1",
        "raw": bytes([1, 0, 255]),
    }
    assert rows[2]["note"] is None
    assert rows[2499]["seen"] == AT + dt.timedelta(seconds=2499)
    assert source.info.bad_records == []
    assert open_source(f"{MYSQL_URL}", table=f"test.{typed_table}").schema == source.schema


def test_the_rows_parsed_from_the_wire_are_the_cursors_rows(
    typed_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bulk parsing gives the schema, values and bad records PyMySQL's own rows give."""
    query = f"SELECT id, email, note, wide, price, seen FROM `{typed_table}` WHERE id % 3 = 0"
    sources = [
        lambda: open_source(MYSQL_URL, table=typed_table),
        lambda: open_source(MYSQL_URL, query=query),
    ]
    fast = [read_all(make()) for make in sources]
    through_the_cursor(monkeypatch)
    slow = [read_all(make()) for make in sources]
    for wire, cursor in zip(fast, slow, strict=True):
        assert wire.schema == cursor.schema
        assert wire.equals(cursor)
    assert fast[1].num_rows == 834


def test_a_query_is_run_as_written(typed_table: str) -> None:
    query = (
        f"SELECT email AS address, CONCAT('100%', ' ', id) AS tag FROM `{typed_table}` "
        "WHERE id BETWEEN 10 AND 12 ORDER BY id"
    )
    source = open_source(MYSQL_URL, query=query)
    assert read_all(source).to_pylist() == [
        {"address": "u10@exämple.com", "tag": "100% 10"},
        {"address": None, "tag": "100% 11"},
        {"address": "u12@exämple.com", "tag": "100% 12"},
    ]
    # mariadb:// is the same server through the same driver
    mariadb = MYSQL_URL.replace("mysql://", "mariadb://", 1)
    assert read_all(open_source(mariadb, query=query)).num_rows == 3


def test_reading_is_bounded_and_the_sample_does_not_read_the_table(
    typed_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pieces read off the wire are bounded by bytes and by rows, and a stopped result (the
    sample's, or a reader that stops early) is closed, not read to its end."""
    from pymysql.connections import MySQLResult

    drained: list[int] = []
    original = MySQLResult._finish_unbuffered_query

    def counted(self: Any) -> None:
        drained.append(1)
        original(self)

    monkeypatch.setattr(MySQLResult, "_finish_unbuffered_query", counted)
    source = open_source(MYSQL_URL, table=typed_table)
    assert source.sample(10).num_rows == 10
    assert drained == []

    monkeypatch.setattr(mysql, "CHUNK_BYTES", 16_384)
    args, params = source._mysql  # type: ignore[attr-defined]
    bad: list[Any] = []
    statement = mysql.select_table(typed_table)
    pieces = mysql.arrow_pieces(args, params, statement, source.schema, 300, bad)
    assert pieces is not None
    sizes = [piece.num_rows for piece in pieces]
    assert sum(sizes) == ROWS
    assert max(sizes) <= 300
    assert len(sizes) >= ROWS // 300
    # the wide rows (4 KB) end a 16 KiB piece early
    assert min(sizes[:-1]) < 300

    stopped = mysql.arrow_pieces(args, params, statement, source.schema, 100, bad)
    assert stopped is not None
    next(iter(stopped))
    stopped.close()  # type: ignore[attr-defined]
    batches = source.batches(rows=100)
    next(batches)
    batches.close()  # type: ignore[attr-defined]
    assert drained == []
    assert bad == []


def test_a_value_after_the_sample_that_does_not_fit_is_a_bad_record(
    new_table: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = new_table("lh_late")
    connection = _connect()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")  # zero dates, as old tables hold them
        cursor.execute(f"CREATE TABLE `{name}` (id INT, born DATE, email TEXT)")
        cursor.executemany(
            f"INSERT INTO `{name}` VALUES (%s, %s, %s)",
            [(i, dt.date(2020, 1, 1), f"u{i}@example.com") for i in range(1100)],
        )
        cursor.execute(f"INSERT INTO `{name}` VALUES (1100, '0000-00-00', 'zero@example.com')")
    connection.close()
    found = []
    for cursor_only in (False, True):
        if cursor_only:
            through_the_cursor(monkeypatch)
        source = open_source(MYSQL_URL, query=f"SELECT * FROM `{name}` ORDER BY id")
        assert source.schema.field("born").type == pa.date32()
        table = read_all(source, rows=512)
        assert table.num_rows == 1101
        assert table.column("born")[1100].as_py() is None
        found.append([(b.row, b.problem, b.text) for b in source.info.bad_records])
    assert (
        found[0]
        == found[1]
        == [(1101, "column 'born' is not date32[day]", "(1100, '0000-00-00', 'zero@example.com')")]
    )


def test_errors_are_one_line_naming_the_url_with_its_password_masked(typed_table: str) -> None:
    with pytest.raises(SourceError, match=r"^" + re.escape(MYSQL_URL) + r": Table '\w+\.nope'"):
        open_source(MYSQL_URL, table="nope")
    with pytest.raises(SourceError, match=r"You have an error in your SQL syntax"):
        open_source(MYSQL_URL, query="SELEC 1")
    with pytest.raises(SourceError, match="returns no rows"):
        open_source(MYSQL_URL, query=f"UPDATE `{typed_table}` SET id = id WHERE id < 0")

    wrong = _URL.set(password="s3cret-pw").render_as_string(hide_password=False)
    with pytest.raises(SourceError) as caught:
        open_source(wrong, table=typed_table)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith(_URL.set(password="x").render_as_string(hide_password=True) + ": ")
    assert "Access denied" in message
    assert "\n" not in message

    closed = _URL.set(password="s3cret-pw", port=1).render_as_string(hide_password=False)
    with pytest.raises(SourceError) as caught:
        open_source(closed, query="SELECT 1")
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith(f"mysql://{_URL.username}:***@{_URL.host}:1/")
    assert "Can't connect" in message


def test_an_error_in_the_middle_of_the_rows_is_a_source_error(typed_table: str) -> None:
    # the sample's rows are fine; row 2000 makes the server stop the result with an error
    query = (
        f"SELECT id, IF(id < 2000, id, (SELECT 1 UNION SELECT t.id)) AS x FROM `{typed_table}` t"
    )
    source = open_source(MYSQL_URL, query=query)
    with pytest.raises(SourceError, match=r"^" + re.escape(MYSQL_URL) + r": Subquery returns"):
        read_all(source)


def packet(payload: bytes, sequence: int = 1) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([sequence]) + payload


def lenenc(value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    size = len(value)
    if size < 251:
        return bytes([size]) + value
    if size < 2**16:
        return b"\xfc" + size.to_bytes(2, "little") + value
    if size < 2**24:
        return b"\xfd" + size.to_bytes(3, "little") + value
    return b"\xfe" + size.to_bytes(8, "little") + value


def test_rows_longer_than_a_packet_are_joined() -> None:
    """A row of 16 MiB or more comes in several packets (the last one shorter), and the EOF
    packet ends the result; the fields are read across them."""
    big = b"x" * (0xFFFFFF + 10)
    long_row = lenenc(b"1") + lenenc(big)
    wire = packet(lenenc(b"0") + lenenc(None))
    wire += packet(long_row[:0xFFFFFF]) + packet(long_row[0xFFFFFF:])
    wire += packet(lenenc(b"2") + lenenc(b"two")) + packet(b"\xfe\x00\x00\x02\x00")
    buffer = bytearray(wire)
    starts: list[int] = []
    assert mysql._special(buffer, starts, 0) is None
    mysql._scan(buffer, 0, starts)
    special = mysql._special(buffer, starts, 0)
    assert special == 1  # the long row's first packet
    long_rows: dict[int, list[tuple[int, int]]] = {}
    position = starts[special] - 4
    del starts[special:]
    position, done, error = mysql._split(buffer, position, starts, long_rows)
    assert (position, done, error) == (len(wire), True, None)
    block, offsets = mysql._joined(bytes(buffer), starts, long_rows)
    import numpy as np

    fields = mysql._fields(block, np.asarray(offsets, dtype=np.int64), 2)
    assert fields[0] == [b"0", b"1", b"2"]
    assert fields[1][0] is None
    assert fields[1][1] == big
    assert fields[1][2] == b"two"


# -- the command line ----------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``listhygiene`` as a user runs it."""
    command = [str(Path(sys.executable).parent / "listhygiene"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_clean_reads_a_mysql_table_end_to_end(
    mail_sandbox: Sandbox, new_table: Callable[[str], str], tmp_path: Path
) -> None:
    name = new_table("lh_contacts")
    connection = _connect()
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, name TEXT, email VARCHAR(320)) "
            "DEFAULT CHARSET=utf8mb4"
        )
        cursor.executemany(
            f"INSERT INTO `{name}` VALUES (%s, %s, %s)",
            [
                (1, "Ann 😀", "info@acme-corp.test"),
                (2, "Bob", "alice.johnson@acme-corp.test"),
                (3, "Cy", "not an address"),
                (4, "Di", None),
            ],
        )
    connection.close()
    env = {**os.environ, **mail_sandbox.engine_environment(), "LISTHYGIENE_HELO": "v.test"}
    out = tmp_path / "out"
    done = cli(
        "clean", MYSQL_URL, "--table", name, "--out", str(out), "--no-smtp",
        "--verdicts", "none", "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows"]["total"] == 4
    results = pd.concat([pd.read_parquet(out / f"{s}.parquet") for s in STATUSES])
    by_id = {int(row["id"]): row for _, row in results.iterrows()}
    assert by_id[1]["name"] == "Ann 😀"
    assert by_id[1]["status"] == "role"
    assert by_id[2]["status"] == "valid"
    assert by_id[3]["status"] == "invalid"

    done = cli("clean", MYSQL_URL, "--table", "no_such_table", "--out", str(tmp_path / "o2"))
    assert done.returncode == 3
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: {MYSQL_URL}: Table ")

    wrong = _URL.set(password="s3cret-pw").render_as_string(hide_password=False)
    done = cli("clean", wrong, "--table", name, "--out", str(tmp_path / "o3"))
    assert done.returncode == 3
    assert "s3cret-pw" not in done.stderr + done.stdout
    assert "Access denied" in done.stderr
    assert "Traceback" not in done.stderr


# -- write-back ----------------------------------------------------------------------------------

# CONTACTS: the write-back tests' contacts, the same as for PostgreSQL, SQLite and DuckDB.


@pytest.fixture(scope="module")
def run(mail_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("mysql-writeback")
    source = write_contacts(folder, CONTACTS, header=("id", "name", "email"))
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    result = listhygiene.clean(source, folder / "out", settings=settings, check_smtp=False)
    return result.out


def table_rows(table: str, key: str) -> dict[str, dict[str, Any]]:
    connection = _connect()
    try:
        import pymysql.cursors

        with connection.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(f"SELECT * FROM `{table}`")
            return {str(row[key]): row for row in cursor.fetchall()}
    finally:
        connection.close()


def outputs_by(run: str, key: str) -> dict[str, pd.Series]:
    table = pd.concat([pd.read_parquet(Path(run) / f"{s}.parquet") for s in STATUSES])
    return {str(row[key]): row for _, row in table.iterrows() if pd.notna(row[key])}


@pytest.mark.parametrize("scheme", ["mysql", "mariadb"])
def test_write_back_by_input_key_upserts_every_row_once(
    run: str, new_table: Callable[[str], str], scheme: str
) -> None:
    url = MYSQL_URL.replace("mysql://", f"{scheme}://", 1)
    table = new_table("lh_results")
    done = write_back(run, url, table, key="id")
    assert (done.written, done.skipped) == (len(CONTACTS), 0)
    written = table_rows(table, "id")
    expected = outputs_by(run, "id")
    assert set(written) == set(expected)
    for key, row in written.items():
        assert row["result_email"] == expected[key]["result_email"]
        assert row["status"] == expected[key]["status"]
        assert row["score"] == expected[key]["score"]  # DOUBLE: exactly, not FLOAT's 0.9499999
        assert bool(row["is_role"]) == bool(expected[key]["is_role"])
        assert json.loads(str(row["mx_records"])) == list(expected[key]["mx_records"])
    assert written["2"]["result_email"] == "bob@example.com"
    assert written["4"]["reason"] == "invalid_syntax"
    created = sql(f"SHOW CREATE TABLE `{table}`")[0][1]
    assert "ENGINE=InnoDB" in created
    assert re.search(r"`id` varchar\(768\)[^,]*utf8mb4_bin", created)

    # a rerun writes the same rows: nothing added, nothing changed
    again = write_back(run, url, table, key="id")
    assert again.written == len(CONTACTS)
    assert table_rows(table, "id") == written


def test_write_back_by_address_keeps_one_row_per_mailbox(
    run: str, new_table: Callable[[str], str]
) -> None:
    table = new_table("lh_addresses")
    done = write_back(run, MYSQL_URL, table)
    assert done.key == "result_email"
    assert done.skipped == 1
    addresses = {a for a in outputs_by(run, "result_email") if a}
    assert set(table_rows(table, "result_email")) == addresses
    assert len(addresses) == len(CONTACTS) - 2


def test_an_existing_table_gains_the_result_columns_and_keeps_its_own(
    run: str, new_table: Callable[[str], str]
) -> None:
    table = new_table("lh_crm")
    sql(f"CREATE TABLE `{table}` (id VARCHAR(10) PRIMARY KEY, owner TEXT) ENGINE=InnoDB")
    sql(f"INSERT INTO `{table}` VALUES ('1', 'sales'), ('2', 'support')")
    write_back(run, MYSQL_URL, table, key="id")
    written = table_rows(table, "id")
    assert written["1"]["owner"] == "sales"
    assert written["2"]["owner"] == "support"
    assert written["1"]["status"] == outputs_by(run, "id")["1"]["status"]
    assert len(written) == len(CONTACTS)


def test_tables_the_upsert_cannot_keep_its_promise_on_are_refused_before_writing(
    run: str, new_table: Callable[[str], str]
) -> None:
    no_key = new_table("lh_nokey")
    sql(f"CREATE TABLE `{no_key}` (id VARCHAR(10), owner TEXT) ENGINE=InnoDB")
    with pytest.raises(ConfigurationError, match="no primary key or unique constraint on 'id'"):
        write_back(run, MYSQL_URL, no_key, key="id")
    myisam = new_table("lh_myisam")
    sql(f"CREATE TABLE `{myisam}` (id VARCHAR(10) PRIMARY KEY) ENGINE=MyISAM")
    with pytest.raises(ConfigurationError, match="MyISAM engine, which has no transactions"):
        write_back(run, MYSQL_URL, myisam, key="id")
    assert table_rows(no_key, "id") == {}
    assert table_rows(myisam, "id") == {}
    with pytest.raises(StorageError, match="write-back to lh_results: Can't connect"):
        write_back(run, _URL.set(port=1).render_as_string(False), "lh_results", key="id")


def test_a_write_back_cut_short_keeps_whole_batches_and_a_rerun_completes_it(
    run: str, new_table: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch is one transaction, even when it is sent as several statements: a batch
    that fails leaves none of its rows, the batches before it stay, and running the write-back
    again writes everything."""
    monkeypatch.setattr(writeback, "MYSQL_STATEMENT_BYTES", 64)  # one INSERT a row
    folder = writeback.OutputFolder(run)
    files = {s: folder.final(writeback.status_file(s)) for s in writeback.STATUSES}
    batches = [
        [row["p0"] for row in rows]
        for rows, _ in writeback._rows(files, folder, "id", ["status"], 2)
        if rows
    ]
    # the second row of a batch is refused: the first one was inserted before it
    failing = next(i for i, keys in enumerate(batches) if len(keys) == 2)
    refused = batches[failing][1]
    table = new_table("lh_cut")
    sql(
        f"CREATE TABLE `{table}` (id VARCHAR(10) PRIMARY KEY, "
        f"CONSTRAINT refused CHECK (id <> '{refused}')) ENGINE=InnoDB"
    )
    with pytest.raises(StorageError, match=f"write-back to {table}: .*refused"):
        write_back(run, MYSQL_URL, table, key="id", batch_rows=2)
    kept = set(table_rows(table, "id"))
    assert kept == {key for keys in batches[:failing] for key in keys}
    assert batches[failing][0] not in kept

    sql(f"ALTER TABLE `{table}` DROP CONSTRAINT refused")
    done = write_back(run, MYSQL_URL, table, key="id", batch_rows=2)
    assert done.written == len(CONTACTS)
    assert set(table_rows(table, "id")) == {i for i, _, _ in CONTACTS}

"""Writing a run's results back to a warehouse table: PostgreSQL for real, SQLite and DuckDB."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

import listhygiene
import listhygiene.pipeline.run
from listhygiene.errors import ConfigurationError, StorageError
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.writeback import write_back
from listhygiene.sandbox import Sandbox
from tests.conftest import write_contacts

ROWS = [
    ("1", "Ann", "info@example.com"),
    ("2", "Bob", "BOB@Example.com "),  # the same mailbox as row 5, written differently
    ("3", "Cy", "nobody-here@nonexistent.invalid"),
    ("4", "Di", ""),  # no address: invalid_syntax, and no key when the key is the address
    ("5", "Ed", "bob@example.com"),
    ("6", "Flo", "not an address"),
]


@pytest.fixture(scope="module")
def run(mail_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("writeback")
    source = write_contacts(folder, ROWS, header=("id", "name", "email"))
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    result = listhygiene.clean(source, folder / "out", settings=settings, check_smtp=False)
    return result.out


def rows(url: str, table: str, key: str) -> dict[str, dict[str, object]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = conn.execute(sa.text(f"SELECT * FROM {table}")).mappings().all()
    engine.dispose()
    return {str(row[key]): dict(row) for row in found}


def outputs_by(run: str, key: str) -> dict[str, pd.Series]:
    frames = [pd.read_parquet(Path(run) / f"{s}.parquet") for s in STATUSES]
    table = pd.concat(frames)
    return {str(row[key]): row for _, row in table.iterrows() if pd.notna(row[key])}


def databases(tmp_path: Path, new_pg_database: Callable[[], str]) -> dict[str, str]:
    return {
        "sqlite": f"sqlite:///{tmp_path / 'crm.db'}",
        "duckdb": f"duckdb:///{tmp_path / 'crm.duckdb'}",
        "postgresql": new_pg_database(),
    }


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite", "duckdb"])
def test_write_back_by_input_key_upserts_every_row_once(
    run: str, tmp_path: Path, new_pg_database: Callable[[], str], dialect: str
) -> None:
    url = databases(tmp_path, new_pg_database)[dialect]
    done = write_back(run, url, "email_results", key="id")
    assert (done.written, done.skipped) == (len(ROWS), 0)
    written = rows(url, "email_results", "id")
    expected = outputs_by(run, "id")
    assert set(written) == set(expected)
    for key, row in written.items():
        # the input has its own email column: the verified address is result_email
        assert row["result_email"] == expected[key]["result_email"]
        assert row["status"] == expected[key]["status"]
        assert row["score"] == pytest.approx(expected[key]["score"])
        assert json.loads(str(row["mx_records"])) == list(expected[key]["mx_records"])
    assert written["2"]["result_email"] == "bob@example.com"
    assert written["4"]["reason"] == "invalid_syntax"

    # a rerun writes the same rows: nothing added, nothing changed
    again = write_back(run, url, "email_results", key="id")
    assert again.written == len(ROWS)
    assert rows(url, "email_results", "id") == written


def test_write_back_by_address_keeps_one_row_per_mailbox(
    run: str, tmp_path: Path, new_pg_database: Callable[[], str]
) -> None:
    url = databases(tmp_path, new_pg_database)["postgresql"]
    done = write_back(run, url, "verified_addresses")
    assert done.key == "result_email"
    # the blank cell has no address to key by; two spellings of bob are one mailbox
    assert done.skipped == 1
    addresses = {a for a in outputs_by(run, "result_email") if a}
    assert set(rows(url, "verified_addresses", "result_email")) == addresses
    assert len(addresses) == len(ROWS) - 2


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite", "duckdb"])
def test_an_existing_table_gains_the_result_columns_and_keeps_its_own(
    run: str, tmp_path: Path, new_pg_database: Callable[[], str], dialect: str
) -> None:
    url = databases(tmp_path, new_pg_database)[dialect]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE contacts (id TEXT PRIMARY KEY, owner TEXT)"))
        conn.execute(sa.text("INSERT INTO contacts VALUES ('1', 'sales'), ('2', 'support')"))
    engine.dispose()
    write_back(run, url, "contacts", key="id")
    written = rows(url, "contacts", "id")
    assert written["1"]["owner"] == "sales"
    assert written["2"]["owner"] == "support"
    assert written["1"]["status"] == outputs_by(run, "id")["1"]["status"]
    assert len(written) == len(ROWS)


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite", "duckdb"])
def test_a_table_without_a_unique_key_is_refused_before_writing(
    run: str, tmp_path: Path, new_pg_database: Callable[[], str], dialect: str
) -> None:
    url = databases(tmp_path, new_pg_database)[dialect]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE contacts (id TEXT, owner TEXT)"))
    engine.dispose()
    with pytest.raises(ConfigurationError, match="no primary key or unique constraint on 'id'"):
        write_back(run, url, "contacts", key="id")
    assert rows(url, "contacts", "id") == {}


@pytest.mark.parametrize(
    ("url", "key", "error", "message"),
    [
        ("mssql://db/crm", None, ConfigurationError, "mssql is not supported"),
        ("not a url", None, ConfigurationError, "is not a database URL"),
        ("sqlite:///{tmp}/x.db", "customer", ConfigurationError, "'customer' is not a column"),
    ],
)
def test_bad_targets_are_one_clear_error(
    run: str, tmp_path: Path, url: str, key: str | None, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        write_back(run, url.format(tmp=tmp_path), "results", key=key)


def test_a_folder_without_outputs_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not a run's output folder"):
        write_back(str(tmp_path), f"sqlite:///{tmp_path / 'x.db'}", "results")


def test_the_result_writes_itself_back(run: str, tmp_path: Path) -> None:
    result = listhygiene.pipeline.run.CleanResult(out=run, summary={})
    done = result.write_back(f"sqlite:///{tmp_path / 'crm.db'}", "results", key="id")
    assert done.written == len(ROWS)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``listhygiene`` as a user runs it."""
    command = [sys.executable, "-m", "listhygiene.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_the_cli_writes_back_after_publishing(mail_sandbox: Sandbox, tmp_path: Path) -> None:
    source = write_contacts(tmp_path, ROWS, header=("id", "name", "email"))
    url = f"sqlite:///{tmp_path / 'crm.db'}"
    env = {**os.environ, **mail_sandbox.engine_environment(), "LISTHYGIENE_HELO": "v.test"}
    clean = ["clean", str(source), "--no-smtp", "--out", str(tmp_path / "out"), "--json"]
    clean += ["--write-back", url, "--write-back-key", "id"]

    done = cli(*clean, "--write-back-table", "crm.results", env=env)
    # SQLite has no schema "crm": one line, the write-back's storage error (exit 1), after the
    # run published
    assert done.returncode == 1, done.stderr
    assert "write-back to crm.results" in done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "out" / "summary.json").exists()

    done = cli(*clean, "--write-back-table", "results", env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["write_back"]["written"] == len(ROWS)
    assert summary["write_back"]["key"] == "id"
    written = rows(url, "results", "id")
    assert sorted(written, key=int) == [i for i, _, _ in ROWS]


def test_write_back_options_go_together(tmp_path: Path) -> None:
    done = cli("clean", "x.csv", "--out", "o", "--write-back", "sqlite:///x.db")
    assert done.returncode == 2
    assert "--write-back and --write-back-table go together" in done.stderr

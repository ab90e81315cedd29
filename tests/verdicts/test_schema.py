"""The verdict store's schema on a real SQLite file and a real PostgreSQL server: a store at the
newest migration opens without Alembic, and one behind it is still migrated."""

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from listhygiene.db.migrate import alembic_config
from listhygiene.verdicts import VerdictStore
from listhygiene.verdicts.schema import HEAD_REVISION, VERSION_TABLE

MIGRATIONS = Path(__file__).parents[2] / "src" / "listhygiene" / "verdicts" / "migrations"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    return request.getfixturevalue("new_pg_database")()


def versions(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
            return [row[0] for row in rows]
    finally:
        engine.dispose()


def test_the_head_revision_named_in_code_is_the_newest_migration() -> None:
    # the fast path trusts HEAD_REVISION: a new migration that forgot to move it would be
    # skipped on every store already at the old head
    scripts = ScriptDirectory.from_config(alembic_config(MIGRATIONS))
    assert scripts.get_current_head() == HEAD_REVISION


def test_a_store_at_the_newest_migration_opens_without_importing_alembic(url: str) -> None:
    VerdictStore(url).close()  # created and migrated: this one needs Alembic
    assert versions(url) == [HEAD_REVISION]
    opened = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from listhygiene.verdicts import VerdictStore\n"
            f"VerdictStore({url!r}).close()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert opened.stdout.strip() == "[]"


def test_a_store_behind_the_newest_migration_is_migrated_when_opened(url: str) -> None:
    VerdictStore(url).close()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(MIGRATIONS, connection), "0004")
        assert "verdict_events" not in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert versions(url) == ["0004"]

    VerdictStore(url).close()

    assert versions(url) == [HEAD_REVISION]
    engine = sa.create_engine(url)
    try:
        assert "verdict_events" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()

"""``listhygiene keys create``: the key alone on stdout, stored so that it authenticates.

The lead registers the ``keys`` group on the main command; these tests call the group itself,
in process with click's runner and in a fresh interpreter as a user's shell would.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from listhygiene.cli.keys import PLANS, keys
from listhygiene.service.store import PLANS as STORE_PLANS
from listhygiene.service.store import Store

KEY = re.compile(r"lh_[A-Za-z0-9_-]{43}")


def create(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(keys, ["create", *args], env=env, catch_exceptions=False)


def test_create_prints_the_key_alone_and_it_authenticates(db_url: str) -> None:
    result = create("--db", db_url, "--name", "acme", "--credits", "25")
    assert result.exit_code == 0, result.stderr
    assert KEY.fullmatch(result.stdout.removesuffix("\n"))
    assert result.stdout.count("\n") == 1
    assert "not shown again" in result.stderr
    with Store(db_url) as store:
        row = store.authenticate(result.stdout.strip())
        assert row is not None
        assert (row.name, row.plan, row.credits_balance, row.credits_added) == (
            "acme",
            "professional",
            25,
            25,
        )


def test_create_takes_a_plan(db_url: str) -> None:
    result = create("--db", db_url, "--name", "small", "--credits", "0", "--plan", "free")
    assert result.exit_code == 0, result.stderr
    with Store(db_url) as store:
        row = store.authenticate(result.stdout.strip())
        assert row is not None
        assert row.plan == "free"


def test_create_in_a_fresh_interpreter(db_url: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from listhygiene.cli.keys import keys; keys()",
            "create",
            "--db",
            db_url,
            "--name",
            "shell",
            "--credits",
            "3",
            "--plan",
            "starter",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    assert KEY.fullmatch(lines[0])
    with Store(db_url) as store:
        row = store.authenticate(lines[0])
        assert row is not None
        assert (row.plan, row.credits_balance) == ("starter", 3)


def test_db_comes_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'from-env.db'}"
    result = create("--name", "env", "--credits", "1", env={"LISTHYGIENE_DB": url})
    assert result.exit_code == 0, result.stderr
    with Store(url) as store:
        assert store.authenticate(result.stdout.strip()) is not None


def test_default_db_is_listhygiene_db_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = create("--name", "here", "--credits", "1", env={"LISTHYGIENE_DB": None})
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "listhygiene.db").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--credits", "1"], "--name"),
        (["--name", "x"], "--credits"),
        (["--name", "x", "--credits", "-1"], "--credits"),
        (["--name", "x", "--credits", "1", "--plan", "gold"], "--plan"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = create("--db", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr


def test_an_unusable_database_is_a_clean_error(tmp_path: Path) -> None:
    result = create(
        "--db", f"sqlite:///{tmp_path / 'missing' / 'x.db'}", "--name", "x", "--credits", "1"
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "cannot use the database" in result.stderr
    assert "Traceback" not in result.stderr
    result = create(
        "--db", "postgresql://nobody:secret@127.0.0.1:1/x", "--name", "x", "--credits", "1"
    )
    assert result.exit_code == 1
    assert "secret" not in result.stderr


def test_every_command_has_an_example() -> None:
    assert "Example:" in (keys.help or "")
    for name, command in keys.commands.items():
        assert "Example:" in (command.help or ""), name


def test_plans_match_the_store() -> None:
    assert PLANS == STORE_PLANS


def test_disable_and_enable(db_url: str) -> None:
    runner = CliRunner()
    with Store(db_url) as store:
        key, row = store.create_key("cli", 5)
    disabled = runner.invoke(keys, ["disable", "--db", db_url, row.id])
    assert disabled.exit_code == 0, disabled.stderr
    assert f"key {row.id} disabled" in disabled.stderr
    with Store(db_url) as store:
        assert store.authenticate(key) is None
    enabled = runner.invoke(keys, ["enable", "--db", db_url, row.id])
    assert enabled.exit_code == 0, enabled.stderr
    with Store(db_url) as store:
        assert store.authenticate(key) is not None
    missing = runner.invoke(keys, ["disable", "--db", db_url, "nope"])
    assert missing.exit_code == 1
    assert "no key with id nope" in missing.stderr

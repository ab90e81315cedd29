"""The vendored role list and the user's own list changes (issue 19, item 3; docs/engine.md,
"Lists")."""

import asyncio
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from pydantic import ValidationError

from listhygiene.engine import Engine, EngineSettings
from listhygiene.engine.lists import ListsError, default_lists, lists_for
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Status

DATA = resources.files("listhygiene.engine").joinpath("data")


def test_the_role_list_is_the_maintained_one_with_its_licence() -> None:
    roles = lists_for(None).roles
    assert len(roles) >= 900
    # the vendored source's entries, and the project's own (RFC 2142 names among them)
    for local in ("noreply", "do-not-reply", "customersuccess", "postmaster", "hostmaster"):
        assert local in roles
    assert "customer-service" in roles  # only in role_local_parts_extra.txt
    head = DATA.joinpath("role_local_parts.txt").read_text("utf-8").splitlines()[0]
    assert "role-based-email-addresses" in head
    assert "MIT License" in DATA.joinpath("role_local_parts.LICENSE").read_text("utf-8")


def test_role_matching_ignores_case_and_tags() -> None:
    lists = lists_for(None)
    assert lists.is_role("NoReply")
    assert lists.is_role("sales+eu")
    assert not lists.is_role("jane.doe")


@pytest.fixture
def changes(tmp_path: Path) -> Path:
    (tmp_path / "role.txt").write_text("# ours\nfounders-desk\n-info\n", "utf-8")
    (tmp_path / "disposable.txt").write_text("throwaway-corp.test\n-mailinator.com\n", "utf-8")
    (tmp_path / "free.txt").write_text("neighbourhood-mail.test\n-gmail.com\n", "utf-8")
    return tmp_path


def test_a_lists_folder_adds_and_removes(changes: Path) -> None:
    lists = lists_for(changes)
    assert lists.is_role("founders-desk")
    assert not lists.is_role("info")
    assert lists.is_disposable("throwaway-corp.test")
    assert lists.is_disposable("eu.throwaway-corp.test")  # subdomains too
    assert not lists.is_disposable("mailinator.com")
    assert lists.is_free("neighbourhood-mail.test")
    assert not lists.is_free("gmail.com")
    # the built-in lists are untouched
    assert lists_for(None).is_role("info")
    assert lists_for(None).is_disposable("mailinator.com")


def test_a_changed_file_is_read_again(changes: Path) -> None:
    assert not lists_for(changes).is_role("night-shift")
    path = changes / "role.txt"
    path.write_text(path.read_text("utf-8") + "night-shift\n", "utf-8")
    import os

    os.utime(path, (1, 2_000_000_000))  # a new modification time whatever the clock's grain
    assert lists_for(changes).is_role("night-shift")


def test_the_environment_variable_reaches_callers_without_settings(
    changes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LISTHYGIENE_LISTS_DIR", str(changes))
    assert not default_lists().is_role("info")
    assert EngineSettings().lists_dir == str(changes)


def test_a_missing_folder_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ListsError, match="not a directory"):
        lists_for(tmp_path / "nope")
    with pytest.raises(ValidationError, match="not a directory"):
        EngineSettings(lists_dir=str(tmp_path / "nope"))


def test_the_cli_says_so_in_one_line_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "listhygiene.cli",
            "verify",
            "--no-smtp",
            "--lists-dir",
            str(tmp_path / "nope"),
            "a@b.test",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "not a directory" in done.stderr
    assert "Traceback" not in done.stderr


WORLD = {
    "domains": {
        "acme.test": {
            "mx": [{"preference": 10, "host": "mx.acme.test"}],
            "mailboxes": ["info", "founders-desk", "ann"],
        },
        "throwaway-corp.test": {
            "mx": [{"preference": 10, "host": "mx.acme.test"}],
            "mailboxes": ["ann"],
        },
    },
    "hosts": {"mx.acme.test": {}},
}


def test_the_engine_decides_with_the_users_lists(changes: Path) -> None:
    emails = [
        "info@acme.test",
        "founders-desk@acme.test",
        "ann@acme.test",
        "ann@throwaway-corp.test",
    ]
    with Sandbox(WORLD) as sandbox:

        async def run(**extra: str) -> dict[str, Status]:
            engine = Engine(sandbox.engine_settings(helo="verifier.test", **extra))
            return {r.email: r.status async for r in engine.verify_many(emails)}

        built_in = asyncio.run(run())
        changed = asyncio.run(run(lists_dir=str(changes)))
    assert built_in == {
        "info@acme.test": Status.ROLE,
        "founders-desk@acme.test": Status.VALID,
        "ann@acme.test": Status.VALID,
        "ann@throwaway-corp.test": Status.VALID,
    }
    assert changed == {
        "info@acme.test": Status.VALID,
        "founders-desk@acme.test": Status.ROLE,
        "ann@acme.test": Status.VALID,
        "ann@throwaway-corp.test": Status.DISPOSABLE,
    }


def test_the_builtin_role_list_leaves_names_of_ordinary_mailboxes_out() -> None:
    # the vendored list has user, test, demo and nobody; role_local_parts_extra.txt takes them out

    builtin = lists_for(None)
    for person in ("user", "test", "demo", "nobody", "someone"):
        assert not builtin.is_role(person), person
    for function in ("info", "team", "hello", "no-reply", "postmaster", "sales+eu"):
        assert builtin.is_role(function), function
    assert len(builtin.roles) > 1000

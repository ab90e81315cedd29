"""``clean`` with a verdict store (PRODUCT.md, "Verdict store"), through the real command and the
sandbox: the second run of a list reuses what is fresh and opens no SMTP session for it; stale,
``unknown`` and DNS-only verdicts are verified again; a killed run's verdicts are kept; a changed
world shows in ``changed.parquet``; a remote backend pays only for what it verifies."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.clients import ClientSettings
from listhygiene.engine import Engine
from listhygiene.pipeline.backends.remote import FormBBackend
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene.verdicts import VerdictStore
from tests.conftest import write_contacts
from tests.service.live import LiveServer

# a hang guard: each test runs the CLI several times over the SMTP sandbox (minutes when busy)
pytestmark = pytest.mark.timeout(400)


def mx(host: str) -> list[dict[str, Any]]:
    return [{"preference": 10, "host": host}]


def world(*, alice: bool = True) -> dict[str, Any]:
    return {
        "domains": {
            "acme.test": {
                "mx": mx("mx.acme.test"),
                "mailboxes": ["bob", "info", *(["alice"] if alice else [])],
                "full": ["carol"],
            },
            "grey.test": {"mx": mx("mx.grey.test"), "mailboxes": ["gina"]},
            "slow.test": {"mx": mx("mx.slow.test"), "mailboxes": [f"p{i}" for i in range(40)]},
        },
        "hosts": {
            "mx.acme.test": {},
            "mx.grey.test": {"greylist_delay_ms": 60_000},
            "mx.slow.test": {"latency_ms": 150, "max_rcpt_per_connection": 2},
        },
    }


CSV = """id,Email
1,alice@acme.test
2,ALICE@acme.test
3,bob@acme.test
4,info@acme.test
5,carol@acme.test
6,nobody@acme.test
7,gina@grey.test
8,
"""
DISTINCT = 6  # alice twice, and the blank row is no address


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = world()


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    return write_contacts(tmp_path, CSV)


def environment(sandbox: Sandbox, store: str) -> dict[str, str]:
    return {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_RETRY_DELAYS": "",
        "LISTHYGIENE_SMTP_TIMEOUT": "3",
        "LISTHYGIENE_VERDICTS": store,
    }


def clean(env: dict[str, str], source: Path, out: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "listhygiene.cli",
            "clean",
            str(source),
            "--out",
            str(out),
            *args,
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def connections(sandbox: Sandbox) -> int:
    return sum(sandbox.stats(h).connections for h in ("mx.acme.test", "mx.grey.test"))


def statuses(out: Path) -> dict[str, str]:
    found = {}
    for path in out.glob("*.parquet"):
        if path.name != "changed.parquet":
            for row in pq.read_table(path, columns=["id", "status"]).to_pylist():
                found[str(row["id"])] = row["status"]
    return found


def test_a_second_run_reuses_fresh_verdicts_without_smtp_or_dns(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    env = environment(sandbox, f"sqlite:///{tmp_path / 'verdicts.sqlite'}")
    first = clean(env, contacts, tmp_path / "first")
    assert first["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}
    acme, queries = sandbox.stats("mx.acme.test").connections, sandbox.dns_queries
    second = clean(env, contacts, tmp_path / "second")
    # every address but the greylisted one (unknown: never reused) comes from the store
    assert second["verdicts"] == {"reused": DISTINCT - 1, "verified": 1, "changed": 0}
    assert statuses(tmp_path / "second") == statuses(tmp_path / "first")
    assert sandbox.stats("mx.acme.test").connections == acme  # no session for acme.test
    asked = sandbox.dns_queries - queries
    assert second["credits"]["used"] == 0
    assert second["verdict_store"]["credits_saved"] == first["credits"]["used"]
    assert (tmp_path / "second" / "changed.parquet").exists()
    assert 'id="verdicts"' in (tmp_path / "second" / "report.html").read_text()
    # what the second run asked DNS is exactly what the greylisted address alone needs
    alone = tmp_path / "alone.csv"
    alone.write_text("Email\ngina@grey.test\n")
    queries = sandbox.dns_queries
    clean({**env, "LISTHYGIENE_VERDICTS": "none"}, alone, tmp_path / "alone")
    assert asked == sandbox.dns_queries - queries
    # --fresh verifies everything again, and says nothing changed
    again = clean(env, contacts, tmp_path / "third", "--fresh")
    assert again["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}


def test_stale_unknown_and_dns_only_verdicts_are_verified_again(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    env = environment(sandbox, f"sqlite:///{tmp_path / 'verdicts.sqlite'}")
    dns_only = clean(env, contacts, tmp_path / "dns", "--no-smtp")
    assert dns_only["verdicts"]["verified"] == DISTINCT
    # a DNS-only verdict never stands in for an SMTP one
    smtp = clean(env, contacts, tmp_path / "smtp")
    assert smtp["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 2}
    # ... but an SMTP verdict serves a DNS-only run
    assert clean(env, contacts, tmp_path / "dns2", "--no-smtp")["verdicts"]["reused"] == DISTINCT
    time.sleep(1.5)
    # valid verdicts older than a second are stale (alice, bob); the rest (invalid, risky, role)
    # are not; gina's stored verdict is DNS-only
    aged = clean(env, contacts, tmp_path / "aged", "--max-age", "valid=1s")
    assert aged["verdicts"] == {"reused": 3, "verified": 3, "changed": 0}


def test_changed_rows_after_the_world_changed(contacts: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    with Sandbox(world(alice=True)) as before:
        clean(environment(before, store), contacts, tmp_path / "before")
    with Sandbox(world(alice=False)) as after:  # alice's mailbox was deleted
        summary = clean(environment(after, store), contacts, tmp_path / "after", "--fresh")
    assert summary["verdicts"]["changed"] == 1  # one address ...
    assert summary["verdict_store"]["transitions"] == {"valid->invalid": 1}
    assert summary["verdict_store"]["changed_file"] == {"path": "changed.parquet", "rows": 2}
    report = (tmp_path / "after" / "report.html").read_text()
    assert "valid → invalid" in report
    changed = pq.read_table(tmp_path / "after" / "changed.parquet").to_pylist()
    assert sorted(r["id"] for r in changed) == ["1", "2"]  # ... on two rows
    for row in changed:
        assert (row["previous_status"], row["status"], row["reason"]) == (
            "valid",
            "invalid",
            "mailbox_not_found",
        )
        assert row["previous_checked_at"] is not None
    assert statuses(tmp_path / "after")["3"] == "valid"  # bob unchanged, not listed


def test_a_killed_run_keeps_its_verdicts(sandbox: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "slow.csv"
    path.write_text("Email\n" + "".join(f"p{i}@slow.test\n" for i in range(40)))
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    env = environment(sandbox, store)
    out = tmp_path / "out"
    run = subprocess.Popen(
        [sys.executable, "-m", "listhygiene.cli", "clean", str(path), "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180  # slow.test answers slowly: minutes on a busy machine
    kept = 0
    while time.monotonic() < deadline and kept < 4:
        time.sleep(0.1)
        if Path(store.removeprefix("sqlite:///")).exists():
            with VerdictStore(store) as opened:
                kept = opened.stats()["verdicts"]
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    assert 4 <= kept < 40, "kill the run in the middle"
    # another output folder (no work folder to resume): the store alone spares the work
    summary = clean(env, path, tmp_path / "elsewhere")
    assert summary["verdicts"]["reused"] >= kept
    assert summary["verdicts"]["reused"] + summary["verdicts"]["verified"] == 40


def test_forget_makes_the_next_run_verify_the_address(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    env = environment(sandbox, store)
    clean(env, contacts, tmp_path / "first")
    forgot = subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "verdicts", "forget", " Bob@ACME.test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert forgot.returncode == 0, forgot.stderr
    assert forgot.stderr.startswith("1 of 1")
    summary = clean(env, contacts, tmp_path / "second")
    assert summary["verdicts"] == {"reused": DISTINCT - 2, "verified": 2, "changed": 0}


def test_the_default_store_is_in_the_users_cache(
    sandbox: Sandbox, contacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LISTHYGIENE_VERDICTS")
    settings = sandbox.engine_settings(
        helo="verifier.test",
        retry_delays=(),
    )
    listhygiene.clean(contacts, tmp_path / "first", settings=settings)
    assert (tmp_path / "cache" / "listhygiene" / "verdicts.sqlite").exists()
    second = listhygiene.clean(contacts, tmp_path / "second", settings=settings)
    assert second.summary["verdicts"]["reused"] == DISTINCT - 1
    off = listhygiene.clean(contacts, tmp_path / "third", settings=settings, verdicts="none")
    assert off.summary["verdicts"] == {"reused": 0, "verified": DISTINCT, "changed": 0}
    assert not (tmp_path / "third" / "changed.parquet").exists()


def test_a_remote_backend_pays_only_for_what_it_verifies(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    settings = sandbox.engine_settings(
        helo="verifier.test",
        smtp_timeout=3,
        retry_delays=(),
    )
    with (
        Store(f"sqlite:///{tmp_path / 'service.db'}") as service_store,
        LiveServer(create_app(service_store, Engine(settings))) as url,
        VerdictStore(f"sqlite:///{tmp_path / 'verdicts.sqlite'}") as verdicts,
    ):
        key, row = service_store.create_key("remote", 100)

        def backend() -> FormBBackend:
            client = ClientSettings(base_url=f"{url}/b/v1", api_key=key)
            return FormBBackend(client, poll_seconds=0.1)

        first = listhygiene.clean(
            contacts, tmp_path / "first", backend=backend(), verdicts=verdicts
        )
        paid = service_store.credits(row.id).consumed
        assert paid == first.summary["credits"]["used"] > 0
        second = listhygiene.clean(
            contacts, tmp_path / "second", backend=backend(), verdicts=verdicts
        )
        assert second.summary["verdicts"] == {"reused": DISTINCT - 1, "verified": 1, "changed": 0}
        assert service_store.credits(row.id).consumed == paid  # the unknown one is free
        assert second.summary["credits"]["used"] == 0


def test_a_run_lets_go_of_the_column_copy_once_its_lookups_are_done(
    sandbox: Sandbox, contacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the copy (in memory, or its mapped pages) counts in the run's memory: it is not held
    # through verifying, writing and the checks, nor after the run (a store given by the
    # caller outlives it)
    from listhygiene.pipeline.backends import LocalBackend

    settings = sandbox.engine_settings(helo="verifier.test", retry_delays=())
    held_while_verifying: list[bool] = []
    submit = LocalBackend.submit

    with VerdictStore(f"sqlite:///{tmp_path / 'verdicts.sqlite'}") as verdicts:

        async def watched(self: LocalBackend, *args: Any, **kwargs: Any) -> Any:
            held_while_verifying.append(verdicts._copy is not None)
            return await submit(self, *args, **kwargs)

        monkeypatch.setattr(LocalBackend, "submit", watched)
        copy = tmp_path / "verdicts.sqlite.columns"
        for run in ("first", "second", "third"):  # the first makes the copy, the next map it
            done = listhygiene.clean(contacts, tmp_path / run, settings=settings, verdicts=verdicts)
            assert str(copy) not in Path("/proc/self/maps").read_text()
        assert done.summary["verdicts"]["reused"] == DISTINCT - 1
        assert copy.exists()
    # one job a run (the first: every address; then the greylisted one, never reused)
    assert held_while_verifying == [False, False, False]


def test_a_stores_first_run_leaves_it_a_column_copy(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    # made after the run's last save (while it writes), so that the next run and the estimates
    # between look up through it; but not for a store many times the run's size
    from listhygiene.verdicts.column_copy import ColumnCopy
    from tests.verdicts.test_store import mixed

    settings = sandbox.engine_settings(helo="verifier.test", retry_delays=())
    first = tmp_path / "first.sqlite"
    listhygiene.clean(
        contacts, tmp_path / "first", settings=settings, verdicts=f"sqlite:///{first}"
    )
    made = ColumnCopy.open(first.with_name("first.sqlite.columns"))
    assert made is not None
    with VerdictStore(f"sqlite:///{first}") as store:
        assert made.table.num_rows == sum(store.stats()["by_status"].values())

    big = tmp_path / "big.sqlite"
    with VerdictStore(f"sqlite:///{big}") as store:
        store.save(mixed(100), backend="local", checked_at=time.time())
    listhygiene.clean(contacts, tmp_path / "big", settings=settings, verdicts=f"sqlite:///{big}")
    assert not big.with_name("big.sqlite.columns").exists()  # 105 > 4 x 6 looked up

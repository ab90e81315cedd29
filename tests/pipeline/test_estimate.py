"""``listhygiene clean --estimate`` and ``listhygiene.estimate()`` (PRODUCT.md, "Host self-audit
and estimates"): what a run would do, verifying nothing. Run as a user runs them: the real
command in a subprocess, the sandbox as the mail world (which must see no query at all), a real
verdict store filled by a real ``clean``, and a real ``listhygiene serve`` process for the credit
endpoints of form A and form B."""

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import listhygiene
from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from tests.conftest import sandbox_settings, write_contacts
from tests.pipeline.test_exit_codes import run as cli
from tests.service.live import Server, a, b, free_port


def mx(host: str) -> list[dict[str, Any]]:
    return [{"preference": 10, "host": host}]


WORLD = {
    "domains": {
        "acme.test": {"mx": mx("mx.acme.test"), "mailboxes": ["alice", "bob", "info"]},
        "gmail.com": {"mx": mx("mx.gmail.com"), "mailboxes": ["ann"]},
        "broken.test": {"dns": "servfail"},
    },
    "hosts": {"mx.acme.test": {}, "mx.gmail.com": {}},
}
#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD

CSV = """id,name,Email
1,Alice,alice@acme.test
2,Alice again, ALICE@Acme.Test
3,Bob,bob@acme.test
4,Nobody,nobody@acme.test
5,Info,info@acme.test
6,Ann,ann@gmail.com
7,Ann again,Ann <ann@GMail.com>
8,Gone,x@gone.test
9,Broken,x@broken.test
10,Blank,
11,Typo,alice@@acme.test
12,Nothing,N/A
"""
ROWS = 12
EMPTY = 2  # the blank cell and N/A
#: alice, bob, nobody, info @acme.test; ann@gmail.com; x@gone.test; x@broken.test; the typo
DISTINCT = 8
INVALID_SYNTAX = 1
#: x@broken.test ends unknown (SERVFAIL): never kept, never reused
UNKNOWN = 1


@pytest.fixture
def contacts(tmp_path: Path) -> Path:
    return write_contacts(tmp_path, CSV)


@pytest.fixture
def env(sandbox: Sandbox) -> dict[str, str]:
    """The sandbox's engine settings, as a user's environment gives them (as test_exit_codes)."""
    return {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_RETRY_DELAYS": "",
        "LISTHYGIENE_SMTP_TIMEOUT": "2",
    }


def quiet(sandbox: Sandbox) -> tuple[int, int, int]:
    """What the sandbox has been asked so far: DNS queries and SMTP connections."""
    return (
        sandbox.dns_queries,
        sandbox.stats("mx.acme.test").connections,
        sandbox.stats("mx.gmail.com").connections,
    )


# -- the command line, with the local engine ---------------------------------------------------


def test_the_cli_estimates_in_plain_words_and_json_verifying_nothing(
    sandbox: Sandbox, contacts: Path, env: dict[str, str], tmp_path: Path
) -> None:
    before = quiet(sandbox)
    plain = cli(env, str(contacts), "--estimate", "--verdicts", "none")
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert lines[0] == f"{contacts} (column Email): an estimate, nothing was verified"
    assert lines[1].split()[:2] == ["rows", "12"]
    assert "2 without an address" in lines[1]
    assert lines[2].split()[:3] == ["distinct", "addresses", "8"]
    assert "1 invalid by syntax" in lines[2]
    assert "no verdict store" in lines[3]
    assert lines[4].split()[:4] == ["left", "to", "verify", "8"]
    assert "the local engine charges none" in lines[5]
    assert lines[6].startswith("  time (estimate)")
    assert "4 domains" in lines[6]

    given = cli(env, str(contacts), "--estimate", "--json", "--verdicts", "none")
    assert given.returncode == 0, given.stderr
    found = json.loads(given.stdout)  # one object, nothing else on stdout
    assert found["estimate"] is True
    assert found["input"] == {"name": str(contacts), "kind": "csv", "email_column": "Email"}
    assert (found["rows"], found["empty_email"], found["distinct"]) == (ROWS, EMPTY, DISTINCT)
    assert (found["invalid_syntax"], found["reused"], found["to_verify"]) == (
        INVALID_SYNTAX,
        0,
        DISTINCT,
    )
    assert found["credits"] is None
    assert found["verdict_store"] is None
    time = found["time"]
    assert time["check_smtp"] is True
    # the typo is not verified; acme.test has 4 addresses, the three other domains one each
    assert (time["domains"], time["addresses"], time["sessions"]) == (4, 7, 4)
    assert time["recognised_domains"] == 1  # gmail.com, by its name: Google's budget
    assert time["providers"]["google"]["addresses"] == 1
    assert time["providers"]["own_hosts"]["domains"] == 3
    assert time["seconds"] > 0

    no_smtp = json.loads(cli(env, str(contacts), "--estimate", "--json", "--no-smtp").stdout)
    assert no_smtp["check_smtp"] is False
    assert (no_smtp["time"]["limited_by"], no_smtp["time"]["sessions"]) == ("dns", 0)

    assert quiet(sandbox) == before  # no DNS query, no SMTP connection: nothing verified
    assert list(tmp_path.iterdir()) == [contacts]  # and nothing written


def test_out_is_needed_without_estimate(contacts: Path, env: dict[str, str]) -> None:
    done = cli(env, str(contacts))
    assert done.returncode == 2
    assert "Missing option '--out' (or give --estimate)" in done.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "No such file"), ("id,name\n1,Ann\n2,Bob\n", "email column")],
    ids=["missing file", "no email column"],
)
def test_an_unreadable_input_exits_3(
    tmp_path: Path, env: dict[str, str], content: str | None, expected: str
) -> None:
    path = tmp_path / "contacts.csv"
    if content is not None:
        path.write_text(content)
    done = cli(env, str(path), "--estimate", "--json")
    assert done.returncode == 3, done.stderr
    error = json.loads(done.stdout)["error"]
    assert (error["exit_code"], error["kind"]) == (3, "input")
    assert expected.lower() in error["message"].lower()


# -- the verdict store: the estimate says what the next run does ------------------------------


def test_an_estimate_counts_what_the_run_then_does(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    """Before each run, the estimate's ``reused`` and ``to_verify`` are the run's
    ``verdicts``; a store of an SMTP run serves a run without SMTP too; the store's own
    knowledge of a domain's mail provider paces the time estimate."""
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    settings = sandbox_settings(sandbox)

    def estimate(**options: Any) -> Any:
        return listhygiene.estimate(contacts, settings=settings, verdicts=store, **options)

    def run(out: str) -> dict[str, Any]:
        return listhygiene.clean(
            contacts, tmp_path / out, settings=settings, verdicts=store
        ).summary

    first = estimate()
    assert (first.rows, first.empty, first.distinct, first.reused, first.to_verify) == (
        ROWS,
        EMPTY,
        DISTINCT,
        0,
        DISTINCT,
    )
    assert first.verdict_store == store
    summary = run("first")
    assert summary["addresses"]["distinct"] == first.distinct
    assert summary["rows"]["empty_email"] == first.empty
    assert summary["verdicts"] == {"reused": 0, "verified": first.to_verify, "changed": 0}

    queries = sandbox.dns_queries
    second = estimate()
    assert sandbox.dns_queries == queries
    assert (second.reused, second.to_verify) == (DISTINCT - UNKNOWN, UNKNOWN)
    assert second.time.domains == 1  # broken.test alone is left
    assert estimate(check_smtp=False).reused == DISTINCT - UNKNOWN  # SMTP verdicts serve both
    again = run("second")
    assert again["verdicts"] == {
        "reused": second.reused,
        "verified": second.to_verify,
        "changed": 0,
    }

    fresh = estimate(fresh=True)
    assert (fresh.reused, fresh.to_verify) == (0, DISTINCT)
    # what the store learnt of each domain: acme.test and gmail.com (mx.gmail.com here: the
    # sandbox's own host) are self-hosted, which wins over gmail.com's name
    assert fresh.time.recognised == 2
    assert "google" not in fresh.time.providers
    assert fresh.time.providers["own_hosts"].domains == 4


def test_a_verdict_without_smtp_is_reused_only_without_smtp(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    settings = sandbox_settings(sandbox)
    listhygiene.clean(
        contacts, tmp_path / "out", settings=settings, verdicts=store, check_smtp=False
    )
    without = listhygiene.estimate(contacts, settings=settings, verdicts=store, check_smtp=False)
    with_smtp = listhygiene.estimate(contacts, settings=settings, verdicts=store)
    assert without.reused == DISTINCT - UNKNOWN
    # with SMTP only the verdicts reached before it stand: the typo and x@gone.test
    assert with_smtp.reused == 2
    assert with_smtp.to_verify == DISTINCT - 2


def test_a_misspelt_option_is_a_type_error(contacts: Path) -> None:
    with pytest.raises(TypeError, match="estimate\\(\\) got an unexpected keyword argument"):
        listhygiene.estimate(contacts, check_smpt=False)  # type: ignore[call-arg]


# -- remote backends: the credit endpoints of a real served process ---------------------------


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``listhygiene serve`` on a SQLite store, verifying against the sandbox: (server, db)."""
    folder = tmp_path_factory.mktemp("serve")
    db = f"sqlite:///{folder / 'service.db'}"
    Store(db).close()  # migrated before the server and the keys use it
    server = Server(db, sandbox, args=(), log=folder / "server.log")
    try:
        yield server, db
    finally:
        server.stop()


def key_with(db: str, credits: int) -> str:
    with Store(db) as store:
        return store.create_key("estimate", credits)[0]


@pytest.mark.parametrize("form", ["a", "b"])
def test_a_remote_estimate_says_the_credits_and_balance_and_spends_nothing(
    served: Any, contacts: Path, env: dict[str, str], form: str
) -> None:
    server, db = served
    short, plenty = key_with(db, 5), key_with(db, 1_000)
    base = f"{server.root}/{form}/v1"
    args = [str(contacts), "--estimate", "--backend", f"form-{form}", "--base-url", base]

    def balance(key: str) -> int:
        with httpx.Client(timeout=30) as client:
            if form == "a":
                answer = client.get(f"{base}/credits", headers=a(key)).json()
                return int(answer["data"]["credits_balance"])
            return int(client.get(f"{base}/credits", headers=b(key)).json()["available"])

    done = cli({**env, "LISTHYGIENE_API_KEY": short}, *args, "--json", "--verdicts", "none")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["backend"] == f"form-{form}"
    assert found["credits"] == {"needed": DISTINCT, "balance": 5, "enough": False}

    plain = cli({**env, "LISTHYGIENE_API_KEY": plenty}, *args, "--verdicts", "none")
    assert plain.returncode == 0, plain.stderr
    assert "balance 1,000: enough" in plain.stdout
    assert f"on the form-{form} backend" in plain.stdout
    assert (balance(short), balance(plenty)) == (5, 1_000)  # nothing was spent


def test_a_remote_estimate_asks_credits_only_for_what_the_store_leaves(
    sandbox: Sandbox, served: Any, contacts: Path, env: dict[str, str], tmp_path: Path
) -> None:
    server, db = served
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    listhygiene.clean(
        contacts, tmp_path / "out", settings=sandbox_settings(sandbox), verdicts=store
    )
    done = cli(
        {**env, "LISTHYGIENE_API_KEY": key_with(db, 3)},
        *(str(contacts), "--estimate", "--json", "--verdicts", store),
        *("--backend", "form-b", "--base-url", f"{server.root}/b/v1"),
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["reused"], found["to_verify"]) == (DISTINCT - UNKNOWN, UNKNOWN)
    assert found["credits"] == {"needed": UNKNOWN, "balance": 3, "enough": True}


@pytest.mark.parametrize("problem", ["wrong key", "unreachable"])
def test_a_backend_that_refuses_exits_4(
    served: Any, contacts: Path, env: dict[str, str], problem: str
) -> None:
    server, _ = served
    root = server.root if problem == "wrong key" else f"http://127.0.0.1:{free_port()}"
    done = cli(
        {**env, "LISTHYGIENE_API_KEY": "lh_not_a_key"},
        *(str(contacts), "--estimate", "--json", "--backend", "form-a"),
        *("--base-url", f"{root}/a/v1"),
    )
    assert done.returncode == 4, done.stderr
    error = json.loads(done.stdout)["error"]
    assert (error["exit_code"], error["kind"]) == (4, "backend")
    assert error["message"].startswith("the form-a service at ")

"""What the verdict store gives back (issue 28): every final verdict, with every column.

PRODUCT.md, "Verdict store": a verdict the engine reached before SMTP (syntax, no mail server,
disposable) is final for a run with SMTP too, so a rerun asks DNS and the mail hosts nothing
for it; and a reused verdict's row is the row a fresh verification gives.
"""

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.pipeline import STATUSES, status_file
from listhygiene.sandbox import Sandbox
from tests.conftest import sandbox_settings, write_contacts

pytestmark = pytest.mark.timeout(300)

SANDBOX_WORLD: dict[str, Any] = {
    "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["ann"]},
        "gmail.com": {
            "mx": [{"preference": 5, "host": "gmail-smtp-in.l.google.com"}],
            "mailboxes": ["bea"],
        },
        "nomail.test": {"null_mx": True},
        "mailinator.com": {
            "mx": [{"preference": 10, "host": "mail.mailinator.com"}],
            "catch_all": True,
        },
    },
    "hosts": {"mx.acme.test": {}, "gmail-smtp-in.l.google.com": {}, "mail.mailinator.com": {}},
}

#: Decided before SMTP: a bad syntax, a domain without mail server, a disposable domain.
BEFORE_SMTP = ["not-an-address", "cy@nomail.test", "dee@mailinator.com"]
#: Decided by SMTP.
PROBED = ["ann@acme.test", "bea@gmail.com", "nobody@acme.test"]


def contacts(folder: Path, emails: list[str]) -> Path:
    return write_contacts(folder, list(enumerate(emails, 1)))


def run(sandbox: Sandbox, source: Path, out: Path, store: str, **options: Any) -> Any:
    settings = sandbox_settings(sandbox)
    return listhygiene.clean(source, out, settings=settings, verdicts=store, **options)


def smtp_connections(sandbox: Sandbox) -> int:
    hosts = ("mx.acme.test", "gmail-smtp-in.l.google.com", "mail.mailinator.com")
    return sum(sandbox.stats(host).connections for host in hosts)


def rows_by_id(out: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for status in STATUSES:
        for row in pq.read_table(out / status_file(status)).to_pylist():
            found[row["id"]] = row
    return found


def test_a_verdict_reached_before_smtp_stands_in_for_a_run_with_smtp(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    source = contacts(tmp_path, BEFORE_SMTP + PROBED)
    without = run(sandbox, source, tmp_path / "no-smtp", store, check_smtp=False)
    assert without.summary["verdicts"]["verified"] == 6

    # with SMTP: the three final verdicts are reused, the three a mailbox decides are not (and
    # nobody@acme.test, valid as far as DNS could tell, turns out not to exist)
    with_smtp = run(sandbox, source, tmp_path / "smtp", store)
    assert with_smtp.summary["verdicts"] == {"reused": 3, "verified": 3, "changed": 1}
    statuses = {row["email"]: row["status"] for row in rows_by_id(tmp_path / "smtp").values()}
    assert [statuses[e] for e in BEFORE_SMTP] == ["invalid", "invalid", "disposable"]

    # everything is final now: the rerun asks DNS nothing and opens no SMTP session
    queries, connections = sandbox.dns_queries, smtp_connections(sandbox)
    again = run(sandbox, source, tmp_path / "again", store)
    assert again.summary["verdicts"] == {"reused": 6, "verified": 0, "changed": 0}
    assert sandbox.dns_queries == queries
    assert smtp_connections(sandbox) == connections


def test_a_reused_verdict_gives_the_row_a_fresh_verification_gives(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    source = contacts(tmp_path, BEFORE_SMTP + PROBED)
    extra = ["suggestion", "mx_provider"]
    cold = run(sandbox, source, tmp_path / "cold", store, extra_columns=extra)
    warm = run(sandbox, source, tmp_path / "warm", store, extra_columns=extra)
    assert warm.summary["verdicts"]["reused"] == 6
    fresh, reused = rows_by_id(tmp_path / "cold"), rows_by_id(tmp_path / "warm")
    assert fresh.keys() == reused.keys()
    assert fresh["5"]["mx_provider"] == "google"  # bea@gmail.com
    for row_id, row in fresh.items():
        # the one column that differs: this run paid nothing for what it reused
        assert reused[row_id] == {**row, "credits_used": 0}, row_id
    assert warm.summary["mx_providers"] == cold.summary["mx_providers"]

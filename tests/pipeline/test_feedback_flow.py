"""The whole feedback flow as a user runs it (PRODUCT.md, "Feedback"; docs/feedback.md): the real
``listhygiene`` command in subprocesses, the sample world's DNS and SMTP, a real SQLite store.

Clean the sample CRM export into a store; age its verdicts three days (as if the list had been
cleaned then); ``feedback add`` the sample exports of five email services, dated just now, and
one bounce older than the verdicts; clean again, and read what came out.
"""

import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from listhygiene.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_data"))
import make_feedback  # noqa: E402

CRM = ROOT / "sample_data" / "crm_export.csv"
#: A valid address whose hard bounce is older than its verdict: no effect.
STALE_BOUNCE = "aditya.banerjee@meridian-capital.test"
DAYS_AGO = 3


def listhygiene(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def flow(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("feedback")
    database = folder / "verdicts.sqlite"
    env = {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_VERDICTS": f"sqlite:///{database}",
    }
    first = listhygiene(env, "clean", str(CRM), "--out", str(folder / "first"), "--json")
    assert first.returncode == 0, first.stderr
    # the list was cleaned three days ago: the store's verdicts are that old (its column copy,
    # which holds the times too, goes: the next run makes another)
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE verdicts SET checked_at = checked_at - ?", (DAYS_AGO * 86400,))
    Path(f"{database}.columns").unlink(missing_ok=True)
    exports = make_feedback.write(folder / "events", base=datetime.now(UTC))
    stale = folder / "events" / "stale.csv"
    old = (datetime.now(UTC) - timedelta(days=DAYS_AGO + 1)).isoformat()
    stale.write_text(f"email,event,at,bounce_type\n{STALE_BOUNCE},bounced,{old},hard\n")
    added = listhygiene(env, "feedback", "add", *map(str, exports.values()), str(stale), "--json")
    again = listhygiene(env, "feedback", "add", str(exports["sendgrid"]), "--json")
    time.sleep(0.01)  # every event is now older than the second run
    second = listhygiene(env, "clean", str(CRM), "--out", str(folder / "second"), "--json")
    assert second.returncode == 0, second.stderr
    rows = [
        row
        for path in sorted((folder / "second").glob("*.parquet"))
        if path.stem != "changed"
        for row in pq.read_table(path).to_pylist()
    ]
    return {
        "added": added,
        "again": again,
        "summary": json.loads(second.stdout),
        "first": json.loads(first.stdout),
        "rows": rows,
        "report": (folder / "second" / "report.html").read_text(),
        "first_columns": pq.read_schema(folder / "first" / "valid.parquet").names,
        "columns": pq.read_schema(folder / "second" / "valid.parquet").names,
    }


def row(flow: dict[str, Any], address: str) -> dict[str, Any]:
    found = [r for r in flow["rows"] if (r["email"] or "").lower() == address]
    assert found, address
    return dict(found[0])


def test_feedback_add_reads_every_export_and_keeps_each_event_once(flow: dict[str, Any]) -> None:
    assert flow["added"].returncode == 0, flow["added"].stderr
    added = json.loads(flow["added"].stdout)
    assert (added["added"], added["duplicates"]) == (25, 0)
    assert added["bad"] == 1  # the generic file's row without an address
    assert [f["format"] for f in added["files"]] == [
        "sendgrid",
        "mailgun",
        "ses",
        "postmark",
        "generic",
        "generic",
    ]
    again = json.loads(flow["again"].stdout)
    assert (again["added"], again["duplicates"]) == (0, 6)


def test_the_catch_all_domains_engaged_address_is_valid(flow: dict[str, Any]) -> None:
    nina = row(flow, "nina.patel@fabrikam.test")
    assert (nina["status"], nina["reason"], nina["evidence"]) == ("valid", None, "engaged")
    assert nina["evidence_at"] is not None
    assert nina["is_catchall"]  # the flag stays as measured


def test_the_catch_all_domains_hard_bounced_address_is_invalid(flow: dict[str, Any]) -> None:
    jim = row(flow, "j.morrison@fabrikam.test")
    assert (jim["status"], jim["reason"], jim["evidence"]) == ("invalid", "bounced", "bounced")


def test_a_hard_bounce_newer_than_the_verdict_makes_an_address_invalid(
    flow: dict[str, Any],
) -> None:
    amelia = row(flow, make_feedback.VALID_BOUNCED)
    assert (amelia["status"], amelia["reason"], amelia["evidence"]) == (
        "invalid",
        "bounced",
        "bounced",
    )


def test_a_bounce_older_than_the_last_verification_is_ignored(flow: dict[str, Any]) -> None:
    stale = row(flow, STALE_BOUNCE)
    assert (stale["status"], stale["evidence"]) == ("valid", "none")


def test_opens_deliveries_and_soft_bounces_are_no_evidence(flow: dict[str, Any]) -> None:
    for address in make_feedback.NO_EFFECT:
        seen = row(flow, address)
        assert (seen["status"], seen["evidence"]) == ("valid", "none"), address


def test_complaints_and_unsubscriptions_set_flags_only(flow: dict[str, Any]) -> None:
    patrick = row(flow, make_feedback.COMPLAINED)
    olivia = row(flow, make_feedback.UNSUBSCRIBED)
    assert (patrick["status"], patrick["complained"], patrick["unsubscribed"]) == (
        "valid",
        True,
        False,
    )
    assert (olivia["status"], olivia["complained"], olivia["unsubscribed"]) == (
        "valid",
        False,
        True,
    )
    assert sum(r["complained"] for r in flow["rows"]) == 3  # patrick.reed's three rows, no other


def test_the_summary_and_the_report_count_what_mail_taught(flow: dict[str, Any]) -> None:
    summary = flow["summary"]
    assert summary["feedback"] == {
        "events": 25,
        "bounced": 2,  # j.morrison, amelia.bennett
        "catchalls_confirmed": 1,  # nina.patel
        "engaged": 2,  # nina.patel, carol.white (a reply; already valid)
        "complained": 1,
        "unsubscribed": 1,
    }
    first = flow["first"]["rows"]["by_status"]
    second = summary["rows"]["by_status"]
    assert second["catchall"] == first["catchall"] - 2
    assert "feedback" not in flow["first"]  # a store without events: nothing said
    report = flow["report"]
    assert "What your mail taught" in report
    assert 'bounced since last verified: now invalid</td><td class="num">2' in report


def test_the_evidence_columns_come_after_form_as(flow: dict[str, Any]) -> None:
    columns = flow["columns"]
    assert columns[-5:] == ["credits_used", "evidence", "evidence_at", "complained", "unsubscribed"]
    assert "evidence" not in flow["first_columns"]  # no events in the store, no columns

"""Feedback events in the verdict store (a real SQLite file and a real PostgreSQL server) and the
one rule that applies them (PRODUCT.md, "Feedback"; docs/feedback.md)."""

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from listhygiene.results import KEY, VerificationResult, results_table
from listhygiene.statuses import DnsOutcome, Evidence, Facts, MailboxOutcome, Reason, Status
from listhygiene.verdicts import VerdictStore
from listhygiene.verdicts.evidence import apply_evidence
from listhygiene.verdicts.feedback import Feedback, add_events, event_counts, evidence_of

DAY = 86400.0
NOW = time.time()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VerdictStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    with VerdictStore(url) as opened:
        yield opened


def events(*rows: tuple[str, str, float, str | None]) -> pa.Table:
    address, event, at, bounce = zip(*rows, strict=True)
    return pa.table(
        {
            "address": pa.array(address, pa.string()),
            "event": pa.array(event, pa.string()),
            "at": pa.array(at, pa.float64()),
            "bounce": pa.array(bounce, pa.string()),
        }
    )


def test_events_are_kept_under_the_keyed_hash_never_the_address(store: VerdictStore) -> None:
    add_events(store, events(("ann@shop.test", "clicked", NOW, None)), source="generic")
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM verdict_events")).all()
    assert len(rows) == 1
    assert rows[0].key == store.hashes(["ann@shop.test"])[0]
    assert "ann" not in " ".join(str(v) for v in rows[0])


def test_the_same_event_is_kept_once(store: VerdictStore) -> None:
    batch = events(
        ("ann@shop.test", "bounced", NOW - 10, "hard"),
        ("ann@shop.test", "bounced", NOW - 10, "hard"),  # twice in one export
        ("ann@shop.test", "opened", NOW - 10, None),  # another event at the same time
        ("bob@shop.test", "clicked", NOW - 5, None),
    )
    assert add_events(store, batch, source="generic") == (3, 1)
    assert add_events(store, batch, source="generic") == (0, 4)  # the export loaded again
    overlap = events(
        ("bob@shop.test", "clicked", NOW - 5, None), ("bob@shop.test", "clicked", NOW, None)
    )
    assert add_events(store, overlap, source="sendgrid") == (1, 1)
    assert event_counts(store) == {"bounced_hard": 1, "clicked": 2, "opened": 1}


def test_evidence_sums_an_address_up(store: VerdictStore) -> None:
    add_events(
        store,
        events(
            ("ann@shop.test", "bounced", NOW - 30, "hard"),
            ("ann@shop.test", "bounced", NOW - 20, "hard"),
            ("ann@shop.test", "bounced", NOW - 10, "soft"),  # soft: not the newest hard one
            ("bob@shop.test", "opened", NOW - 5, None),  # opens are no engagement
            ("bob@shop.test", "replied", NOW - 7, None),
            ("bob@shop.test", "complained", NOW - 3, None),
            ("cat@shop.test", "unsubscribed", NOW - 3, None),
        ),
        source="generic",
    )
    found = evidence_of(
        store, pa.array(["ann@shop.test", "bob@shop.test", "cat@shop.test", "dan@shop.test"])
    )
    by_address = {row.pop("address"): row for row in found.to_pylist()}
    assert set(by_address) == {"ann@shop.test", "bob@shop.test", "cat@shop.test"}
    assert by_address["ann@shop.test"]["bounced_at"] == pytest.approx(NOW - 20)
    assert by_address["ann@shop.test"]["engaged_at"] is None
    assert by_address["bob@shop.test"]["engaged_at"] == pytest.approx(NOW - 7)
    assert by_address["bob@shop.test"]["complained"] is True
    assert by_address["cat@shop.test"]["unsubscribed"] is True
    assert by_address["cat@shop.test"]["complained"] is False


def test_forget_erases_an_addresss_events_too(store: VerdictStore) -> None:
    add_events(store, events(("ann@shop.test", "clicked", NOW, None)), source="generic")
    store.forget(["Ann@Shop.test"])
    assert event_counts(store) == {}


# -- the rule -------------------------------------------------------------------------------------


def verdict(
    address: str, *, catchall: bool = False, mailbox: MailboxOutcome = MailboxOutcome.ACCEPTED
) -> VerificationResult:
    return VerificationResult.from_facts(
        address,
        Facts(
            syntax_valid=True,
            dns=DnsOutcome.MX,
            smtp_checked=True,
            mailbox=mailbox,
            is_catchall=catchall,
        ),
        domain=address.split("@")[1],
    )


def evidence(**by_address: dict[str, object]) -> pa.Table:
    rows = [
        {
            "address": a,
            "bounced_at": None,
            "engaged_at": None,
            "complained": False,
            "unsubscribed": False,
            **v,
        }
        for a, v in by_address.items()
    ]
    return pa.Table.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("address", pa.string()),
                ("bounced_at", pa.float64()),
                ("engaged_at", pa.float64()),
                ("complained", pa.bool_()),
                ("unsubscribed", pa.bool_()),
            ]
        ),
    )


def applied(
    results: list[VerificationResult], found: pa.Table, *, checked_at: float
) -> dict[str, dict[str, object]]:
    table = results_table((r.email, r) for r in results)
    out, _ = apply_evidence(
        table, found, key=KEY, checked_at=checked_at, now=NOW, engaged_max_age=30 * DAY
    )
    return {row[KEY]: row for row in out.to_pylist()}


def test_the_rule_of_product_md() -> None:
    verified = NOW - 3 * DAY
    results = [
        verdict("clicked@catchall.test", catchall=True),
        verdict("old-click@catchall.test", catchall=True),
        verdict("bounced@catchall.test", catchall=True),
        verdict("opened@catchall.test", catchall=True),
        verdict("new-bounce@plain.test"),
        verdict("old-bounce@plain.test"),
        verdict("soft@plain.test"),
        verdict("back@plain.test"),
        verdict("gone@plain.test", mailbox=MailboxOutcome.NOT_FOUND),
        verdict("flags@plain.test"),
    ]
    found = evidence(
        **{
            "clicked@catchall.test": {"engaged_at": NOW - DAY},
            "old-click@catchall.test": {"engaged_at": NOW - 40 * DAY},  # past the valid max age
            # older than the verdict, but a catch-all's probe says nothing of the mailbox
            "bounced@catchall.test": {"bounced_at": NOW - 5 * DAY},
            "new-bounce@plain.test": {"bounced_at": NOW - DAY},
            "old-bounce@plain.test": {"bounced_at": NOW - 5 * DAY},  # older than the verdict
            "back@plain.test": {
                "bounced_at": NOW - 2 * DAY,
                "engaged_at": NOW - DAY,
            },  # replied since
            "gone@plain.test": {"bounced_at": NOW - DAY},
            "flags@plain.test": {"complained": True, "unsubscribed": True},
        }
    )
    rows = applied(results, found, checked_at=verified)

    def seen(address: str) -> tuple[object, object, object]:
        row = rows[address]
        return row["status"], row["reason"], row["evidence"]

    assert seen("clicked@catchall.test") == ("valid", None, "engaged")
    assert rows["clicked@catchall.test"]["score"] == 0.95
    assert rows["clicked@catchall.test"]["is_deliverable"] is True
    assert seen("old-click@catchall.test") == ("catchall", "catch_all", "none")
    assert seen("bounced@catchall.test") == ("invalid", "bounced", "bounced")
    assert rows["bounced@catchall.test"]["score"] == 0.1
    assert seen("opened@catchall.test") == ("catchall", "catch_all", "none")
    assert seen("new-bounce@plain.test") == ("invalid", "bounced", "bounced")
    assert seen("old-bounce@plain.test") == ("valid", None, "none")
    assert seen("soft@plain.test") == ("valid", None, "none")
    assert seen("back@plain.test") == ("valid", None, "engaged")
    assert seen("gone@plain.test") == ("invalid", "mailbox_not_found", "bounced")  # its own reason
    assert seen("flags@plain.test") == ("valid", None, "none")
    assert (rows["flags@plain.test"]["complained"], rows["flags@plain.test"]["unsubscribed"]) == (
        True,
        True,
    )
    assert rows["new-bounce@plain.test"]["evidence_at"].timestamp() == pytest.approx(
        NOW - DAY, abs=1e-3
    )
    assert rows["soft@plain.test"]["evidence_at"] is None


def test_the_service_applies_the_same_rule_to_its_models(store: VerdictStore) -> None:
    add_events(
        store,
        events(
            ("clicked@catchall.test", "clicked", NOW - DAY, None),
            ("bounced@catchall.test", "bounced", NOW - DAY, "hard"),
            ("bounced@plain.test", "bounced", NOW - DAY, "hard"),  # older than a verification now
        ),
        source="generic",
    )
    feedback = Feedback(store, engaged_max_age=30 * DAY)
    pairs = [
        (r.email, r)
        for r in (
            verdict("clicked@catchall.test", catchall=True),
            verdict("bounced@catchall.test", catchall=True),
            verdict("bounced@plain.test"),
            verdict("other@catchall.test", catchall=True),
        )
    ]
    out = dict(feedback.apply_results(pairs))
    assert out["clicked@catchall.test"].status is Status.VALID
    assert out["clicked@catchall.test"].evidence is Evidence.ENGAGED
    assert out["clicked@catchall.test"].to_form_b()["status"] == "valid"
    assert out["bounced@catchall.test"].reason is Reason.BOUNCED
    assert out["bounced@catchall.test"].to_form_b()["status"] == "invalid"
    assert out["bounced@catchall.test"].to_form_b()["reason"] == "bounced"
    assert out["bounced@plain.test"].status is Status.VALID  # verified after the bounce
    assert out["other@catchall.test"].to_form_b()["status"] == "accept_all"


def test_a_store_without_events_changes_nothing(store: VerdictStore) -> None:
    feedback = Feedback(store, engaged_max_age=30 * DAY)
    pairs = [("a@catchall.test", verdict("a@catchall.test", catchall=True))]
    assert feedback.apply_results(pairs) == pairs
    assert not feedback.active

"""``VerificationResult.from_form_b``: a form B result read back into the shared model keeps its
form B status and reason, for every result the decision table can give and for the engine's."""

import itertools
from collections.abc import Iterator

import pytest

from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import (
    UNDETERMINED_REASONS,
    DnsOutcome,
    Facts,
    FormBStatus,
    MailboxOutcome,
    Reason,
    Status,
)
from tests.service.live import engine_for


def consistent_facts() -> Iterator[Facts]:
    """Every combination of facts the engine can measure (SMTP outcomes only with SMTP on,
    an undetermined reason only with a DNS error or an undetermined mailbox)."""
    yield Facts(syntax_valid=False)
    flags = list(itertools.product([False, True], repeat=3))
    for dns in DnsOutcome:
        if dns is DnsOutcome.NOT_CHECKED:
            continue
        for smtp in (False, True):
            mailboxes = list(MailboxOutcome) if smtp else [MailboxOutcome.NOT_CHECKED]
            for mailbox in mailboxes:
                reasons: list[Reason | None] = [None]
                if dns is DnsOutcome.ERROR or mailbox is MailboxOutcome.UNDETERMINED:
                    reasons = sorted(UNDETERMINED_REASONS)
                catchalls = [None, False, True] if smtp else [False]
                for reason, catchall, (disposable, role, free) in itertools.product(
                    reasons, catchalls, flags
                ):
                    yield Facts(
                        syntax_valid=True,
                        dns=dns,
                        smtp_checked=smtp,
                        mailbox=mailbox,
                        undetermined_reason=reason,
                        is_disposable=disposable,
                        is_role=role,
                        is_free=free,
                        is_catchall=catchall,
                    )


def result_of(facts: Facts) -> VerificationResult:
    domain = "example.com" if facts.syntax_valid else ""
    return VerificationResult.from_facts("jane@example.com", facts, domain=domain)


def round_trip_problems(facts: Facts) -> list[str]:
    original = result_of(facts)
    view = original.to_form_b()
    back = VerificationResult.from_form_b(view)
    # As a results-page item too: the reason inside ``result``, none at the top.
    item = {**view, "result": {**view["result"], "reason": view["reason"]}, "reason": None}
    checks = {
        "form B status": (back.form_b_status(), original.form_b_status()),
        "page item status": (
            VerificationResult.from_form_b(item).form_b_status(),
            original.form_b_status(),
        ),
        "result object": (
            back.form_b_result_object()["deliverable"],
            view["result"]["deliverable"],
        ),
        "flags": (
            (back.is_disposable, back.is_role, back.is_free),
            (original.is_disposable, original.is_role, original.is_free),
        ),
        "credits": (back.credits_used, original.credits_used),
        "score": (back.to_form_b()["score"], view["score"]),
    }
    return [f"{name}: {got} != {want}" for name, (got, want) in checks.items() if got != want]


def test_round_trip_keeps_form_b_status_for_every_consistent_result() -> None:
    problems = {repr(f): p for f in consistent_facts() if (p := round_trip_problems(f))}
    assert not problems
    assert sum(1 for _ in consistent_facts()) > 1000


def test_form_a_status_follows_the_decision_table() -> None:
    disposable = VerificationResult.from_form_b(
        {
            "email": "quick@mailinator.com",
            "status": "valid",
            "result": {
                "deliverable": True,
                "valid_format": True,
                "valid_domain": True,
                "valid_mx": True,
                "disposable": True,
                "role": False,
                "catchall": False,
                "free": False,
                "smtp_valid": True,
            },
            "score": 0.95,
            "reason": None,
            "credits_used": 1,
        }
    )
    assert (disposable.status, disposable.reason) == (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN)
    assert disposable.score == 0.3  # form A's score of its own status
    assert disposable.form_b_status() == (FormBStatus.VALID, None)
    assert disposable.domain == "mailinator.com"
    assert disposable.smtp_check is True


def test_a_remote_score_is_kept_where_the_statuses_agree() -> None:
    result = VerificationResult.from_form_b(
        {"email": "a@example.com", "status": "valid", "score": 0.87, "result": {"smtp_valid": True}}
    )
    assert (result.status, result.score) == (Status.VALID, 0.87)


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        ({"valid_format": False}, Reason.INVALID_SYNTAX),
        ({"valid_format": True, "valid_domain": False, "valid_mx": False}, Reason.NO_MAIL_SERVER),
        ({"deliverable": False}, Reason.MAILBOX_NOT_FOUND),
    ],
)
def test_an_invalid_item_without_reason_gets_the_likeliest(flags: dict, reason: Reason) -> None:
    result = VerificationResult.from_form_b(
        {"email": "x@example.com", "status": "invalid", "score": 0.1, "result": flags}
    )
    assert result.status is Status.INVALID
    assert result.form_b_status() == (FormBStatus.INVALID, reason)


def test_an_unknown_reason_name_is_not_an_error() -> None:
    result = VerificationResult.from_form_b(
        {"email": "x@example.com", "status": "unknown", "reason": "cosmic_rays", "result": {}}
    )
    assert result.status is Status.UNKNOWN


SANDBOX_ADDRESSES = [
    "alice.johnson@acme-corp.test",
    "nobody.here@acme-corp.test",
    "nina.patel@fabrikam.test",
    "info@fabrikam.test",
    "dana.cole@litware.test",
    "evan.price@adventure-works.test",
    "olga.petrova@wideworld-importers.test",
    "andré@proseware.test",
    "ivan.horvat@coho-winery.test",
    "jordan.blake@parked-brand.test",
    "priya.shah@trey-research.test",
    "max.mustermann@defunct-startup.test",
    "claire.dupont@humongous-insurance.test",
    "marta.rossi@relecloud.test",
    "kim.larsen@tailwind-traders.test",
    "info@contoso.test",
    "noreply@contoso.test",
    "quicktest.4821@mailinator.com",
    "no-such-inbox@mailinator.com",
    "not-an-email",
]


@pytest.mark.parametrize("check_smtp", [True, False])
async def test_round_trip_of_engine_results(sandbox: Sandbox, check_smtp: bool) -> None:
    engine = engine_for(sandbox)
    results = [r async for r in engine.verify_many(SANDBOX_ADDRESSES, check_smtp=check_smtp)]
    assert len(results) == len(SANDBOX_ADDRESSES)
    seen = set()
    for original in results:
        back = VerificationResult.from_form_b(original.to_form_b())
        assert back.form_b_status() == original.form_b_status(), original.email
        seen.add(back.form_b_status()[0])
    if check_smtp:
        assert seen == set(FormBStatus)  # every form B status was exercised

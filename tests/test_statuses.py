"""The decision table of PRODUCT.md, row by row, for form A and form B."""

import pytest

from listhygiene.statuses import (
    DnsOutcome,
    Facts,
    FormBStatus,
    MailboxOutcome,
    Reason,
    Status,
    decide,
    form_b_status,
)

ACCEPTED = Facts(
    syntax_valid=True, dns=DnsOutcome.MX, smtp_checked=True, mailbox=MailboxOutcome.ACCEPTED
)


def facts(**changes: object) -> Facts:
    base = {f: getattr(ACCEPTED, f) for f in Facts.__slots__}
    base.update(changes)
    return Facts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            facts(syntax_valid=False, dns=DnsOutcome.NOT_CHECKED),
            (Status.INVALID, Reason.INVALID_SYNTAX),
        ),
        (facts(dns=DnsOutcome.NXDOMAIN), (Status.INVALID, Reason.NO_MAIL_SERVER)),
        (facts(dns=DnsOutcome.NULL_MX), (Status.INVALID, Reason.NO_MAIL_SERVER)),
        (facts(dns=DnsOutcome.NO_MAIL_SERVER), (Status.INVALID, Reason.NO_MAIL_SERVER)),
        # row 2 before row 3: a disposable domain that does not exist is invalid
        (
            facts(dns=DnsOutcome.NXDOMAIN, is_disposable=True),
            (Status.INVALID, Reason.NO_MAIL_SERVER),
        ),
        (facts(is_disposable=True), (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN)),
        # row 3 before row 4: disposable wins over a refused mailbox
        (
            facts(is_disposable=True, mailbox=MailboxOutcome.NOT_FOUND),
            (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN),
        ),
        (facts(mailbox=MailboxOutcome.NOT_FOUND), (Status.INVALID, Reason.MAILBOX_NOT_FOUND)),
        (facts(mailbox=MailboxOutcome.DISABLED), (Status.INVALID, Reason.MAILBOX_DISABLED)),
        # row 4 before row 6: a refused mailbox on a catch-all domain is still invalid
        (
            facts(mailbox=MailboxOutcome.NOT_FOUND, is_catchall=True),
            (Status.INVALID, Reason.MAILBOX_NOT_FOUND),
        ),
        (
            facts(
                dns=DnsOutcome.ERROR,
                mailbox=MailboxOutcome.NOT_CHECKED,
                undetermined_reason=Reason.DNS_ERROR,
            ),
            (Status.UNKNOWN, Reason.DNS_ERROR),
        ),
        (
            facts(mailbox=MailboxOutcome.UNDETERMINED, undetermined_reason=Reason.GREYLISTED),
            (Status.UNKNOWN, Reason.GREYLISTED),
        ),
        (
            facts(
                mailbox=MailboxOutcome.UNDETERMINED,
                undetermined_reason=Reason.BLOCKED,
                is_role=True,
            ),
            (Status.UNKNOWN, Reason.BLOCKED),
        ),
        # row 5 before row 6: a catch-all domain that greylists us is unknown
        (
            facts(
                mailbox=MailboxOutcome.UNDETERMINED,
                undetermined_reason=Reason.SMTP_TIMEOUT,
                is_catchall=True,
            ),
            (Status.UNKNOWN, Reason.SMTP_TIMEOUT),
        ),
        (facts(is_catchall=True), (Status.CATCHALL, Reason.CATCH_ALL)),
        # row 6 before row 8: a catch-all role address is catchall, never valid
        (facts(is_catchall=True, is_role=True), (Status.CATCHALL, Reason.CATCH_ALL)),
        (facts(mailbox=MailboxOutcome.FULL), (Status.RISKY, Reason.MAILBOX_FULL)),
        (facts(mailbox=MailboxOutcome.FULL, is_role=True), (Status.RISKY, Reason.MAILBOX_FULL)),
        (facts(is_role=True), (Status.ROLE, Reason.ROLE_ACCOUNT)),
        (facts(is_free=True), (Status.VALID, None)),
        (ACCEPTED, (Status.VALID, None)),
    ],
)
def test_first_row_that_applies_decides(
    case: Facts, expected: tuple[Status, Reason | None]
) -> None:
    verdict = decide(case)
    assert (verdict.status, verdict.reason) == expected


@pytest.mark.parametrize(
    ("status", "score"),
    [
        (Status.VALID, 0.95),
        (Status.INVALID, 0.1),
        (Status.UNKNOWN, 0.5),
        (Status.RISKY, 0.4),
        (Status.DISPOSABLE, 0.3),
        (Status.CATCHALL, 0.7),
        (Status.ROLE, 0.6),
    ],
)
def test_default_scores(status: Status, score: float) -> None:
    examples = {
        Status.VALID: ACCEPTED,
        Status.INVALID: facts(mailbox=MailboxOutcome.NOT_FOUND),
        Status.UNKNOWN: facts(mailbox=MailboxOutcome.UNDETERMINED),
        Status.RISKY: facts(mailbox=MailboxOutcome.FULL),
        Status.DISPOSABLE: facts(is_disposable=True),
        Status.CATCHALL: facts(is_catchall=True),
        Status.ROLE: facts(is_role=True),
    }
    verdict = decide(examples[status])
    assert verdict.status is status
    assert verdict.score == score


def test_without_smtp_rows_4_6_7_are_skipped_and_valid_scores_lower() -> None:
    off = {"smtp_checked": False, "mailbox": MailboxOutcome.NOT_CHECKED}
    assert decide(facts(**off)).status is Status.VALID
    assert decide(facts(**off)).score == 0.9
    # whatever a stale probe said, rows 4, 6 and 7 do not apply without SMTP
    assert (
        decide(facts(smtp_checked=False, mailbox=MailboxOutcome.NOT_FOUND)).status is Status.VALID
    )
    assert decide(facts(smtp_checked=False, is_catchall=True)).status is Status.VALID
    assert decide(facts(smtp_checked=False, mailbox=MailboxOutcome.FULL)).status is Status.VALID
    assert decide(facts(is_role=True, **off)).status is Status.ROLE
    # a DNS failure is still unknown
    dns_error = decide(facts(dns=DnsOutcome.ERROR, **off))
    assert (dns_error.status, dns_error.reason) == (Status.UNKNOWN, Reason.DNS_ERROR)


def test_unknown_is_free_everything_else_costs_one_credit() -> None:
    assert decide(facts(mailbox=MailboxOutcome.UNDETERMINED)).credits_used == 0
    assert decide(facts(dns=DnsOutcome.ERROR)).credits_used == 0
    for case in (
        ACCEPTED,
        facts(mailbox=MailboxOutcome.NOT_FOUND),
        facts(is_disposable=True),
        facts(syntax_valid=False),
    ):
        assert decide(case).credits_used == 1


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (ACCEPTED, (FormBStatus.VALID, None)),
        (facts(is_catchall=True), (FormBStatus.ACCEPT_ALL, None)),
        # form B ignores disposability and role: the mail server decides
        (facts(is_disposable=True), (FormBStatus.VALID, None)),
        (facts(is_role=True), (FormBStatus.VALID, None)),
        (
            facts(is_disposable=True, mailbox=MailboxOutcome.NOT_FOUND),
            (FormBStatus.INVALID, Reason.MAILBOX_NOT_FOUND),
        ),
        (facts(syntax_valid=False), (FormBStatus.INVALID, Reason.INVALID_SYNTAX)),
        (facts(dns=DnsOutcome.NULL_MX), (FormBStatus.INVALID, Reason.NO_MAIL_SERVER)),
        (facts(mailbox=MailboxOutcome.DISABLED), (FormBStatus.INVALID, Reason.MAILBOX_DISABLED)),
        (facts(mailbox=MailboxOutcome.FULL), (FormBStatus.INVALID, Reason.MAILBOX_FULL)),
        (
            facts(mailbox=MailboxOutcome.UNDETERMINED, undetermined_reason=Reason.GREYLISTED),
            (FormBStatus.UNKNOWN, Reason.GREYLISTED),
        ),
        (
            facts(dns=DnsOutcome.ERROR, undetermined_reason=Reason.DNS_ERROR),
            (FormBStatus.UNKNOWN, Reason.DNS_ERROR),
        ),
    ],
)
def test_form_b_status(case: Facts, expected: tuple[FormBStatus, Reason | None]) -> None:
    assert form_b_status(case) == expected


# -- listhygiene.vocabulary: every consumer spells the product's words from there ----------------


def test_job_statuses_and_events_come_from_the_vocabulary() -> None:
    from listhygiene import vocabulary
    from listhygiene.clients import TERMINAL_STATUSES, JobStatus
    from listhygiene.pipeline.backends.remote import FormABackend, FormBBackend
    from listhygiene.service.store.models import FORMS, JOB_KINDS, JOB_STATUSES

    assert JobStatus is vocabulary.JobStatus
    assert TERMINAL_STATUSES is vocabulary.TERMINAL_JOB_STATUSES
    assert tuple(vocabulary.JobStatus) == JOB_STATUSES
    assert vocabulary.FORMS == FORMS
    assert vocabulary.JOB_KINDS == JOB_KINDS
    assert FormABackend._EVENTS is vocabulary.JOB_EVENTS["a"]
    assert FormBBackend._EVENTS is vocabulary.JOB_EVENTS["b"]
    assert vocabulary.is_terminal("failed")
    assert not vocabulary.is_terminal("processing")


def test_webhook_events_of_the_service_are_the_vocabulary() -> None:
    from listhygiene import vocabulary
    from listhygiene.service.webhooks import EVENTS

    assert tuple(EVENTS["a"]) == vocabulary.FORM_A_EVENTS
    assert tuple(EVENTS["b"]) == vocabulary.FORM_B_EVENTS


def test_plans_and_limits_come_from_the_vocabulary() -> None:
    import importlib

    from listhygiene import vocabulary
    from listhygiene.clients import FORM_A_RATE_LIMITS, FORM_B_PLAN_LIMITS
    from listhygiene.service.store import PLANS
    from listhygiene.service.store.limits import A_PER_MINUTE, B_PER_PLAN

    keys = importlib.import_module("listhygiene.cli.keys")  # the module, not its command group
    assert keys.PLANS is PLANS is vocabulary.PLANS
    assert keys.DEFAULT_PLAN == "professional"  # PRODUCT.md: keys create defaults to it
    assert FORM_A_RATE_LIMITS is A_PER_MINUTE is vocabulary.FORM_A_RATE_LIMITS
    assert FORM_B_PLAN_LIMITS is vocabulary.PLAN_LIMITS
    assert B_PER_PLAN is vocabulary.SERVICE_PLAN_LIMITS


def test_the_enterprise_plan_is_custom_and_the_service_documents_its_default() -> None:
    # spec/form-b.md "Limits": enterprise is "custom". The client does not guess it; the service
    # needs a number for a key without overrides: ten times professional (docs/service.md).
    from listhygiene import vocabulary

    assert vocabulary.PLAN_LIMITS["enterprise"] is None
    assert vocabulary.SERVICE_PLAN_LIMITS["enterprise"] == tuple(
        10 * n for n in vocabulary.PLAN_LIMITS["professional"] or ()
    )
    spec = {plan: vocabulary.PLAN_LIMITS[plan] for plan in ("free", "starter", "professional")}
    assert spec == {
        "free": (100, 1_000),
        "starter": (1_000, 10_000),
        "professional": (10_000, 100_000),
    }
    assert {p: vocabulary.SERVICE_PLAN_LIMITS[p] for p in spec} == spec


def test_backend_kinds_come_from_the_vocabulary() -> None:
    import click

    from listhygiene import vocabulary
    from listhygiene.cli.clean import clean
    from listhygiene.pipeline import backends

    assert backends.BACKEND_KINDS is vocabulary.BACKEND_KINDS
    (option,) = [p for p in clean.params if p.name == "backend"]
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == vocabulary.BACKEND_KINDS

"""The shared result model: form A's exact shape, form B's view, JSON and Arrow."""

import json

import pyarrow as pa
import pytest
from pydantic import ValidationError

from listhygiene.results import (
    FORM_A_FIELDS,
    DomainReputation,
    VerificationResult,
    arrow_schema,
    to_arrow,
)
from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome, Reason, Status

# spec/form-a.md, "Verification result", in the table's order
FORM_A_SINGLE = [
    "email",
    "status",
    "score",
    "is_deliverable",
    "is_disposable",
    "is_catchall",
    "is_role",
    "is_free",
    "domain",
    "mx_records",
    "domain_reputation",
    "smtp_check",
    "reason",
    "response_time",
    "credits_used",
]
# spec/form-a.md, "Batch result", the fields of one item
FORM_A_BATCH_ITEM = [
    "email",
    "status",
    "score",
    "is_deliverable",
    "is_disposable",
    "is_catchall",
    "is_role",
    "is_free",
    "domain",
    "smtp_check",
    "reason",
    "credits_used",
]
FORM_B_RESULT_OBJECT = [
    "deliverable",
    "valid_format",
    "valid_domain",
    "valid_mx",
    "disposable",
    "role",
    "catchall",
    "free",
    "smtp_valid",
]


def disposable_but_accepted() -> VerificationResult:
    return VerificationResult.from_facts(
        "jane@mailinator.com",
        Facts(
            syntax_valid=True,
            dns=DnsOutcome.MX,
            smtp_checked=True,
            mailbox=MailboxOutcome.ACCEPTED,
            is_disposable=True,
            is_free=False,
        ),
        domain="mailinator.com",
        mx_records=["valid"],
        domain_reputation=DomainReputation(mx_ip="127.1.0.9", checked=True),
        response_time=42,
    )


def test_form_a_single_has_exactly_the_spec_fields_in_order() -> None:
    data = disposable_but_accepted().to_form_a()
    assert list(data) == FORM_A_SINGLE
    assert list(data["domain_reputation"]) == ["mx_ip", "is_listed", "blacklists", "checked"]
    assert data["status"] == "disposable"
    assert data["reason"] == "disposable_domain"
    assert data["score"] == 0.3
    assert data["response_time"] == 42
    assert data["credits_used"] == 1
    json.dumps(data)  # serialisable as it is


def test_form_a_batch_item_fields() -> None:
    assert list(disposable_but_accepted().to_form_a_batch_item()) == FORM_A_BATCH_ITEM


def test_valid_result_has_null_reason_and_empty_strings() -> None:
    result = VerificationResult.from_facts(
        "a@b.test",
        Facts(
            syntax_valid=True, dns=DnsOutcome.MX, smtp_checked=True, mailbox=MailboxOutcome.ACCEPTED
        ),
    )
    data = result.to_form_a()
    assert data["reason"] is None
    assert data["domain"] == ""
    assert data["domain_reputation"]["mx_ip"] == ""


def test_form_b_view_reads_the_mail_server_not_the_flags() -> None:
    data = disposable_but_accepted().to_form_b()
    assert list(data) == ["email", "status", "result", "score", "reason", "credits_used"]
    assert data["status"] == "valid"
    assert data["score"] == 0.95
    assert data["reason"] is None
    assert list(data["result"]) == FORM_B_RESULT_OBJECT
    assert data["result"]["disposable"] is True
    assert data["result"]["smtp_valid"] is True
    assert data["result"]["deliverable"] is True


def test_form_b_invalid_carries_reason_and_result_flags() -> None:
    result = VerificationResult.from_facts(
        "x@nowhere.test", Facts(syntax_valid=True, dns=DnsOutcome.NXDOMAIN)
    )
    data = result.to_form_b()
    assert (data["status"], data["reason"], data["score"]) == ("invalid", "no_mail_server", 0.1)
    assert data["result"]["valid_format"] is True
    assert data["result"]["valid_domain"] is False
    assert data["result"]["valid_mx"] is False
    syntax = VerificationResult.from_facts("nope", Facts(syntax_valid=False)).to_form_b()
    assert syntax["result"]["valid_format"] is False


def test_catch_all_is_accept_all_in_form_b_and_never_valid() -> None:
    result = VerificationResult.from_facts(
        "anyone@catchall.test",
        Facts(
            syntax_valid=True,
            dns=DnsOutcome.MX,
            smtp_checked=True,
            mailbox=MailboxOutcome.ACCEPTED,
            is_catchall=True,
        ),
    )
    assert result.status is Status.CATCHALL
    assert result.to_form_b()["status"] == "accept_all"
    assert result.to_form_b()["score"] == 0.7


def test_json_round_trip_keeps_every_fact() -> None:
    result = disposable_but_accepted()
    again = VerificationResult.model_validate_json(result.model_dump_json())
    assert again == result


def test_from_form_a_parses_a_remote_result() -> None:
    original = VerificationResult.from_facts(
        "bob@acme.test",
        Facts(
            syntax_valid=True,
            dns=DnsOutcome.MX,
            smtp_checked=True,
            mailbox=MailboxOutcome.NOT_FOUND,
        ),
        domain="acme.test",
    )
    parsed = VerificationResult.from_form_a(original.to_form_a())
    assert parsed.status is Status.INVALID
    assert parsed.reason is Reason.MAILBOX_NOT_FOUND
    assert parsed.to_form_b()["status"] == "invalid"
    assert parsed.to_form_a() == original.to_form_a()


def test_results_are_immutable_and_validated() -> None:
    result = disposable_but_accepted()
    with pytest.raises(ValidationError):
        result.status = Status.VALID  # type: ignore[misc]
    with pytest.raises(ValidationError):
        VerificationResult(email="a@b.test", status="great", score=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        VerificationResult(email="a@b.test", status=Status.VALID, score=1.5)


def test_arrow_schema_and_table() -> None:
    schema = arrow_schema()
    assert schema.names == FORM_A_SINGLE
    assert schema.field("mx_records").type == pa.list_(pa.string())
    assert schema.field("reason").nullable
    assert not schema.field("status").nullable
    table = to_arrow([disposable_but_accepted()])
    assert table.schema == schema
    row = table.to_pylist()[0]
    assert row["domain_reputation"]["mx_ip"] == "127.1.0.9"
    internal = to_arrow([disposable_but_accepted()], internal=True)
    assert internal.schema.names[-9:] == [
        "dns",
        "mailbox",
        "undetermined_reason",
        "suggestion",
        "mx_provider",
        "evidence",
        "evidence_at",
        "complained",
        "unsubscribed",
    ]
    assert schema.names == list(FORM_A_FIELDS)  # the extra columns only in the internal one
    assert internal.column("mailbox").to_pylist() == ["accepted"]

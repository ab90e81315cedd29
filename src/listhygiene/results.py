"""The verification result shared by the engine, the service, the clients and the pipeline.

:class:`VerificationResult` holds exactly the fields of form A's result table, plus two facts that
form A does not show but form B needs (what DNS and the mail server said: a disposable address is
``disposable`` in form A yet ``valid`` in form B when its mailbox accepts). Everything else is a
view of it: the form A dict, the form A batch item, the form B dict, a JSON line, an Arrow row.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from listhygiene.statuses import (
    FORM_B_SCORES,
    VALID_WITHOUT_SMTP_SCORE,
    DnsOutcome,
    Evidence,
    Facts,
    FormBStatus,
    MailboxOutcome,
    Reason,
    Status,
    decide,
    form_b_status,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "EVIDENCE_FIELDS",
    "EXTRA_FIELDS",
    "FORM_A_BATCH_FIELDS",
    "FORM_A_FIELDS",
    "KEY",
    "DomainReputation",
    "VerificationResult",
    "arrow_schema",
    "evidence_fields",
    "extra_fields",
    "no_evidence",
    "results_table",
    "to_arrow",
]


class DomainReputation(BaseModel):
    """The mail host's address checked against DNS blocklists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mx_ip: str = ""
    is_listed: bool = False
    blacklists: tuple[str, ...] = ()
    checked: bool = False


class VerificationResult(BaseModel):
    """One address's verdict, in form A's shape (see spec/form-a.md, "Verification result")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    email: str
    status: Status
    score: float = Field(ge=0.0, le=1.0)
    is_deliverable: bool = False
    is_disposable: bool = False
    is_catchall: bool = False
    is_role: bool = False
    is_free: bool = False
    domain: str = ""
    mx_records: tuple[str, ...] = ()
    domain_reputation: DomainReputation = DomainReputation()
    smtp_check: bool = False
    reason: Reason | None = None
    response_time: int = Field(default=0, ge=0)
    credits_used: int = Field(default=0, ge=0)
    # Not in form A's table: the facts that form B's status is read from.
    dns: DnsOutcome = DnsOutcome.NOT_CHECKED
    mailbox: MailboxOutcome = MailboxOutcome.NOT_CHECKED
    undetermined_reason: Reason | None = None
    # Not in form A's table either (docs/results.md, "Extra columns"): advice beside the verdict.
    #: The address likely meant, when the domain looks like a typo (``gmial.com``); never
    #: changes ``email`` or the status.
    suggestion: str | None = None
    #: Who runs the domain's mail, from its MX host names (``google``, ``microsoft``,
    #: ``self_hosted``, ``other``, ...; engine/providers.py); None without a mail host.
    mx_provider: str | None = None
    # What mail sent to the address taught (PRODUCT.md, "Feedback"; verdicts/evidence.py): the
    # evidence that stands and when it came; complaints and unsubscriptions are flags only.
    evidence: Evidence = Evidence.NONE
    evidence_at: datetime | None = None
    complained: bool = False
    unsubscribed: bool = False

    @classmethod
    def from_facts(
        cls,
        email: str,
        facts: Facts,
        *,
        domain: str = "",
        mx_records: Iterable[str] = (),
        domain_reputation: DomainReputation | None = None,
        response_time: int = 0,
        suggestion: str | None = None,
        mx_provider: str | None = None,
    ) -> "VerificationResult":
        """Build a result by applying the decision table to what was measured."""
        verdict = decide(facts)
        return cls(
            email=email,
            status=verdict.status,
            score=verdict.score,
            is_deliverable=verdict.is_deliverable,
            is_disposable=facts.is_disposable,
            is_catchall=bool(facts.is_catchall),
            is_role=facts.is_role,
            is_free=facts.is_free,
            domain=domain,
            mx_records=tuple(mx_records),
            domain_reputation=domain_reputation or DomainReputation(),
            smtp_check=facts.smtp_checked,
            reason=verdict.reason,
            response_time=response_time,
            credits_used=verdict.credits_used,
            dns=facts.dns,
            mailbox=facts.mailbox,
            undetermined_reason=facts.undetermined_reason,
            suggestion=suggestion,
            mx_provider=mx_provider,
        )

    @property
    def facts(self) -> Facts:
        """The measured facts, as far as this result tells them."""
        return Facts(
            syntax_valid=self.reason is not Reason.INVALID_SYNTAX,
            dns=self.dns,
            smtp_checked=self.smtp_check,
            mailbox=self.mailbox,
            undetermined_reason=self.undetermined_reason,
            is_disposable=self.is_disposable,
            is_role=self.is_role,
            is_free=self.is_free,
            is_catchall=self.is_catchall,
        )

    # -- form A ---------------------------------------------------------------------------------

    def to_form_a(self) -> dict[str, Any]:
        """The ``data`` of form A's ``POST /verify/single``: its fields, in its order."""
        return self.model_dump(mode="json", include=set(FORM_A_FIELDS))

    def to_form_a_batch_item(self) -> dict[str, Any]:
        """One item of ``results`` in form A's batch result."""
        return self.model_dump(mode="json", include=set(FORM_A_BATCH_FIELDS))

    @classmethod
    def from_form_a(cls, data: dict[str, Any]) -> "VerificationResult":
        """Parse a form A result (single, or a batch item) into the shared model.

        Form A does not carry the DNS and mailbox facts; they are inferred from the status and
        reason as far as those tell them, so that the form B view stays meaningful.
        """
        fields = {k: v for k, v in data.items() if k in _ALL_FIELDS}
        status = Status(fields["status"])
        reason = Reason(fields["reason"]) if fields.get("reason") else None
        fields.setdefault("dns", _infer_dns(status, reason))
        fields.setdefault("mailbox", _infer_mailbox(status, reason, fields.get("smtp_check")))
        if status is Status.UNKNOWN:
            fields.setdefault("undetermined_reason", reason)
        return cls.model_validate(fields)

    # -- form B ---------------------------------------------------------------------------------

    @classmethod
    def from_form_b(cls, data: dict[str, Any]) -> "VerificationResult":
        """Parse a form B result (``/verify``, or an item of a results page) into the shared model.

        Form B tells what the mail server said, form A classifies the address: the facts are
        rebuilt from the status, the reason and the ``result`` booleans, and form A's status is
        then decided from them by the same table as the engine's (a disposable address that
        form B calls valid is ``disposable`` here). Form B's own status and reason come back
        unchanged from :meth:`form_b_status`. The sample items of results pages carry only some
        booleans, and the reason inside ``result``: missing booleans are inferred.
        """
        # The wire's ``result`` object, when it is one; its values are only read as booleans.
        result_object = data.get("result")
        flags: Mapping[str, object] = result_object if isinstance(result_object, dict) else {}
        b_status = FormBStatus(data["status"])
        reason = _b_reason(b_status, data.get("reason") or flags.get("reason"), flags)
        syntax_valid = reason is not Reason.INVALID_SYNTAX
        smtp_checked = _b_smtp_checked(b_status, reason, flags)
        is_catchall = bool(flags.get("catchall", b_status is FormBStatus.ACCEPT_ALL))
        facts = Facts(
            syntax_valid=syntax_valid,
            dns=_b_dns(b_status, reason, flags) if syntax_valid else DnsOutcome.NOT_CHECKED,
            smtp_checked=smtp_checked,
            mailbox=_b_mailbox(b_status, reason, smtp_checked),
            undetermined_reason=reason if b_status is FormBStatus.UNKNOWN else None,
            is_disposable=bool(flags.get("disposable", False)),
            is_role=bool(flags.get("role", False)),
            is_free=bool(flags.get("free", False)),
            is_catchall=is_catchall,
        )
        email = str(data["email"])
        result = cls.from_facts(
            email, facts, domain=email.rpartition("@")[2].lower() if syntax_valid else ""
        )
        update: dict[str, Any] = {}
        if "deliverable" in flags:
            update["is_deliverable"] = bool(flags["deliverable"])
        if data.get("credits_used") is not None:
            update["credits_used"] = int(data["credits_used"])
        if isinstance(data.get("did_you_mean"), str) and data["did_you_mean"]:
            update["suggestion"] = data["did_you_mean"]
        # The service's own score, where form A's status says the same as form B's.
        if data.get("score") is not None and _SAME_STATUS.get(result.status) is b_status:
            update["score"] = float(data["score"])
        return result.model_copy(update=update) if update else result

    def form_b_status(self) -> tuple[FormBStatus, Reason | None]:
        # feedback overrides what the mail server said (PRODUCT.md, "Feedback")
        if self.reason is Reason.BOUNCED:
            return FormBStatus.INVALID, Reason.BOUNCED
        if self.evidence is Evidence.ENGAGED and self.status is Status.VALID:
            return FormBStatus.VALID, None
        return form_b_status(self.facts)

    def to_form_b(self) -> dict[str, Any]:
        """Form B's single verification result: ``email, status, result, score, reason,
        credits_used``, and ``did_you_mean`` when the domain looks like a typo."""
        status, reason = self.form_b_status()
        view: dict[str, Any] = {
            "email": self.email,
            "status": status.value,
            "result": self.form_b_result_object(),
            "score": self._form_b_score(status),
            "reason": reason.value if reason else None,
            "credits_used": self.credits_used,
        }
        if self.suggestion:  # only when there is one (docs/results.md, "Form B")
            view["did_you_mean"] = self.suggestion
        return view

    def _form_b_score(self, status: FormBStatus) -> float:
        if status is FormBStatus.VALID and not self.smtp_check:
            return VALID_WITHOUT_SMTP_SCORE
        return FORM_B_SCORES[status]

    def form_b_result_object(self) -> dict[str, bool]:
        """Form B's ``result`` object: nine booleans."""
        return {
            "deliverable": self.is_deliverable,
            "valid_format": self.reason is not Reason.INVALID_SYNTAX,
            "valid_domain": self.dns.domain_exists,
            "valid_mx": self.dns.takes_mail,
            "disposable": self.is_disposable,
            "role": self.is_role,
            "catchall": self.is_catchall,
            "free": self.is_free,
            "smtp_valid": self.smtp_check and self.mailbox is MailboxOutcome.ACCEPTED,
        }

    # -- rows -----------------------------------------------------------------------------------

    def to_row(self, *, internal: bool = False) -> dict[str, Any]:
        """A flat dict matching :func:`arrow_schema` (``internal`` adds the facts columns and
        the extra ones)."""
        row = self.model_dump(mode="json", include=set(FORM_A_FIELDS))
        if internal:
            row.update(
                dns=self.dns.value,
                mailbox=self.mailbox.value,
                undetermined_reason=(
                    self.undetermined_reason.value if self.undetermined_reason else None
                ),
                suggestion=self.suggestion,
                mx_provider=self.mx_provider,
                evidence=self.evidence.value,
                evidence_at=self.evidence_at,
                complained=self.complained,
                unsubscribed=self.unsubscribed,
            )
        return row


FORM_A_FIELDS: tuple[str, ...] = (
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
)
FORM_A_BATCH_FIELDS: tuple[str, ...] = (
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
)
INTERNAL_FIELDS: tuple[str, ...] = ("dns", "mailbox", "undetermined_reason")
#: Columns the pipeline writes after form A's only when asked (``--columns``,
#: ``extra_columns=``; docs/results.md, "Extra columns").
EXTRA_FIELDS: tuple[str, ...] = ("suggestion", "mx_provider")
#: What feedback taught (PRODUCT.md, "Feedback"): written after form A's columns when the run's
#: verdict store holds feedback events (docs/feedback.md).
EVIDENCE_FIELDS: tuple[str, ...] = ("evidence", "evidence_at", "complained", "unsubscribed")
_ALL_FIELDS = frozenset(FORM_A_FIELDS + INTERNAL_FIELDS + EXTRA_FIELDS + EVIDENCE_FIELDS)


def _infer_dns(status: Status, reason: Reason | None) -> DnsOutcome:
    if reason is Reason.INVALID_SYNTAX:
        return DnsOutcome.NOT_CHECKED
    if reason is Reason.NO_MAIL_SERVER:
        return DnsOutcome.NO_MAIL_SERVER
    if reason is Reason.DNS_ERROR:
        return DnsOutcome.ERROR
    return DnsOutcome.MX


def _infer_mailbox(status: Status, reason: Reason | None, smtp_check: object) -> MailboxOutcome:
    if not smtp_check:
        return MailboxOutcome.NOT_CHECKED
    by_reason = {
        Reason.MAILBOX_NOT_FOUND: MailboxOutcome.NOT_FOUND,
        Reason.MAILBOX_DISABLED: MailboxOutcome.DISABLED,
        Reason.MAILBOX_FULL: MailboxOutcome.FULL,
        Reason.CATCH_ALL: MailboxOutcome.ACCEPTED,
        Reason.ROLE_ACCOUNT: MailboxOutcome.ACCEPTED,
    }
    if reason in by_reason:
        return by_reason[reason]
    if status is Status.VALID:
        return MailboxOutcome.ACCEPTED
    if status is Status.UNKNOWN:
        return MailboxOutcome.UNDETERMINED
    return MailboxOutcome.NOT_CHECKED


#: Form A statuses that mean what a form B status means (the score scales agree on these).
_SAME_STATUS: dict[Status, FormBStatus] = {
    Status.VALID: FormBStatus.VALID,
    Status.INVALID: FormBStatus.INVALID,
    Status.UNKNOWN: FormBStatus.UNKNOWN,
    Status.CATCHALL: FormBStatus.ACCEPT_ALL,
}
_MAILBOX_BY_REASON: dict[Reason, MailboxOutcome] = {
    Reason.MAILBOX_NOT_FOUND: MailboxOutcome.NOT_FOUND,
    Reason.MAILBOX_DISABLED: MailboxOutcome.DISABLED,
    Reason.MAILBOX_FULL: MailboxOutcome.FULL,
}
_B_INVALID_REASONS = frozenset({Reason.INVALID_SYNTAX, Reason.NO_MAIL_SERVER, *_MAILBOX_BY_REASON})


def _b_reason(status: FormBStatus, raw: object, flags: Mapping[str, object]) -> Reason | None:
    """The reason given, or for an invalid address without a known one, the likeliest."""
    try:
        # a reason is a string on the wire; anything else names no reason, as an unknown one
        reason = Reason(raw) if isinstance(raw, str) and raw else None
    except ValueError:  # a reason this version does not know
        reason = None
    if status is not FormBStatus.INVALID or reason in _B_INVALID_REASONS:
        return reason
    if not flags.get("valid_format", True):
        return Reason.INVALID_SYNTAX
    if not flags.get("valid_mx", True) or not flags.get("valid_domain", True):
        return Reason.NO_MAIL_SERVER
    return Reason.MAILBOX_NOT_FOUND


def _b_dns(status: FormBStatus, reason: Reason | None, flags: Mapping[str, object]) -> DnsOutcome:
    if reason is Reason.NO_MAIL_SERVER:
        return DnsOutcome.NO_MAIL_SERVER if flags.get("valid_domain") else DnsOutcome.NXDOMAIN
    if reason is Reason.DNS_ERROR:
        return DnsOutcome.ERROR
    if status is FormBStatus.UNKNOWN and not flags.get("valid_mx", True):
        return DnsOutcome.ERROR
    return DnsOutcome.MX


def _b_smtp_checked(
    status: FormBStatus, reason: Reason | None, flags: Mapping[str, object]
) -> bool:
    if flags.get("smtp_valid") or status is FormBStatus.ACCEPT_ALL or reason in _MAILBOX_BY_REASON:
        return True
    if status is FormBStatus.UNKNOWN:
        return reason is not Reason.DNS_ERROR
    return False


def _b_mailbox(status: FormBStatus, reason: Reason | None, smtp_checked: bool) -> MailboxOutcome:
    if not smtp_checked:
        return MailboxOutcome.NOT_CHECKED
    if reason is not None and reason in _MAILBOX_BY_REASON:
        return _MAILBOX_BY_REASON[reason]
    if status is FormBStatus.UNKNOWN:
        return MailboxOutcome.UNDETERMINED
    return MailboxOutcome.ACCEPTED


def arrow_schema(*, internal: bool = False) -> "pa.Schema":
    """The explicit Arrow schema of result columns, in form A's order.

    ``internal`` adds the DNS and mailbox facts, which the pipeline keeps in its own state files
    so that a resumed run can rebuild full results, the :data:`EXTRA_FIELDS` and the
    :data:`EVIDENCE_FIELDS`.
    """
    import pyarrow as pa

    fields = [
        pa.field("email", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("is_deliverable", pa.bool_(), nullable=False),
        pa.field("is_disposable", pa.bool_(), nullable=False),
        pa.field("is_catchall", pa.bool_(), nullable=False),
        pa.field("is_role", pa.bool_(), nullable=False),
        pa.field("is_free", pa.bool_(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("mx_records", pa.list_(pa.string()), nullable=False),
        pa.field(
            "domain_reputation",
            pa.struct(
                [
                    pa.field("mx_ip", pa.string(), nullable=False),
                    pa.field("is_listed", pa.bool_(), nullable=False),
                    pa.field("blacklists", pa.list_(pa.string()), nullable=False),
                    pa.field("checked", pa.bool_(), nullable=False),
                ]
            ),
            nullable=False,
        ),
        pa.field("smtp_check", pa.bool_(), nullable=False),
        pa.field("reason", pa.string(), nullable=True),
        pa.field("response_time", pa.int64(), nullable=False),
        pa.field("credits_used", pa.int64(), nullable=False),
    ]
    if internal:
        fields += [
            pa.field("dns", pa.string(), nullable=False),
            pa.field("mailbox", pa.string(), nullable=False),
            pa.field("undetermined_reason", pa.string(), nullable=True),
            *extra_fields(),
            *evidence_fields(),
        ]
    return pa.schema(fields)


def evidence_fields() -> "list[pa.Field]":
    """The Arrow fields of :data:`EVIDENCE_FIELDS`."""
    import pyarrow as pa

    return [
        pa.field("evidence", pa.string(), nullable=False),
        pa.field("evidence_at", pa.timestamp("us", tz="UTC"), nullable=True),
        pa.field("complained", pa.bool_(), nullable=False),
        pa.field("unsubscribed", pa.bool_(), nullable=False),
    ]


def extra_fields() -> "list[pa.Field]":
    """The Arrow fields of :data:`EXTRA_FIELDS` (nullable strings)."""
    import pyarrow as pa

    return [pa.field(name, pa.string(), nullable=True) for name in EXTRA_FIELDS]


def no_evidence(rows: int) -> "dict[str, pa.Array]":
    """The :data:`EVIDENCE_FIELDS` of ``rows`` results that no feedback touched."""
    import pyarrow as pa

    return {
        "evidence": pa.repeat(pa.scalar(Evidence.NONE.value), rows),
        "evidence_at": pa.nulls(rows, pa.timestamp("us", tz="UTC")),
        "complained": pa.repeat(pa.scalar(False), rows),
        "unsubscribed": pa.repeat(pa.scalar(False), rows),
    }


def to_arrow(results: Iterable[VerificationResult], *, internal: bool = False) -> "pa.Table":
    """Results as an Arrow table with :func:`arrow_schema`."""
    import pyarrow as pa

    schema = arrow_schema(internal=internal)
    rows = [r.to_row(internal=internal) for r in results]
    return pa.Table.from_pylist(rows, schema=schema)


#: The column of the pipeline's result tables that holds the address as it was submitted.
KEY = "_address"


def results_table(pairs: Iterable[tuple[str, VerificationResult]]) -> "pa.Table":
    """(submitted address, result) pairs as a result table."""
    import pyarrow as pa

    keys: list[str] = []
    rows: list[dict[str, Any]] = []
    for key, result in pairs:
        keys.append(key)
        rows.append(result.to_row(internal=True))
    table = pa.Table.from_pylist(rows, schema=arrow_schema(internal=True))
    return table.add_column(0, KEY, pa.array(keys, pa.string()))

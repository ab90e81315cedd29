"""Statuses, reasons, scores and the decision table that picks them.

The verdict is a pure function of what was measured (:class:`Facts`), so that the engine only
gathers facts and every consumer (service, clients, pipeline) agrees on what they mean. The table
is the one fixed by the product contract: the first row that applies wins.

====  ==========================================================  ===========  ====================
row   condition                                                   status       reason
====  ==========================================================  ===========  ====================
1     syntax invalid                                              invalid      invalid_syntax
2     NXDOMAIN, null MX, no MX and no A/AAAA                      invalid      no_mail_server
3     disposable domain                                           disposable   disposable_domain
4     mailbox refused permanently (5.1.x, 5.2.1)                  invalid      mailbox_not_found /
                                                                                mailbox_disabled
5     undeterminable (DNS error, unreachable, 4xx kept, policy)   unknown      see :class:`Reason`
6     catch-all domain                                            catchall     catch_all
7     mailbox full (5.2.2)                                        risky        mailbox_full
8     role local part                                             role         role_account
9     accepted                                                    valid        (none)
====  ==========================================================  ===========  ====================

With SMTP off, rows 4, 6 and 7 are skipped; a DNS failure is still unknown.
"""

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """Form A verification status: the classification of one address."""

    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"
    RISKY = "risky"
    DISPOSABLE = "disposable"
    CATCHALL = "catchall"
    ROLE = "role"


class FormBStatus(StrEnum):
    """Form B status: what the mail server said, ignoring disposability and role."""

    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"
    ACCEPT_ALL = "accept_all"


class Reason(StrEnum):
    """Machine-readable reason for any status other than valid."""

    INVALID_SYNTAX = "invalid_syntax"
    NO_MAIL_SERVER = "no_mail_server"
    DISPOSABLE_DOMAIN = "disposable_domain"
    MAILBOX_NOT_FOUND = "mailbox_not_found"
    MAILBOX_DISABLED = "mailbox_disabled"
    DNS_ERROR = "dns_error"
    SMTP_UNREACHABLE = "smtp_unreachable"
    SMTP_TIMEOUT = "smtp_timeout"
    GREYLISTED = "greylisted"
    RATE_LIMITED = "rate_limited"
    BLOCKED = "blocked"
    SMTPUTF8_UNSUPPORTED = "smtputf8_unsupported"
    CATCH_ALL = "catch_all"
    MAILBOX_FULL = "mailbox_full"
    ROLE_ACCOUNT = "role_account"
    #: Not a row of the table: a hard bounce newer than the verification (PRODUCT.md,
    #: "Feedback"; listhygiene.verdicts.evidence).
    BOUNCED = "bounced"


class Evidence(StrEnum):
    """What mail sent to the address taught, as a result shows it (PRODUCT.md, "Feedback")."""

    NONE = "none"
    ENGAGED = "engaged"  # a click or a reply within the valid max age
    BOUNCED = "bounced"  # a hard bounce that stands


#: Reasons of row 5: the address could not be judged. Results with them are free of charge
#: and worth verifying again later; greylisting in particular asks for minutes.
UNDETERMINED_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.DNS_ERROR,
        Reason.SMTP_UNREACHABLE,
        Reason.SMTP_TIMEOUT,
        Reason.GREYLISTED,
        Reason.RATE_LIMITED,
        Reason.BLOCKED,
        Reason.SMTPUTF8_UNSUPPORTED,
    }
)

#: Reasons of rows 1-3 of the decision table, which come before any SMTP fact: a verdict with
#: one is final whether or not its run probed mailboxes, so the verdict store reuses it for both
#: (PRODUCT.md, "Verdict store").
BEFORE_SMTP_REASONS: frozenset[Reason] = frozenset(
    {Reason.INVALID_SYNTAX, Reason.NO_MAIL_SERVER, Reason.DISPOSABLE_DOMAIN}
)

#: Undetermined reasons that are temporary by nature: a later pass may well decide them.
TEMPORARY_REASONS: frozenset[Reason] = frozenset(
    {Reason.GREYLISTED, Reason.RATE_LIMITED, Reason.SMTP_TIMEOUT, Reason.DNS_ERROR}
)

DEFAULT_SCORES: dict[Status, float] = {
    Status.VALID: 0.95,
    Status.INVALID: 0.1,
    Status.UNKNOWN: 0.5,
    Status.RISKY: 0.4,
    Status.DISPOSABLE: 0.3,
    Status.CATCHALL: 0.7,
    Status.ROLE: 0.6,
}
#: A valid address whose mailbox was not probed (``check_smtp`` false) scores lower.
VALID_WITHOUT_SMTP_SCORE = 0.9


class DnsOutcome(StrEnum):
    """What DNS said about the domain's mail exchangers."""

    MX = "mx"  # one or more usable MX records
    IMPLICIT_MX = "implicit_mx"  # no MX, but A/AAAA records (RFC 5321 section 5.1)
    NULL_MX = "null_mx"  # "MX 0 ." (RFC 7505): the domain takes no mail
    NXDOMAIN = "nxdomain"
    NO_MAIL_SERVER = "no_mail_server"  # exists, but no MX, no A/AAAA, or only unusable hosts
    ERROR = "error"  # SERVFAIL, timeout, refused: undeterminable
    NOT_CHECKED = "not_checked"  # syntax was invalid, DNS not asked

    @property
    def takes_mail(self) -> bool:
        return self in (DnsOutcome.MX, DnsOutcome.IMPLICIT_MX)

    @property
    def domain_exists(self) -> bool:
        return self in (
            DnsOutcome.MX,
            DnsOutcome.IMPLICIT_MX,
            DnsOutcome.NULL_MX,
            DnsOutcome.NO_MAIL_SERVER,
        )


class MailboxOutcome(StrEnum):
    """What the mail server said about the mailbox itself."""

    ACCEPTED = "accepted"
    NOT_FOUND = "not_found"  # 5.1.1, 5.1.0, 550 user unknown
    DISABLED = "disabled"  # 5.2.1
    FULL = "full"  # 5.2.2
    UNDETERMINED = "undetermined"  # see the unknown reason
    NOT_CHECKED = "not_checked"  # SMTP off, or an earlier row decided


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything measured about one address, before any verdict."""

    syntax_valid: bool
    dns: DnsOutcome = DnsOutcome.NOT_CHECKED
    smtp_checked: bool = False
    mailbox: MailboxOutcome = MailboxOutcome.NOT_CHECKED
    #: Why the address could not be judged (row 5); set with a DNS error or an undetermined
    #: mailbox.
    undetermined_reason: Reason | None = None
    is_disposable: bool = False
    is_role: bool = False
    is_free: bool = False
    #: True when a random local part was accepted; None when the probe could not tell.
    is_catchall: bool | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    reason: Reason | None
    score: float
    is_deliverable: bool
    credits_used: int


def decide(facts: Facts) -> Verdict:
    """Apply the decision table to measured facts."""
    status, reason = _first_row(facts)
    score = DEFAULT_SCORES[status]
    if status is Status.VALID and not facts.smtp_checked:
        score = VALID_WITHOUT_SMTP_SCORE
    return Verdict(
        status=status,
        reason=reason,
        score=score,
        is_deliverable=is_deliverable(facts),
        credits_used=0 if status is Status.UNKNOWN else 1,
    )


def _first_row(facts: Facts) -> tuple[Status, Reason | None]:
    _, status, reason = decision_row(facts)
    return status, reason


#: What each row of the decision table checks (``listhygiene explain`` prints it).
ROW_CONDITIONS: dict[int, str] = {
    1: "syntax invalid",
    2: "domain has no mail server (NXDOMAIN, null MX, no MX and no A/AAAA)",
    3: "domain is disposable",
    4: "mailbox refused permanently",
    5: "undeterminable (DNS error, unreachable, temporary refusal kept, policy)",
    6: "domain accepts any address (catch-all)",
    7: "mailbox full",
    8: "role local part",
    9: "accepted",
}


def decision_row(facts: Facts) -> tuple[int, Status, Reason | None]:
    """The first row of the decision table that applies: (row number, status, reason)."""
    smtp = facts.smtp_checked
    if not facts.syntax_valid:
        return 1, Status.INVALID, Reason.INVALID_SYNTAX
    if (facts.dns.domain_exists and not facts.dns.takes_mail) or facts.dns is DnsOutcome.NXDOMAIN:
        return 2, Status.INVALID, Reason.NO_MAIL_SERVER
    if facts.is_disposable:
        return 3, Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN
    if smtp and facts.mailbox is MailboxOutcome.NOT_FOUND:
        return 4, Status.INVALID, Reason.MAILBOX_NOT_FOUND
    if smtp and facts.mailbox is MailboxOutcome.DISABLED:
        return 4, Status.INVALID, Reason.MAILBOX_DISABLED
    if facts.dns is DnsOutcome.ERROR or facts.dns is DnsOutcome.NOT_CHECKED:
        return 5, Status.UNKNOWN, facts.undetermined_reason or Reason.DNS_ERROR
    if smtp and facts.mailbox is MailboxOutcome.UNDETERMINED:
        return 5, Status.UNKNOWN, facts.undetermined_reason or Reason.SMTP_UNREACHABLE
    if smtp and facts.is_catchall:
        return 6, Status.CATCHALL, Reason.CATCH_ALL
    if smtp and facts.mailbox is MailboxOutcome.FULL:
        return 7, Status.RISKY, Reason.MAILBOX_FULL
    if facts.is_role:
        return 8, Status.ROLE, Reason.ROLE_ACCOUNT
    return 9, Status.VALID, None


def is_deliverable(facts: Facts) -> bool:
    """Would a message be accepted now? With SMTP off: does the domain take mail at all."""
    if not facts.syntax_valid or not facts.dns.takes_mail:
        return False
    if not facts.smtp_checked:
        return True
    return facts.mailbox is MailboxOutcome.ACCEPTED


def form_b_status(facts: Facts) -> tuple[FormBStatus, Reason | None]:
    """Form B's status: from what the mail server said, whatever the domain's flags."""
    if not facts.syntax_valid:
        return FormBStatus.INVALID, Reason.INVALID_SYNTAX
    if (facts.dns.domain_exists and not facts.dns.takes_mail) or facts.dns is DnsOutcome.NXDOMAIN:
        return FormBStatus.INVALID, Reason.NO_MAIL_SERVER
    if facts.smtp_checked:
        match facts.mailbox:
            case MailboxOutcome.NOT_FOUND:
                return FormBStatus.INVALID, Reason.MAILBOX_NOT_FOUND
            case MailboxOutcome.DISABLED:
                return FormBStatus.INVALID, Reason.MAILBOX_DISABLED
            case MailboxOutcome.FULL:
                return FormBStatus.INVALID, Reason.MAILBOX_FULL
    if not facts.dns.takes_mail:
        return FormBStatus.UNKNOWN, facts.undetermined_reason or Reason.DNS_ERROR
    if facts.smtp_checked and facts.mailbox is not MailboxOutcome.ACCEPTED:
        return FormBStatus.UNKNOWN, facts.undetermined_reason or Reason.SMTP_UNREACHABLE
    if facts.smtp_checked and facts.is_catchall:
        return FormBStatus.ACCEPT_ALL, None
    return FormBStatus.VALID, None


FORM_B_SCORES: dict[FormBStatus, float] = {
    FormBStatus.VALID: DEFAULT_SCORES[Status.VALID],
    FormBStatus.ACCEPT_ALL: DEFAULT_SCORES[Status.CATCHALL],
    FormBStatus.INVALID: DEFAULT_SCORES[Status.INVALID],
    FormBStatus.UNKNOWN: DEFAULT_SCORES[Status.UNKNOWN],
}

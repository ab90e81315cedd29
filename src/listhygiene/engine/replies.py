"""What an SMTP reply to RCPT (or MAIL, or the banner) means for a verifier.

The enhanced status code (RFC 3463) decides where there is one; the reply text only where there
is none (or it is the uninformative x.0.0). The one mistake never to make: reading a refusal of
*us* (our IP on a blocklist, a policy) as "mailbox not found". So 5.7.x is always a block, and
text that speaks of blocklists, spam or policy overrides a bare 550.
"""

import re
from enum import Enum

from listhygiene.engine.smtp_client import Reply

__all__ = ["Limit", "Meaning", "classify", "limit_of"]


class Meaning(Enum):
    ACCEPTED = "accepted"
    NOT_FOUND = "not_found"  # 5.1.1, 5.1.0, 5.1.6, 550 user unknown
    DISABLED = "disabled"  # 5.2.1
    FULL = "full"  # 5.2.2 (4.2.2 too: over quota now)
    TOO_MANY = "too_many"  # 452/552 x.5.3: reconnect with fewer RCPT, not a verdict
    #: 421 "Error: too many errors" (Postfix's hard error limit): reconnect, fewer refusals a
    #: session; not a verdict for the recipients it cut off
    TOO_MANY_ERRORS = "too_many_errors"
    GREYLISTED = "greylisted"  # any other 4xx: try again later
    RATE_LIMITED = "rate_limited"  # 421, 4.7.x about rates or connections
    BLOCKED = "blocked"  # a policy refusal of the client (5.7.x, blocklists)
    SMTPUTF8 = "smtputf8"  # 5.6.7 / 553 for a UTF-8 address without SMTPUTF8
    FAILED = "failed"  # some other permanent error: the conversation failed, not the mailbox


_POLICY = re.compile(
    r"block|black ?list|spamhaus|spamcop|barracuda|\bdnsbl|\brbl\b|listed|reputation|policy|"
    r"banned|\bspam\b|abuse|client host|\bip\b.*(reject|denied)|poor|not allowed|"
    r"authentication required|relay(ing)? (access )?(denied|not permitted)|not permitted to relay",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(
    r"user unknown|unknown user|no such (user|mailbox|recipient|address)|does not exist|"
    r"doesn'?t exist|not exist|invalid (recipient|mailbox|address)|recipient (address )?rejected|"
    r"mailbox (unavailable|not found)|unknown (recipient|mailbox)|address rejected|"
    r"no mailbox|not found|undeliverable address|unrouteable address|user not found|"
    r"doesn'?t have an? .{0,40}account|no such account|account (does not|doesn'?t) exist",
    re.IGNORECASE,
)
_FULL = re.compile(
    r"mailbox (is )?full|over ?quota|quota exceeded|insufficient (system )?storage", re.IGNORECASE
)
_DISABLED = re.compile(
    r"disabled|deactivated|inactive|suspended|account (is )?locked", re.IGNORECASE
)
_TOO_MANY = re.compile(r"too many (recipients|rcpt)", re.IGNORECASE)
_RATE = re.compile(
    r"too many|rate|limit|try (again )?later|slow down|busy|concurrent", re.IGNORECASE
)
_GREY = re.compile(r"grey|gray", re.IGNORECASE)


_TOO_MANY_ERRORS = re.compile(r"too many (errors|bad commands|invalid recipients)", re.IGNORECASE)


class Limit(Enum):
    """What a host said we went too far in (docs/engine.md, "Hosts that defend themselves")."""

    ERRORS = "errors"  # 421 too many errors: Postfix's smtpd_hard_error_limit
    CONNECTIONS = "connections"  # 421 too many (concurrent) connections: anvil, Exchange
    RATE = "rate"  # a rate ban of the client: Gmail 4.7.28, Microsoft 4.7.500-699, Yahoo TSS
    PROTOCOL = "protocol"  # improper pipelining (554 5.5.0), a pregreet (521 5.5.1)


_CONNECTIONS = re.compile(r"too many (concurrent |simultaneous )?(smtp )?connections", re.I)
_RATE_BAN = re.compile(
    r"unusual rate|rate limit|\[TSS?\d\d\]|\bTSS\d\d\b|temporarily (deferred|rate limited|blocked)|"
    r"server busy|sending rate|too many (messages|sessions)",
    re.IGNORECASE,
)
_PROTOCOL = re.compile(r"synchroni[sz]ation|improper (command )?pipelining|protocol error", re.I)


def limit_of(reply: Reply) -> Limit | None:
    """The limit a refusal says we met, or None for an ordinary reply.

    "Too many recipients", whether 452 or a 421 that closes the session, is not one: it is how
    a host tells its cap per connection, which no client can know before, and the engine learns
    it. The others end a session or ban the client for a while, and a careful client never
    meets them with a host's documented defaults; each one is counted in the run's
    ``politeness`` (``limits_met``).
    """
    if reply.is_positive:
        return None
    text, enhanced = reply.text, reply.enhanced or ""
    if reply.code in (554, 521, 500) and _PROTOCOL.search(text):
        return Limit.PROTOCOL
    if not reply.is_transient:
        return None
    if _TOO_MANY_ERRORS.search(text):
        return Limit.ERRORS
    if _TOO_MANY.search(text):
        return None  # a recipient cap (see above)
    if _CONNECTIONS.search(text):
        return Limit.CONNECTIONS
    code = enhanced.split(".")
    if enhanced == "4.7.28" or (
        len(code) == 3 and code[1] == "7" and code[2].isdigit() and 500 <= int(code[2]) <= 699
    ):
        return Limit.RATE
    if _RATE_BAN.search(text) and not _GREY.search(text):
        return Limit.RATE
    return None


def classify(reply: Reply) -> Meaning:
    """The meaning of a reply to RCPT TO."""
    if reply.is_positive:
        return Meaning.ACCEPTED
    if reply.code == 421 and _TOO_MANY_ERRORS.search(reply.text):
        return Meaning.TOO_MANY_ERRORS
    enhanced = reply.enhanced
    if enhanced is not None and enhanced[2:] != "0.0":
        by_code = _by_enhanced(reply, enhanced)
        if by_code is not None:
            return by_code
    return _by_text(reply)


def _by_enhanced(reply: Reply, enhanced: str) -> Meaning | None:
    klass, subject, detail = enhanced.split(".")
    code = f"{subject}.{detail}"
    if subject == "5" and detail == "3":
        return Meaning.TOO_MANY  # x.5.3 too many recipients
    if reply.code == 421:
        return Meaning.TOO_MANY if _TOO_MANY.search(reply.text) else Meaning.RATE_LIMITED
    if klass == "4":
        if code in ("2.2",):
            return Meaning.FULL
        if subject == "7" and _RATE.search(reply.text) and not _GREY.search(reply.text):
            return Meaning.RATE_LIMITED
        return Meaning.GREYLISTED
    if subject == "7" or code in ("1.7", "1.8"):
        return Meaning.BLOCKED  # 5.7.x: policy, about us; 5.1.7/5.1.8: our sender refused
    if code in ("1.1", "1.0", "1.6", "1.3"):
        return Meaning.NOT_FOUND
    if code == "2.1":
        return Meaning.DISABLED
    if code == "2.2":
        return Meaning.FULL
    if code == "6.7":
        return Meaning.SMTPUTF8
    if code == "4.1" and _NOT_FOUND.search(reply.text):
        # Microsoft 365 answers unknown recipients "550 5.4.1 Recipient address rejected"
        return Meaning.NOT_FOUND
    return None  # other codes: let the text speak


def _by_text(reply: Reply) -> Meaning:
    text = reply.text
    if reply.code == 421:
        return Meaning.TOO_MANY if _TOO_MANY.search(text) else Meaning.RATE_LIMITED
    if reply.code in (452, 552) and _TOO_MANY.search(text):
        return Meaning.TOO_MANY
    if reply.is_transient:
        if _FULL.search(text):
            return Meaning.FULL
        if _RATE.search(text) and not _GREY.search(text):
            return Meaning.RATE_LIMITED
        return Meaning.GREYLISTED
    if _POLICY.search(text):
        return Meaning.BLOCKED
    if _NOT_FOUND.search(text):
        return Meaning.NOT_FOUND
    if _FULL.search(text):
        return Meaning.FULL
    if _DISABLED.search(text):
        return Meaning.DISABLED
    # bare codes, as RFC 5321 defines them: 552 storage exceeded, 550/551/553 no such mailbox
    if reply.code == 552:
        return Meaning.FULL
    if reply.code in (550, 551, 553):
        return Meaning.NOT_FOUND
    return Meaning.FAILED

"""What a reply to RCPT means, for replies that real mail providers send.

Replies are built from their wire lines by the SMTP client's own parser (``_parse_reply``), so
the enhanced status code is read exactly as in a probe. The rules (PRODUCT.md, "Statuses"): the
enhanced code (RFC 3463) decides where there is one, the text where there is none; a refusal of
*us* (5.7.x, a blocklist, a policy) is never "mailbox not found"; "too many recipients" (452 or
552 with x.5.3) is not a verdict.
"""

import pytest

from listhygiene.engine.replies import Meaning, classify
from listhygiene.engine.smtp_client import Reply, _parse_reply


def reply(*lines: str) -> Reply:
    return _parse_reply([line.encode() for line in lines])


def test_parse_reply_reads_the_enhanced_code_of_the_first_line() -> None:
    parsed = reply(
        "550-5.1.1 The email account that you tried to reach does not exist. Please try",
        "550 5.1.1 double-checking the recipient's email address for typos - gsmtp",
    )
    assert (parsed.code, parsed.enhanced) == (550, "5.1.1")
    assert parsed.text.splitlines()[0].startswith("5.1.1 The email account")
    assert reply("550 No such user here").enhanced is None
    # a class that disagrees with the reply code is not an enhanced code
    assert reply("550 4.1.1 odd").enhanced is None
    assert reply("550 5.1.10 RESOLVER.ADR.RecipientNotFound").enhanced == "5.1.10"


CASES: list[tuple[str, list[str], Meaning]] = [
    # -- accepted
    ("generic 250", ["250 2.1.5 OK"], Meaning.ACCEPTED),
    ("postfix 250", ["250 2.1.5 Ok"], Meaning.ACCEPTED),
    ("gmail 250", ["250 2.1.5 OK d9-20020a05600c34c900b0040e3ac9f4c4si123wmq.5 - gsmtp"],
     Meaning.ACCEPTED),
    ("251 forward", ["251 2.1.5 User not local; will forward to <x@example.org>"],
     Meaning.ACCEPTED),
    # -- mailbox not found
    (
        "gmail 5.1.1",
        [
            "550-5.1.1 The email account that you tried to reach does not exist. Please try",
            "550-5.1.1 double-checking the recipient's email address for typos or",
            "550-5.1.1 unnecessary spaces. For more information, go to",
            "550 5.1.1  https://support.google.com/mail/?p=NoSuchUser a1si123 - gsmtp",
        ],
        Meaning.NOT_FOUND,
    ),
    ("microsoft 365 5.4.1",
     ["550 5.4.1 Recipient address rejected: Access denied. For more information see "
      "https://aka.ms/EXOSmtpErrors [AM4PEPF00027A6C.eurprd04.prod.outlook.com]"],
     Meaning.NOT_FOUND),
    ("exchange 5.1.10",
     ["550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup"],
     Meaning.NOT_FOUND),
    ("outlook.com 5.5.0 mailbox unavailable",
     ["550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302)"],
     Meaning.NOT_FOUND),
    ("postfix local table",
     ["550 5.1.1 <nobody@example.com>: Recipient address rejected: User unknown in local "
      "recipient table"], Meaning.NOT_FOUND),
    ("postfix relay table with enhanced code",
     ["550 5.1.1 <nobody@example.com>: Recipient address rejected: User unknown in relay "
      "recipient table"], Meaning.NOT_FOUND),
    ("icloud", ["550 5.1.1 <nobody@icloud.com>: user does not exist"], Meaning.NOT_FOUND),
    ("5.1.0 address rejected", ["550 5.1.0 Address rejected."], Meaning.NOT_FOUND),
    ("sendmail 5.0.0 (uninformative code: text decides)",
     ["550 5.0.0 <nobody@example.com>... User unknown"], Meaning.NOT_FOUND),
    ("bare 550 no such user", ["550 No such user here"], Meaning.NOT_FOUND),
    ("bare 550 requested action", ["550 Requested action not taken: mailbox unavailable"],
     Meaning.NOT_FOUND),
    ("mail.ru",
     ["550 Message was not accepted -- invalid mailbox.  Local mailbox nobody@mail.ru is "
      "unavailable: user not found"], Meaning.NOT_FOUND),
    ("user moved 5.1.6", ["551 5.1.6 User has moved; please try <new@example.org>"],
     Meaning.NOT_FOUND),
    # -- disabled, full
    ("mailbox disabled", ["550 5.2.1 <evan@example.com>: Mailbox disabled, not accepting messages"],
     Meaning.DISABLED),
    ("gmail disabled",
     ["550-5.2.1 The email account that you tried to reach is disabled. Learn more at",
      "550 5.2.1  https://support.google.com/mail/?p=DisabledUser a1si123 - gsmtp"],
     Meaning.DISABLED),
    ("mailbox full", ["552 5.2.2 <dana@example.com>: Mailbox full, over quota"], Meaning.FULL),
    ("gmail over quota (temporary)",
     ["452-4.2.2 The email account that you tried to reach is over quota. Please direct",
      "452 4.2.2 the recipient to https://support.google.com/mail/?p=OverQuotaTemp - gsmtp"],
     Meaning.FULL),
    ("bare 552 over quota", ["552 Requested mail action aborted: exceeded storage allocation "
                             "(over quota)"], Meaning.FULL),
    # -- too many recipients: not a verdict
    ("452 4.5.3", ["452 4.5.3 Too many recipients"], Meaning.TOO_MANY),
    ("552 5.5.3", ["552 5.5.3 Error: too many recipients"], Meaning.TOO_MANY),
    ("452 bare", ["452 Too many recipients received this hour"], Meaning.TOO_MANY),
    ("421 too many recipients",
     ["421 4.7.0 Too many recipients in this session, closing connection"], Meaning.TOO_MANY),
    # -- temporary: greylisting, rate limits
    ("postgrey",
     ["450 4.2.0 <greta@example.com>: Recipient address rejected: Greylisted, see "
      "http://postgrey.schweikert.ch/help/example.com.html"], Meaning.GREYLISTED),
    ("greylisting 451 4.7.1", ["451 4.7.1 Greylisting in action, please come back later"],
     Meaning.GREYLISTED),
    ("bare 450 greylisted", ["450 Greylisted, please try again in 300 seconds"],
     Meaning.GREYLISTED),
    ("temporary lookup failure", ["451 4.3.0 <x@example.com>: Temporary lookup failure"],
     Meaning.GREYLISTED),
    ("yahoo TSS04",
     ["421 4.7.0 [TSS04] Messages from 203.0.113.7 temporarily deferred due to unexpected "
      "volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes"],
     Meaning.RATE_LIMITED),
    ("gmail 421 4.7.28",
     ["421-4.7.28 [203.0.113.7      15] Our system has detected an unusual rate of",
      "421 4.7.28 unsolicited mail originating from your IP address. - gsmtp"],
     Meaning.RATE_LIMITED),
    ("too many connections", ["421 4.7.0 mx.example.com Too many concurrent connections, try "
                              "again later"], Meaning.RATE_LIMITED),
    ("450 4.7.1 rate limit", ["450 4.7.1 Client rate limit exceeded, slow down"],
     Meaning.RATE_LIMITED),
    # -- a refusal of us: never "mailbox not found"
    ("spamhaus",
     ["554 5.7.1 Service unavailable; Client host [203.0.113.7] blocked using zen.spamhaus.org; "
      "https://www.spamhaus.org/query/ip/203.0.113.7"], Meaning.BLOCKED),
    ("spamhaus without enhanced code",
     ["554 Service unavailable; Client host [203.0.113.7] blocked using zen.spamhaus.org"],
     Meaning.BLOCKED),
    ("barracuda",
     ["554 5.7.1 Service unavailable; Client host [203.0.113.7] blocked using "
      "b.barracudacentral.org"], Meaning.BLOCKED),
    ("5.7.1 says user unknown: the enhanced code decides",
     ["550 5.7.1 <x@example.com>: Recipient address rejected: User unknown"], Meaning.BLOCKED),
    ("bare 550 blocked by policy", ["550 Blocked by policy"], Meaning.BLOCKED),
    ("microsoft banned IP", ["550 5.7.606 Access denied, banned sending IP [203.0.113.7]"],
     Meaning.BLOCKED),
    ("microsoft block list S3150",
     ["550 5.7.1 Unfortunately, messages from [203.0.113.7] weren't sent. Please contact your "
      "Internet service provider since part of their network is on our block list (S3150)."],
     Meaning.BLOCKED),
    ("gmail unauthenticated",
     ["550-5.7.26 This mail has been blocked because the sender is unauthenticated.",
      "550 5.7.26 Gmail requires all senders to authenticate with either SPF or DKIM. - gsmtp"],
     Meaning.BLOCKED),
    ("yahoo policy", ["554 5.7.9 Message not accepted for policy reasons."], Meaning.BLOCKED),
    ("relay denied", ["554 5.7.1 <x@example.org>: Relay access denied"], Meaning.BLOCKED),
    ("bare relay denied", ["554 Relay access denied"], Meaning.BLOCKED),
    ("bare blacklisted ip", ["550 Your IP address 203.0.113.7 has been blacklisted"],
     Meaning.BLOCKED),
    ("gmx block list banner",
     ["554-gmx.net (mxgmx017) Nemesis ESMTP Service not available",
      "554-No SMTP service",
      "554 IP address is block listed."], Meaning.BLOCKED),
    ("starttls required", ["530 5.7.0 Must issue a STARTTLS command first"], Meaning.BLOCKED),
    # -- SMTPUTF8
    ("553 5.6.7", ["553 5.6.7 Must declare SMTPUTF8 to send unicode address"], Meaning.SMTPUTF8),
    ("550 5.6.7", ["550 5.6.7 SMTPUTF8 is required, but was not offered by host"],
     Meaning.SMTPUTF8),
    # -- other permanent errors: the conversation failed, not the mailbox
    ("554 transaction failed", ["554 Transaction failed"], Meaning.FAILED),
    ("500 syntax", ["500 5.5.2 Error: bad syntax"], Meaning.FAILED),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "meaning"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classify(lines: list[str], meaning: Meaning) -> None:
    assert classify(reply(*lines)) is meaning


def test_reply_built_by_hand() -> None:
    assert classify(Reply(550, "5.1.1 no such user", "5.1.1")) is Meaning.NOT_FOUND
    assert classify(Reply(550, "no such user")) is Meaning.NOT_FOUND
    assert classify(Reply(550, "5.7.1 no such user", "5.7.1")) is Meaning.BLOCKED


# Real replies that an earlier classifier read wrongly (the reasons say how).
MISREAD: list[tuple[str, list[str], Meaning, str]] = [
    (
        "yahoo 552 mailbox not found",
        ["552 1 Requested mail action aborted, mailbox not found"],
        Meaning.NOT_FOUND,
        "replies.py _by_text: `_FULL.search(text) or reply.code == 552` is checked before "
        "_NOT_FOUND, so Yahoo's unknown-user reply (552, no enhanced code, 'mailbox not found') "
        "is read as FULL (form A risky/mailbox_full)",
    ),
    (
        "yahoo 554 no account",
        ["554 delivery error: dd This user doesn't have a yahoo.com account (x@yahoo.com) "
         "[0] - mta1234.mail.gq1.yahoo.com"],
        Meaning.NOT_FOUND,
        "replies.py _NOT_FOUND does not match \"doesn't have a ... account\" and 554 is not in "
        "the bare-code fallback (550, 551, 553): Yahoo's unknown-user reply becomes FAILED "
        "(unknown/smtp_unreachable)",
    ),
    (
        "postfix relay table without enhanced code",
        ["550 <nobody@example.com>: Recipient address rejected: User unknown in relay recipient "
         "table"],
        Meaning.NOT_FOUND,
        "replies.py _POLICY matches 'relay' in Postfix's 'User unknown in relay recipient "
        "table', so a plain unknown user is read as BLOCKED",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("lines", "meaning"),
    [c[1:3] for c in MISREAD],
    ids=[c[0] for c in MISREAD],
)
def test_classify_misread(lines: list[str], meaning: Meaning) -> None:
    assert classify(reply(*lines)) is meaning


def test_refusal_of_our_sender_is_never_mailbox_not_found() -> None:
    # Microsoft 365's answer when it distrusts the sending host.
    meaning = classify(reply("550 5.1.8 Access denied, bad outbound sender. AS(42004)"))
    assert meaning is Meaning.BLOCKED

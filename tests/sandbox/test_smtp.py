"""The sandbox's mail hosts, spoken to over real sockets with aiosmtplib (and raw streams)."""

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import aiosmtplib
import pytest

from listhygiene.engine.retry import named_delay
from listhygiene.sandbox import Sandbox

SENDER = "probe@verifier.test"


def mx(host: str) -> list[dict]:
    return [{"preference": 10, "host": host}]


WORLD = {
    "domains": {
        "acme.test": {
            "mx": mx("mx.acme.test"),
            "mailboxes": ["alice", "Bob"],
            "full": ["carol"],
            "disabled": ["dave"],
        },
        "catchall.test": {"mx": mx("mx.catchall.test"), "catch_all": True},
        "grey.test": {"mx": mx("mx.grey.test"), "mailboxes": ["erin"]},
        "named.test": {"mx": mx("mx.named.test"), "mailboxes": ["erin"]},
        "capped.test": {"mx": mx("mx.capped.test"), "mailboxes": [f"u{i}" for i in range(6)]},
        "capped421.test": {"mx": mx("mx.capped421.test"), "mailboxes": [f"u{i}" for i in range(6)]},
        "blocked.test": {"mx": mx("mx.blocked.test"), "mailboxes": ["frank"]},
        "blockmail.test": {"mx": mx("mx.blockmail.test"), "mailboxes": ["frank"]},
        "blockconnect.test": {"mx": mx("mx.blockconnect.test"), "mailboxes": ["frank"]},
        "ascii.test": {"mx": mx("mx.ascii.test"), "mailboxes": ["josé", "plain"]},
        "utf8.test": {"mx": mx("mx.utf8.test"), "mailboxes": ["josé"]},
        "tarpit.test": {"mx": mx("mx.tarpit.test"), "mailboxes": ["gus"]},
        "refused.test": {"mx": mx("mx.refused.test")},
        "silent.test": {"mx": mx("mx.silent.test")},
        "garbage.test": {"mx": mx("mx.garbage.test")},
        "drop.test": {"mx": mx("mx.drop.test")},
        "endless.test": {"mx": mx("mx.endless.test")},
        "backup.test": {
            "mx": [
                {"preference": 10, "host": "mx1.backup.test"},
                {"preference": 20, "host": "mx2.backup.test"},
            ],
            "mailboxes": ["hal"],
        },
        "nopipe.test": {"mx": mx("mx.nopipe.test"), "mailboxes": ["ivy"]},
        "tls.test": {"mx": mx("mx.tls.test"), "mailboxes": ["jo"]},
        "laggy.test": {"mx": mx("mx.laggy.test"), "mailboxes": ["kim", "lee", "max"]},
        "busy.test": {"mx": mx("mx.busy.test"), "mailboxes": ["ned"]},
        "implicit.test": {"a": ["mail.implicit.test"], "mailboxes": ["oz"]},
    },
    "hosts": {
        "mx.acme.test": {},
        "mx.catchall.test": {},
        "mx.grey.test": {"greylist_delay_ms": 400},
        "mx.named.test": {"greylist_delay_ms": 1500, "greylist_names_delay": True},
        "mx.capped.test": {"max_rcpt_per_connection": 3},
        "mx.capped421.test": {"max_rcpt_per_connection": 3, "too_many_reply": "421"},
        "mx.blocked.test": {"block": {"stage": "rcpt", "blocklist": "zen.spamhaus.org"}},
        "mx.blockmail.test": {"block": {"stage": "mail", "blocklist": "b.barracudacentral.org"}},
        "mx.blockconnect.test": {"block": {"stage": "connect", "blocklist": "bl.spamcop.net"}},
        "mx.ascii.test": {"smtputf8": False},
        "mx.utf8.test": {},
        "mx.tarpit.test": {"banner_delay_ms": 1500},
        "mx.refused.test": {"behaviour": "refuse"},
        "mx.silent.test": {"behaviour": "silent"},
        "mx.garbage.test": {"behaviour": "garbage"},
        "mx.drop.test": {"behaviour": "drop"},
        "mx.endless.test": {"behaviour": "endless"},
        "mx1.backup.test": {"behaviour": "refuse"},
        "mx2.backup.test": {},
        "mx.nopipe.test": {"pipelining": False},
        "mx.tls.test": {"starttls": True},
        "mx.laggy.test": {"latency_ms": 300},
        "mx.busy.test": {"max_connections": 2},
        "mail.implicit.test": {},
    },
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def client(sandbox: Sandbox, host: str, timeout: float = 5) -> aiosmtplib.SMTP:
    return aiosmtplib.SMTP(
        hostname=sandbox.address_of(host),
        port=sandbox.smtp_port,
        timeout=timeout,
        start_tls=False,
        local_hostname="verifier.test",
    )


@pytest.fixture
async def acme(sandbox: Sandbox) -> AsyncIterator[aiosmtplib.SMTP]:
    smtp = client(sandbox, "mx.acme.test")
    await smtp.connect()
    await smtp.ehlo()
    await smtp.mail(SENDER)
    yield smtp
    smtp.close()


async def rcpt(smtp: aiosmtplib.SMTP, address: str) -> tuple[int, str]:
    response = await smtp.execute_command(b"RCPT", f"TO:<{address}>".encode())
    return response.code, response.message


async def probe(sandbox: Sandbox, host: str, address: str, sender: str = SENDER) -> tuple[int, str]:
    smtp = client(sandbox, host)
    await smtp.connect()
    await smtp.ehlo()
    await smtp.mail(sender)
    try:
        return await rcpt(smtp, address)
    finally:
        smtp.close()


# -- mailboxes ----------------------------------------------------------------------------------


async def test_known_mailboxes_accepted_case_insensitively(acme: aiosmtplib.SMTP) -> None:
    assert (await rcpt(acme, "alice@acme.test"))[0] == 250
    assert (await rcpt(acme, "bob@ACME.test"))[0] == 250


async def test_unknown_mailbox_is_550_5_1_1(acme: aiosmtplib.SMTP) -> None:
    code, message = await rcpt(acme, "zed@acme.test")
    assert code == 550
    assert message.startswith("5.1.1")


async def test_mailbox_full_is_552_5_2_2(acme: aiosmtplib.SMTP) -> None:
    code, message = await rcpt(acme, "carol@acme.test")
    assert (code, message[:5]) == (552, "5.2.2")


async def test_disabled_mailbox_is_550_5_2_1(acme: aiosmtplib.SMTP) -> None:
    code, message = await rcpt(acme, "dave@acme.test")
    assert (code, message[:5]) == (550, "5.2.1")


async def test_foreign_domain_is_relay_denied(acme: aiosmtplib.SMTP) -> None:
    code, message = await rcpt(acme, "alice@catchall.test")
    assert (code, message[:5]) == (554, "5.7.1")


async def test_catch_all_accepts_any_local_part(sandbox: Sandbox) -> None:
    assert (await probe(sandbox, "mx.catchall.test", "x7f3kq9z@catchall.test"))[0] == 250


async def test_implicit_mx_host_takes_mail(sandbox: Sandbox) -> None:
    assert (await probe(sandbox, "mail.implicit.test", "oz@implicit.test"))[0] == 250


# -- greylisting --------------------------------------------------------------------------------


async def test_greylisting_defers_then_accepts_after_the_delay(sandbox: Sandbox) -> None:
    sender = "grey1@verifier.test"
    code, message = await probe(sandbox, "mx.grey.test", "erin@grey.test", sender)
    assert (code, message[:5]) == (450, "4.2.0")
    # too early: still deferred
    assert (await probe(sandbox, "mx.grey.test", "erin@grey.test", sender))[0] == 450
    await asyncio.sleep(0.45)
    assert (await probe(sandbox, "mx.grey.test", "erin@grey.test", sender))[0] == 250
    # a new triplet (another sender) starts over
    assert (await probe(sandbox, "mx.grey.test", "erin@grey.test", "other@v.test"))[0] == 450


async def test_greylisting_can_name_its_delay(sandbox: Sandbox) -> None:
    code, message = await probe(sandbox, "mx.named.test", "erin@named.test", "named@v.test")
    assert code == 450
    assert message.startswith("4.2.0")
    assert "Greylisted for 2 seconds" in message  # 1.5 s, in whole seconds rounded up
    assert named_delay(message) == 2  # as the engine reads it
    assert (await probe(sandbox, "mx.named.test", "erin@named.test", "named@v.test"))[0] == 450


# -- per-connection caps ------------------------------------------------------------------------


async def test_rcpt_cap_answers_452_4_5_3_and_keeps_the_session(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.capped.test")
    await smtp.connect()
    await smtp.ehlo()
    await smtp.mail(SENDER)
    codes = [(await rcpt(smtp, f"u{i}@capped.test")) for i in range(5)]
    assert [c for c, _ in codes] == [250, 250, 250, 452, 452]
    assert codes[3][1].startswith("4.5.3")
    assert (await smtp.noop()).code == 250  # still connected
    smtp.close()


async def test_rcpt_cap_with_421_closes_the_connection(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.capped421.test")
    await smtp.connect()
    await smtp.ehlo()
    await smtp.mail(SENDER)
    for i in range(3):
        assert (await rcpt(smtp, f"u{i}@capped421.test"))[0] == 250
    assert (await rcpt(smtp, "u3@capped421.test"))[0] == 421
    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await smtp.noop()


async def test_max_connections_refuses_the_extra_one_with_421(sandbox: Sandbox) -> None:
    first, second = client(sandbox, "mx.busy.test"), client(sandbox, "mx.busy.test")
    await first.connect()
    await second.connect()
    third = client(sandbox, "mx.busy.test")
    with pytest.raises(aiosmtplib.SMTPConnectResponseError) as refused:
        await third.connect()
    assert refused.value.code == 421
    assert sandbox.stats("mx.busy.test").max_active == 3
    first.close()
    second.close()


# -- policy refusals ----------------------------------------------------------------------------


async def test_policy_block_at_rcpt_names_the_blocklist(sandbox: Sandbox) -> None:
    code, message = await probe(sandbox, "mx.blocked.test", "frank@blocked.test")
    assert (code, message[:5]) == (550, "5.7.1")
    assert "zen.spamhaus.org" in message
    assert "127.0.0.1" in message  # it is about the client, not the mailbox


async def test_policy_block_at_mail_from(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.blockmail.test")
    await smtp.connect()
    await smtp.ehlo()
    with pytest.raises(aiosmtplib.SMTPSenderRefused) as refused:
        await smtp.mail(SENDER)
    assert refused.value.code == 550
    assert "b.barracudacentral.org" in refused.value.message
    smtp.close()


async def test_policy_block_at_connect_is_a_554_greeting(sandbox: Sandbox) -> None:
    with pytest.raises(aiosmtplib.SMTPConnectResponseError) as refused:
        await client(sandbox, "mx.blockconnect.test").connect()
    assert refused.value.code == 554
    assert "5.7.1" in refused.value.message
    assert "bl.spamcop.net" in refused.value.message


# -- SMTPUTF8 -----------------------------------------------------------------------------------


async def test_smtputf8_advertised_and_utf8_local_part_accepted(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.utf8.test")
    await smtp.connect()
    await smtp.ehlo()
    assert smtp.supports_extension("smtputf8")
    await smtp.mail(SENDER, options=["SMTPUTF8"])
    assert (await rcpt(smtp, "josé@utf8.test"))[0] == 250
    await smtp.rset()
    await smtp.mail(SENDER)  # a UTF-8 recipient needs SMTPUTF8 declared at MAIL (RFC 6531)
    code, message = await rcpt(smtp, "josé@utf8.test")
    assert (code, message[:5]) == (553, "5.6.7")
    smtp.close()


async def test_no_smtputf8_host_refuses_utf8(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.ascii.test")
    await smtp.connect()
    await smtp.ehlo()
    assert not smtp.supports_extension("smtputf8")
    with pytest.raises(aiosmtplib.SMTPSenderRefused):
        await smtp.mail(SENDER, options=["SMTPUTF8"])
    await smtp.mail(SENDER)
    code, _ = await rcpt(smtp, "josé@ascii.test")
    assert code == 500  # non-ASCII refused outright
    assert (await rcpt(smtp, "plain@ascii.test"))[0] == 250
    smtp.close()


# -- slow, refused and broken hosts -------------------------------------------------------------


async def test_slow_banner_outlasts_an_impatient_client(sandbox: Sandbox) -> None:
    started = time.monotonic()
    with pytest.raises(aiosmtplib.SMTPTimeoutError):
        await client(sandbox, "mx.tarpit.test", timeout=0.3).connect()
    assert time.monotonic() - started < 1.4  # the client's time-out ended it, not the banner
    patient = client(sandbox, "mx.tarpit.test", timeout=5)
    started = time.monotonic()
    await patient.connect()
    assert time.monotonic() - started >= 1.5
    patient.close()


async def test_a_client_hanging_up_before_a_slow_banner_is_closed_at_once(
    tarpit: Sandbox,
) -> None:
    """The tarpit's banner comes after 120 s; a client that gives up first is seen to leave
    (before, the server's side stayed half-open until the kernel dropped it, 60 s later)."""
    stats = tarpit.stats("mx.slow.test")
    _, writer = await asyncio.open_connection(tarpit.address_of("mx.slow.test"), tarpit.smtp_port)
    for _ in range(300):  # the server's loop runs in another thread
        if stats.active == 1:
            break
        await asyncio.sleep(0.05)
    assert stats.active == 1
    writer.close()
    await writer.wait_closed()
    for _ in range(600):  # 30 s at most: well before the kernel's 60 s and the banner's 120 s
        if stats.active == 0:
            break
        await asyncio.sleep(0.05)
    assert stats.active == 0
    assert len(stats.closed_at) == 1


async def test_connection_refused(sandbox: Sandbox) -> None:
    with pytest.raises(aiosmtplib.SMTPConnectError) as refused:
        await client(sandbox, "mx.refused.test").connect()
    assert isinstance(refused.value.__cause__, ConnectionRefusedError)


async def test_silent_host_accepts_tcp_and_never_speaks(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.silent.test")
    stats.reset()
    reader, writer = await asyncio.open_connection(
        sandbox.address_of("mx.silent.test"), sandbox.smtp_port
    )
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), timeout=0.5)
    writer.close()
    await writer.wait_closed()
    for _ in range(100):  # the server's loop runs in another thread
        if stats.closed_at:
            break
        await asyncio.sleep(0.01)
    assert len(stats.opened_at) == len(stats.closed_at) == 1
    assert stats.opened_at[0] < stats.closed_at[0]
    with pytest.raises(aiosmtplib.SMTPTimeoutError):
        await client(sandbox, "mx.silent.test", timeout=0.5).connect()


async def test_garbage_host_is_not_smtp(sandbox: Sandbox) -> None:
    with pytest.raises(aiosmtplib.SMTPException):
        await client(sandbox, "mx.garbage.test", timeout=2).connect()


async def test_drop_host_greets_then_hangs_up(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.drop.test", timeout=2)
    assert (await smtp.connect()).code == 220
    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await smtp.ehlo()


async def test_endless_banner_never_ends_its_line(sandbox: Sandbox) -> None:
    reader, writer = await asyncio.open_connection(
        sandbox.address_of("mx.endless.test"), sandbox.smtp_port, limit=2**16
    )
    with pytest.raises(ValueError, match="limit"):  # StreamReader gives up at its limit
        await asyncio.wait_for(reader.readline(), timeout=5)
    writer.close()


async def test_several_mx_with_the_primary_down(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    hosts = sorted(
        (r.preference, r.exchange.to_text(omit_final_dot=True))
        for r in resolver.resolve("backup.test", "MX")
    )
    assert [h for _, h in hosts] == ["mx1.backup.test", "mx2.backup.test"]
    with pytest.raises(aiosmtplib.SMTPConnectError):
        await client(sandbox, "mx1.backup.test").connect()
    assert (await probe(sandbox, "mx2.backup.test", "hal@backup.test"))[0] == 250


# -- extensions and latency ---------------------------------------------------------------------


async def test_pipelining_advertised_and_honoured(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.laggy.test")
    await smtp.connect()
    await smtp.ehlo()
    assert smtp.supports_extension("pipelining")
    smtp.close()
    before = sandbox.stats("mx.laggy.test").max_commands_per_read
    reader, writer = await asyncio.open_connection(
        sandbox.address_of("mx.laggy.test"), sandbox.smtp_port
    )
    assert (await reader.readline()).startswith(b"220")
    writer.write(b"EHLO verifier.test\r\n")
    while not (await reader.readline()).startswith(b"250 "):
        pass
    batch = f"MAIL FROM:<{SENDER}>\r\n" + "".join(
        f"RCPT TO:<{who}@laggy.test>\r\n" for who in ("kim", "nobody", "lee", "max")
    )
    started = time.monotonic()
    writer.write(batch.encode())
    replies = [(await reader.readline())[:9] for _ in range(5)]
    elapsed = time.monotonic() - started
    writer.close()
    assert replies == [b"250 2.1.0", b"250 2.1.5", b"550 5.1.1", b"250 2.1.5", b"250 2.1.5"]
    assert sandbox.stats("mx.laggy.test").max_commands_per_read >= 5 > before
    # five commands in one write cost one reply latency (300 ms), not five
    assert 0.3 <= elapsed < 1.2


async def test_host_without_pipelining_does_not_advertise_it(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.nopipe.test")
    await smtp.connect()
    await smtp.ehlo()
    assert not smtp.supports_extension("pipelining")
    assert smtp.supports_extension("enhancedstatuscodes")
    smtp.close()


async def test_reply_latency_applies_to_every_round_trip(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.laggy.test")
    started = time.monotonic()
    await smtp.connect()
    assert time.monotonic() - started >= 0.3  # the banner
    started = time.monotonic()
    await smtp.ehlo()
    await smtp.mail(SENDER)
    assert time.monotonic() - started >= 0.6  # two commands waited for one by one
    smtp.close()


async def test_starttls_with_a_self_signed_certificate(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.tls.test")
    await smtp.connect()
    await smtp.ehlo()
    assert smtp.supports_extension("starttls")
    with pytest.raises(ssl.SSLCertVerificationError, match="self-signed certificate"):
        # a verifying client rejects the self-signed certificate ...
        await smtp.starttls(validate_certs=True)
    smtp.close()
    smtp = client(sandbox, "mx.tls.test")
    await smtp.connect()
    await smtp.ehlo()
    await smtp.starttls(validate_certs=False)  # ... an opportunistic one goes on
    assert smtp.is_connected
    await smtp.ehlo()
    await smtp.mail(SENDER)
    assert (await rcpt(smtp, "jo@tls.test"))[0] == 250
    smtp.close()


async def test_host_statistics_count_connections_and_commands(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.catchall.test")
    stats.reset()
    for local in ("a", "b"):
        await probe(sandbox, "mx.catchall.test", f"{local}@catchall.test")
    assert (stats.connections, stats.mail_commands, stats.rcpt_commands) == (2, 2, 2)
    assert stats.recipients == ["a@catchall.test", "b@catchall.test"]

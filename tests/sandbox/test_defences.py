"""The sandbox hosts' self-defences (docs/sandbox.md): Postfix's error limits, anvil and
postscreen, Exchange's tarpit, strict pipelining, required TLS and big providers' shared limits,
spoken to over real sockets. Every test has hosts of its own: the client is always 127.0.0.1,
and the hosts remember it (anvil's counts, postscreen's cache, a provider's ban)."""

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiosmtplib
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.sandbox.world import World, WorldError
from tests.sandbox.test_cli import cli

SENDER = "probe@verifier.test"
CLIENT = "127.0.0.1"
MAILBOXES = ["alice", "bob"]


def mx(host: str) -> list[dict]:
    return [{"preference": 10, "host": host}]


def domain_of(host: str) -> str:
    return host.removeprefix("mx.").removeprefix("mx1.").removeprefix("mx2.")


HOSTS: dict[str, dict[str, Any]] = {
    "mx.harvest.test": {"soft_error_limit": 2, "hard_error_limit": 4, "error_sleep_ms": 40},
    "mx.rset.test": {"hard_error_limit": 3},
    "mx.exchange.test": {"rejected_rcpt_delay_ms": 60},
    "mx.sleepy.test": {"soft_error_limit": 1, "error_sleep_ms": 30},
    "mx.anvil.test": {"max_connections_per_client": 2},
    "mx.anvilslow.test": {"max_connections_per_client": 1, "latency_ms": 100},
    "mx.rate.test": {"connection_rate_limit": 3, "rate_window_ms": 1000},
    "mx.screen.test": {"postscreen": {"greet_wait_ms": 400}},
    "mx.patient.test": {"postscreen": {"greet_wait_ms": 100}},
    "mx.deep.test": {"postscreen": {"greet_wait_ms": 30, "deep_tests": True}},
    "mx.strict.test": {"pipelining": False, "strict_pipelining": True},
    "mx.strictslow.test": {
        "pipelining": False,
        "strict_pipelining": True,
        "banner_delay_ms": 200,
    },
    "mx.lenient.test": {"pipelining": True, "strict_pipelining": True},
    "mx.tlsonly.test": {"starttls": True, "require_tls": True},
    "mx.concurrent.test": {},
    "mx2.concurrent.test": {},
}
STYLES = ("gmail", "microsoft", "yahoo", "generic")
for style in STYLES:
    HOSTS[f"mx1.{style}.test"] = {}
    HOSTS[f"mx2.{style}.test"] = {}

WORLD: dict[str, Any] = {
    "domains": {
        domain_of(host): {
            "mx": mx(host),
            "mailboxes": MAILBOXES,
            "disabled": ["dave"],
        }
        for host in HOSTS
        if not host.startswith("mx2.")
    },
    "hosts": HOSTS,
    "providers": {
        **{
            style: {
                "hosts": [f"mx1.{style}.test", f"mx2.{style}.test"],
                "max_sessions": 2,
                "ban_ms": 800,
                "style": style,
            }
            for style in STYLES
        },
        "Concurrent Inc": {
            "hosts": ["mx.concurrent.test", "mx2.concurrent.test"],
            "max_concurrent": 2,
            "ban_ms": 800,
        },
    },
}

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD

PROVIDER_REPLIES = {
    "gmail": (
        "421-4.7.28 [127.0.0.1] Our system has detected an unusual rate of\n"
        "421-4.7.28 unsolicited mail originating from your IP address. To protect our\n"
        "421 4.7.28 users from spam, mail sent from your IP address has been temporarily "
        "rate limited."
    ),
    "microsoft": "421 4.7.500 Server busy. Please try again later from [127.0.0.1]. (S77714)",
    "yahoo": (
        "421 4.7.0 [TSS04] Messages from 127.0.0.1 temporarily deferred due to unexpected "
        "volume or user complaints"
    ),
    "generic": "421 4.7.0 Too many connections from 127.0.0.1 in a short time, try again later",
}


class Line:
    """A raw SMTP client: what was said, line by line, and when the server hung up."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, sandbox: Sandbox, host: str) -> "Line":
        reader, writer = await asyncio.open_connection(sandbox.address_of(host), sandbox.smtp_port)
        return cls(reader, writer)

    async def line(self) -> str:
        raw = await asyncio.wait_for(self.reader.readline(), timeout=5)
        return raw.decode().rstrip("\r\n")

    async def reply(self) -> str:
        """One whole reply, its lines joined by "\\n"; "" when the server hung up."""
        lines = [await self.line()]
        while lines[-1][3:4] == "-":
            lines.append(await self.line())
        return "\n".join(lines)

    def send(self, *commands: str) -> None:
        """Send ``commands`` in one write (pipelined when more than one)."""
        self.writer.write("".join(f"{c}\r\n" for c in commands).encode())

    async def ask(self, command: str) -> str:
        self.send(command)
        return await self.reply()

    async def closed(self) -> bool:
        """Did the server close the connection (nothing more to read)?"""
        return await asyncio.wait_for(self.reader.read(), timeout=5) == b""

    async def start(self, sender: str = SENDER) -> None:
        """Banner, EHLO and MAIL, each waited for."""
        assert (await self.reply()).startswith("220 ")
        assert (await self.ask("EHLO verifier.test")).startswith("250")
        assert (await self.ask(f"MAIL FROM:<{sender}>")).startswith("250")

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def lines(sandbox: Sandbox) -> AsyncIterator[Callable[[str], Any]]:
    """Opens raw connections to the module's hosts; all are closed after the test."""
    opened: list[Line] = []

    async def open_line(host: str) -> Line:
        line = await Line.open(sandbox, host)
        opened.append(line)
        return line

    yield open_line
    for line in opened:
        line.close()


def kinds(sandbox: Sandbox, host: str) -> list[str]:
    return [kind for _, kind, _ in sandbox.stats(host).events]


async def until(condition: Callable[[], bool]) -> None:
    """Wait for the server's loop (another thread) to get there."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the server never got there")


def client(sandbox: Sandbox, host: str) -> aiosmtplib.SMTP:
    return aiosmtplib.SMTP(
        hostname=sandbox.address_of(host),
        port=sandbox.smtp_port,
        timeout=5,
        start_tls=False,
        local_hostname="verifier.test",
    )


# -- Postfix's error limits ------------------------------------------------------------------


async def test_past_the_soft_limit_replies_sleep_and_the_hard_limit_hangs_up(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.harvest.test"
    line = await lines(host)
    await line.start()
    stats = sandbox.stats(host)
    assert (await line.ask("RCPT TO:<x1@harvest.test>")).startswith("550 5.1.1")
    assert (await line.ask("RCPT TO:<x2@harvest.test>")).startswith("550 5.1.1")
    assert stats.error_sleeps == 0  # two errors: the soft limit is met, nothing slept yet
    # every reply from now on is held back, a good one too
    assert (await line.ask("RCPT TO:<alice@harvest.test>")).startswith("250 2.1.5")
    assert (await line.ask("RCPT TO:<x3@harvest.test>")).startswith("550 5.1.1")
    assert (await line.ask("RCPT TO:<x4@harvest.test>")).startswith("550 5.1.1")
    assert stats.error_sleeps == 3
    # four errors: the next command is not answered but refused, and the connection ends
    assert await line.ask("RCPT TO:<bob@harvest.test>") == (
        "421 4.7.0 mx.harvest.test Error: too many errors"
    )
    assert await line.closed()
    assert stats.error_sleeps == 4  # the 421 came late too, as Postfix's does
    assert "bob@harvest.test" not in stats.recipients  # refused before it was looked at
    assert kinds(sandbox, host) == ["too_many_errors"]
    assert stats.limits_met == 1


async def test_the_error_count_survives_rset_and_counts_protocol_errors(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.rset.test"
    line = await lines(host)
    await line.start()
    assert (await line.ask("RCPT TO:<x1@rset.test>")).startswith("550")
    assert (await line.ask("BOGUS")).startswith("500")  # aiosmtpd's own error counts
    assert (await line.ask("RSET")).startswith("250")
    assert (await line.ask(f"MAIL FROM:<{SENDER}>")).startswith("250")
    assert (await line.ask("RCPT TO:<x2@rset.test>")).startswith("550")
    assert (await line.ask("NOOP")).startswith("421 4.7.0 mx.rset.test Error: too many errors")
    assert await line.closed()
    assert sandbox.stats(host).error_sleeps == 0  # no soft limit here


async def test_a_message_accepted_forgives_the_errors(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    """Postfix counts errors "without delivering mail": a message that gets through resets it."""
    line = await lines("mx.rset.test")
    await line.start()
    assert (await line.ask("RCPT TO:<x1@rset.test>")).startswith("550")
    assert (await line.ask("RCPT TO:<x2@rset.test>")).startswith("550")
    assert (await line.ask("RCPT TO:<alice@rset.test>")).startswith("250")
    assert (await line.ask("DATA")).startswith("354")
    assert (await line.ask("Subject: hi\r\n\r\nhello\r\n.")).startswith("250")
    assert (await line.ask(f"MAIL FROM:<{SENDER}>")).startswith("250")
    assert (await line.ask("RCPT TO:<x3@rset.test>")).startswith("550")
    assert (await line.ask("RCPT TO:<x4@rset.test>")).startswith("550")
    assert (await line.ask("NOOP")).startswith("250")  # two errors since the message, not four


@pytest.mark.parametrize("host", ["mx.exchange.test", "mx.sleepy.test"])
async def test_held_back_replies_keep_their_order_under_pipelining(
    sandbox: Sandbox, lines: Callable[[str], Any], host: str
) -> None:
    name = domain_of(host)
    line = await lines(host)
    assert (await line.reply()).startswith("220 ")
    assert (await line.ask("EHLO verifier.test")).startswith("250")
    who = ["nobody1", "alice", "dave", "nobody2", "bob"]
    line.send(f"MAIL FROM:<{SENDER}>", *(f"RCPT TO:<{w}@{name}>" for w in who))
    replies = [await line.reply() for _ in range(6)]
    assert [r[:9] for r in replies] == [
        "250 2.1.0",
        "550 5.1.1",
        "250 2.1.5",
        "550 5.2.1",
        "550 5.1.1",
        "250 2.1.5",
    ]
    refused = [r.split("<")[1].split("@")[0] for r in replies if r.startswith("5")]
    assert refused == ["nobody1", "dave", "nobody2"]  # each refusal where it belongs
    # the tarpit holds the three refusals; the error sleep every reply after the first error
    assert sandbox.stats(host).error_sleeps == (3 if host == "mx.exchange.test" else 4)
    assert sandbox.stats(host).limits_met == 0


# -- anvil -----------------------------------------------------------------------------------


async def test_connections_per_client_past_the_count_are_refused(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.anvil.test"
    first, second = await lines(host), await lines(host)
    assert (await first.reply()).startswith("220 ")
    assert (await second.reply()).startswith("220 ")
    third = await lines(host)
    assert await third.reply() == (
        "421 4.7.0 mx.anvil.test Error: too many connections from 127.0.0.1"
    )
    assert await third.closed()
    first.close()
    await until(lambda: sandbox.stats(host).active == 1)
    fourth = await lines(host)
    assert (await fourth.reply()).startswith("220 ")
    assert kinds(sandbox, host) == ["too_many_connections"]


async def test_simultaneous_connections_are_judged_in_the_order_they_came(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    """Both arrive before the server sees either (latency): the second one is refused, not
    both."""
    host = "mx.anvilslow.test"
    both = [await lines(host), await lines(host)]
    replies = sorted([(await line.reply())[:4] for line in both])
    assert replies == ["220 ", "421 "]
    assert kinds(sandbox, host) == ["too_many_connections"]


async def test_connections_per_client_past_the_rate_are_refused_until_the_window_passes(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.rate.test"
    for _ in range(3):
        line = await lines(host)
        assert (await line.reply()).startswith("220 ")
        line.close()
    refusal = "421 4.7.0 mx.rate.test Error: too many connections from 127.0.0.1"
    for _ in range(2):  # a refused connection counts as an attempt too
        line = await lines(host)
        assert await line.reply() == refusal
        assert await line.closed()
    await asyncio.sleep(1.05)  # the window (1 s) has passed every attempt
    line = await lines(host)
    assert (await line.reply()).startswith("220 ")
    assert kinds(sandbox, host) == ["too_many_connections"] * 2


# -- providers -------------------------------------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
async def test_a_provider_bans_a_client_across_its_hosts_for_ban_ms(
    sandbox: Sandbox, lines: Callable[[str], Any], style: str
) -> None:
    one, two = f"mx1.{style}.test", f"mx2.{style}.test"
    for host in (one, two):  # max_sessions: 2, over both hosts
        line = await lines(host)
        assert (await line.reply()).startswith("220 ")
        line.close()
    banned = await lines(one)
    assert await banned.reply() == PROVIDER_REPLIES[style]
    assert await banned.closed()
    during = await lines(two)  # the other host knows of the ban
    assert await during.reply() == PROVIDER_REPLIES[style]
    assert await during.closed()
    assert kinds(sandbox, one) == ["rate_ban"]
    assert kinds(sandbox, two) == ["rate_limited"]
    assert (sandbox.stats(one).bans, sandbox.stats(two).bans) == (1, 0)
    await asyncio.sleep(0.85)  # ban_ms: 800
    after = await lines(two)
    assert (await after.reply()).startswith("220 ")
    report = sandbox.defence_report()["providers"][style]
    assert (report["bans"], report["limits_met"]) == (1, 2)


async def test_a_provider_bans_a_client_past_max_concurrent(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    one, two = "mx.concurrent.test", "mx2.concurrent.test"
    held = [await lines(one), await lines(two)]
    for line in held:
        assert (await line.reply()).startswith("220 ")
    third = await lines(one)
    refusal = "421 4.7.0 Too many concurrent SMTP connections from 127.0.0.1, try again later"
    assert await third.reply() == refusal
    assert await third.closed()
    for line in held:
        line.close()
    await until(lambda: sandbox.stats(one).active + sandbox.stats(two).active == 0)
    during = await lines(two)  # nothing open any more, but the ban lasts
    assert await during.reply() == refusal
    await asyncio.sleep(0.85)  # ban_ms: 800
    after = await lines(two)
    assert (await after.reply()).startswith("220 ")
    report = sandbox.defence_report()["providers"]["Concurrent Inc"]  # a name, kept as given
    assert report == {"max_active": 3, "bans": 1, "limits_met": 2}


# -- postscreen ------------------------------------------------------------------------------


async def test_postscreen_drops_a_client_that_talks_before_its_turn(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.screen.test"
    line = await lines(host)
    assert await line.line() == "220-mx.screen.test ESMTP"
    line.send("EHLO verifier.test")
    assert await line.reply() == "521 5.5.1 Protocol error"
    assert await line.closed()
    assert kinds(sandbox, host) == ["pregreet"]
    # only that connection: a patient client passes the test
    patient = await lines(host)
    assert await patient.line() == "220-mx.screen.test ESMTP"
    assert (await patient.line()).startswith("220 mx.screen.test ESMTP")
    assert (await patient.ask("EHLO verifier.test")).startswith("250")


async def test_postscreen_lets_a_patient_client_in_and_remembers_it(sandbox: Sandbox) -> None:
    host = "mx.patient.test"
    smtp = client(sandbox, host)
    greeting = await smtp.connect()
    assert greeting.code == 220
    assert greeting.message.splitlines()[0] == "mx.patient.test ESMTP"  # the 220- line
    await smtp.ehlo()
    await smtp.mail(SENDER)
    assert (await smtp.execute_command(b"RCPT", b"TO:<alice@patient.test>")).code == 250
    await smtp.quit()
    # a client that passed is handed straight to the server (postscreen's cache)
    line = await Line.open(sandbox, host)
    assert (await line.line()).startswith("220 mx.patient.test ESMTP")
    line.close()
    assert kinds(sandbox, host) == []


async def test_postscreen_deep_tests_defer_the_first_session_only(sandbox: Sandbox) -> None:
    host = "mx.deep.test"

    async def rcpt() -> tuple[int, str]:
        smtp = client(sandbox, host)
        await smtp.connect()
        await smtp.ehlo()
        await smtp.mail(SENDER)
        reply = await smtp.execute_command(b"RCPT", b"TO:<alice@deep.test>")
        await smtp.quit()
        return reply.code, reply.message

    assert await rcpt() == (450, "4.3.2 Service currently unavailable")
    await until(lambda: len(sandbox.stats(host).closed_at) == 1)
    assert (await rcpt())[0] == 250


# -- strict pipelining and TLS ---------------------------------------------------------------


async def test_strict_pipelining_hangs_up_on_a_pipelining_client(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    host = "mx.strict.test"
    line = await lines(host)
    assert (await line.reply()).startswith("220 ")
    line.send("EHLO verifier.test", f"MAIL FROM:<{SENDER}>")
    assert await line.reply() == "554 5.5.0 Error: SMTP protocol synchronization"
    assert await line.closed()
    assert kinds(sandbox, host) == ["pipelining"]
    # a client that waits for each reply is served as before
    smtp = client(sandbox, host)
    await smtp.connect()
    await smtp.ehlo()
    assert not smtp.supports_extension("pipelining")
    await smtp.mail(SENDER)
    assert (await smtp.execute_command(b"RCPT", b"TO:<alice@strict.test>")).code == 250
    assert (await smtp.data("Subject: hi\r\n\r\none\r\ntwo\r\nthree\r\n")).code == 250
    assert (await smtp.noop()).code == 250  # a message's many lines are not pipelining
    smtp.close()
    assert kinds(sandbox, host) == ["pipelining"]


async def test_strict_pipelining_refuses_a_client_that_talks_before_the_banner(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    line = await lines("mx.strictslow.test")
    line.send("EHLO verifier.test")
    assert await line.reply() == "554 5.5.0 Error: SMTP protocol synchronization"
    assert await line.closed()


async def test_strict_pipelining_does_nothing_where_pipelining_is_advertised(
    sandbox: Sandbox, lines: Callable[[str], Any]
) -> None:
    line = await lines("mx.lenient.test")
    assert (await line.reply()).startswith("220 ")
    assert (await line.ask("EHLO verifier.test")).startswith("250")
    line.send(f"MAIL FROM:<{SENDER}>", "RCPT TO:<alice@lenient.test>", "RCPT TO:<x@lenient.test>")
    assert [(await line.reply())[:3] for _ in range(3)] == ["250", "250", "550"]
    assert kinds(sandbox, "mx.lenient.test") == []


async def test_require_tls_refuses_mail_before_starttls(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.tlsonly.test")
    await smtp.connect()
    await smtp.ehlo()
    with pytest.raises(aiosmtplib.SMTPSenderRefused) as refused:
        await smtp.mail(SENDER)
    assert refused.value.code == 530
    assert refused.value.message == "5.7.0 Must issue a STARTTLS command first"
    assert (await smtp.noop()).code == 250  # Postfix's commands allowed before TLS
    assert (await smtp.execute_command(b"RSET")).code == 530
    await smtp.starttls(validate_certs=False)
    await smtp.ehlo()
    await smtp.mail(SENDER)
    assert (await smtp.execute_command(b"RCPT", b"TO:<alice@tlsonly.test>")).code == 250
    smtp.close()


# -- the world format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world", "where", "what"),
    [
        (
            {"hosts": {"mx.a.test": {}}, "providers": {"google": {"hosts": ["mx.b.test"]}}},
            'providers["google"].hosts[0]',
            "not a host of this world",
        ),
        (
            {
                "hosts": {"mx.a.test": {}},
                "providers": {"one": {"hosts": ["mx.a.test"]}, "two": {"hosts": ["MX.A.test"]}},
            },
            'providers["two"].hosts[0]',
            'already belongs to providers["one"]',
        ),
        (
            {"hosts": {"mx.a.test": {"require_tls": True}}},
            'hosts["mx.a.test"].require_tls',
            "starttls",
        ),
        (
            {"hosts": {"mx.a.test": {}}, "providers": {"Google": {"max_sessions": 0}}},
            'providers["Google"].max_sessions',
            "greater than or equal to 1",
        ),
        (
            {"hosts": {"mx.a.test": {"postscreen": {"greet_wait_ms": -1}}}},
            'hosts["mx.a.test"].postscreen.greet_wait_ms',
            "greater than or equal to 0",
        ),
    ],
)
def test_world_errors_name_the_place(world: dict, where: str, what: str) -> None:
    with pytest.raises(WorldError) as caught:
        World.from_dict(world, source="w.json")
    message = str(caught.value)
    assert f"w.json: {where}" in message, message
    assert what in message


def test_provider_names_are_kept_and_hosts_normalised() -> None:
    world = World.from_dict(
        {
            "hosts": {"MX.A.test": {"require_tls": True, "starttls": True}},
            "providers": {"Google": {"hosts": ["mx.a.TEST."], "style": "gmail"}},
        }
    )
    assert list(world.providers) == ["Google"]
    assert world.providers["Google"].hosts == ["mx.a.test"]
    assert world.provider_of("mx.a.test") == "Google"


# -- what the hosts said ---------------------------------------------------------------------


REPORT_WORLD: dict[str, Any] = {
    "domains": {
        "acme.test": {"mx": mx("mx.acme.test"), "mailboxes": ["alice"]},
        "capped.test": {"mx": mx("mx.capped.test"), "mailboxes": ["alice"]},
        "idle.test": {"mx": mx("mx.idle.test"), "mailboxes": ["alice"]},
    },
    "hosts": {
        "mx.acme.test": {"hard_error_limit": 1, "max_connections": 1},
        "mx.capped.test": {"max_rcpt_per_connection": 1, "too_many_reply": "421"},
        "mx.idle.test": {},
    },
    "providers": {"acme": {"hosts": ["mx.acme.test"], "max_sessions": 10}},
}


async def test_defence_report_counts_what_every_host_said(
    make_mail_sandbox: Callable[..., Sandbox],
) -> None:
    sandbox = make_mail_sandbox(REPORT_WORLD)
    held = await Line.open(sandbox, "mx.acme.test")
    await held.start()
    assert (await held.ask("RCPT TO:<x@acme.test>")).startswith("550")
    extra = await Line.open(sandbox, "mx.acme.test")  # max_connections: 1
    assert (await extra.reply()).startswith("421 4.7.0 mx.acme.test Too many concurrent")
    assert (await held.ask("NOOP")).startswith("421 4.7.0 mx.acme.test Error: too many errors")
    capped = await Line.open(sandbox, "mx.capped.test")
    await capped.start()
    assert (await capped.ask("RCPT TO:<alice@capped.test>")).startswith("250")
    assert (await capped.ask("RCPT TO:<alice@capped.test>")).startswith("421 4.7.0 Too many")
    for line in (held, extra, capped):
        line.close()

    report = sandbox.defence_report()
    assert json.loads(json.dumps(report)) == report  # JSON-safe as it is
    assert set(report["hosts"]) == {"mx.acme.test", "mx.capped.test"}  # not the idle host
    acme = report["hosts"]["mx.acme.test"]
    assert {k: acme[k] for k in ("connections", "max_active", "limits_met", "bans")} == {
        "connections": 2,
        "max_active": 2,
        "limits_met": 2,
        "bans": 0,
    }
    assert [kind for _, kind, _ in acme["events"]] == ["too_many_connections", "too_many_errors"]
    first, second = (at for at, _, _ in acme["events"])
    assert first <= second
    capped_events = report["hosts"]["mx.capped.test"]["events"]
    assert [kind for _, kind, _ in capped_events] == ["too_many_recipients"]
    assert capped_events[0][2].startswith("421 4.7.0 Too many recipients")
    assert (report["limits_met"], report["bans"]) == (3, 0)
    assert report["providers"] == {"acme": {"max_active": 2, "bans": 0, "limits_met": 0}}


# -- the background sandbox's defences.json --------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private state folder, so this test never touches a user's running sandbox."""
    environ = {**os.environ, "LISTHYGIENE_SANDBOX_DIR": str(tmp_path / "state")}
    yield environ
    cli(environ, "sandbox", "down")


async def test_the_daemon_writes_defences_json_while_running_and_when_stopped(
    env: dict[str, str], tmp_path: Path
) -> None:
    world = tmp_path / "world.json"
    world.write_text(
        json.dumps(
            {
                "domains": {"acme.test": {"mx": mx("mx.acme.test"), "mailboxes": ["alice"]}},
                "hosts": {"mx.acme.test": {"max_connections_per_client": 1}},
            }
        )
    )
    started = cli(env, "sandbox", "up", str(world), "--dns-port", "0", "--smtp-port", "0")
    assert started.returncode == 0, started.stderr
    folder = Path(env["LISTHYGIENE_SANDBOX_DIR"])
    path = folder / "defences.json"
    assert json.loads(path.read_text()) == {
        "hosts": {},
        "limits_met": 0,
        "bans": 0,
        "providers": {},
    }
    state = json.loads((folder / "state.json").read_text())
    address, port = state["hosts"]["mx.acme.test"], state["smtp_port"]
    first = Line(*await asyncio.open_connection(address, port))
    assert (await first.reply()).startswith("220 ")
    second = Line(*await asyncio.open_connection(address, port))
    assert (await second.reply()).startswith("421 4.7.0 mx.acme.test Error: too many connections")
    for _ in range(100):  # rewritten within about a second
        if json.loads(path.read_text())["limits_met"] == 1:
            break
        await asyncio.sleep(0.05)
    assert json.loads(path.read_text())["limits_met"] == 1
    third = Line(*await asyncio.open_connection(address, port))
    assert (await third.reply()).startswith("421")
    for line in (first, second, third):
        line.close()
    stopped = cli(env, "sandbox", "down")
    assert stopped.returncode == 0, stopped.stderr
    final = json.loads(path.read_text())  # the last word, written as it stopped
    assert final["limits_met"] == 2
    host = final["hosts"]["mx.acme.test"]
    assert host["connections"] == 3
    assert [kind for _, kind, _ in host["events"]] == ["too_many_connections"] * 2

"""Mail hosts that defend themselves (issue 25): harvest protection, tarpits, connection limits,
provider rate bans. Each host is a sandbox server behaving as Postfix, Exchange or a big
provider documents it (docs/sandbox.md); the engine must give every address the verdict the
world says, and end its sessions before a host has to (docs/engine.md, "Hosts that defend
themselves"). Behaviour is asserted (verdicts, what the hosts counted), never time.
"""

import pytest

from listhygiene.engine import Engine, EngineSettings
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Reason, Status
from tests.conftest import sandbox_settings

LIVE = [f"live{i}" for i in range(5)]
DEAD = [f"dead{i}" for i in range(14)]


def mx(host: str) -> list[dict]:
    return [{"preference": 10, "host": host}]


def domain(host: str, **extra: object) -> dict:
    return {"mx": mx(host), "mailboxes": LIVE, **extra}


WORLD = {
    "domains": {
        # Postfix's documented defaults: slower past 10 errors, ended at 20
        "postfix.test": domain("mx.postfix.test"),
        # a stricter Postfix, without PIPELINING: slower past 3 errors, ended at 5
        "strict.test": domain("mx.strict.test"),
        # the same limits, with PIPELINING: a batch is sent before any reply is read
        "strictpipe.test": domain("mx.strictpipe.test"),
        # Exchange: every rejected recipient held (TarpitInterval), shorter than a step
        "exchange.test": domain("mx.exchange.test"),
        # a tarpit, and a domain of many dead mailboxes on it
        "widetarpit.test": domain("mx.widetarpit.test"),
        # a tarpit longer than the engine's step time-out
        "deeptarpit.test": domain("mx.deeptarpit.test"),
        # postscreen: a greeting test, then the deep tests; strict pipelining; TLS required
        "screened.test": domain("mx.screened.test"),
        "nopipe.test": domain("mx.nopipe.test"),
        "tlsonly.test": domain("mx.tlsonly.test"),
        # one connection at a time per client (anvil), three domains on it
        **{f"anvil{i}.test": domain("mx.anvil.test") for i in range(3)},
        # a big provider's MX hosts, one rate limit for both
        **{f"gmailish{i}.test": domain(f"alt{i % 2 + 1}.aspmx.l.google.com") for i in range(6)},
        **{f"polite{i}.test": domain(f"mx{i % 2 + 1}.yahoodns.net") for i in range(6)},
    },
    "hosts": {
        "mx.postfix.test": {
            "soft_error_limit": 10,
            "hard_error_limit": 20,
            "error_sleep_ms": 400,
        },
        "mx.strict.test": {
            "soft_error_limit": 3,
            "hard_error_limit": 5,
            "error_sleep_ms": 300,
            "pipelining": False,
        },
        "mx.strictpipe.test": {
            "soft_error_limit": 3,
            "hard_error_limit": 5,
            "error_sleep_ms": 300,
        },
        "mx.exchange.test": {"rejected_rcpt_delay_ms": 300},
        "mx.deeptarpit.test": {"rejected_rcpt_delay_ms": 1300},
        "mx.widetarpit.test": {"rejected_rcpt_delay_ms": 200},
        "mx.anvil.test": {"max_connections_per_client": 1, "latency_ms": 100},
        "mx.screened.test": {"postscreen": {"greet_wait_ms": 300, "deep_tests": True}},
        "mx.nopipe.test": {"pipelining": False, "strict_pipelining": True},
        "mx.tlsonly.test": {"starttls": True, "require_tls": True},
        "alt1.aspmx.l.google.com": {"latency_ms": 50},
        "alt2.aspmx.l.google.com": {"latency_ms": 50},
        "mx1.yahoodns.net": {"latency_ms": 50},
        "mx2.yahoodns.net": {"latency_ms": 50},
    },
    "providers": {
        # a client may hold 3 sessions at once to both hosts together; past it, banned 1 s
        "google": {
            "hosts": ["alt1.aspmx.l.google.com", "alt2.aspmx.l.google.com"],
            "max_concurrent": 3,
            "ban_ms": 1000,
            "style": "gmail",
        },
        # limits above the engine's Yahoo budget (2 at once, 1 new a second): never met
        "yahoo": {
            "hosts": ["mx1.yahoodns.net", "mx2.yahoodns.net"],
            "max_concurrent": 7,
            "max_sessions": 100,
            "style": "yahoo",
        },
    },
}

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def settings(sandbox: Sandbox, **changes: object) -> EngineSettings:
    defending: dict[str, object] = {
        "smtp_timeout": 1.0,
        "retry_delays": (0.5, 1.0, 2.0),
        "mx_head_start": 0.2,
    }
    return sandbox_settings(sandbox, **(defending | changes))


def addresses_of(name: str, *, dead_first: bool = False) -> list[str]:
    locals_ = (*DEAD, *LIVE) if dead_first else (*LIVE, *DEAD)
    return [f"{local}@{name}" for local in locals_]


async def run(engine: Engine, addresses: list[str]) -> dict[str, VerificationResult]:
    results = [r async for r in engine.verify_many(addresses)]
    assert len(results) == len(addresses)
    return {r.email: r for r in results}


def assert_all_right(results: dict[str, VerificationResult]) -> None:
    """Every live mailbox valid, every dead one not found: nothing unknown."""
    wrong = {
        address: (r.status, r.reason)
        for address, r in results.items()
        if (r.status, r.reason)
        != (
            (Status.VALID, None)
            if address.startswith("live")
            else (Status.INVALID, Reason.MAILBOX_NOT_FOUND)
        )
    }
    assert wrong == {}


def said(sandbox: Sandbox, host: str) -> list[str]:
    """The kinds of what ``host`` had to say (too many errors, connections, a ban ...)."""
    return [kind for _, kind, _ in sandbox.stats(host).events]


# -- harvest protection ---------------------------------------------------------------------------


async def test_sessions_end_before_postfix_default_error_limits(sandbox: Sandbox) -> None:
    """14 unknown recipients and 5 live ones: every reply of a session that has made 10 errors
    would be held, and the session ended at 20. The engine ends each session at 9 refusals
    (``errors_per_session``), so neither ever happens."""
    stats = sandbox.stats("mx.postfix.test")
    stats.reset()
    engine = Engine(settings(sandbox))
    assert_all_right(await run(engine, addresses_of("postfix.test")))
    assert said(sandbox, "mx.postfix.test") == []
    assert stats.error_sleeps == 0
    assert stats.connections == 2  # 15 refusals (the catch-all probe's too): two sessions
    assert engine.politeness["limits_met"] == 0


async def test_without_pipelining_a_session_stops_where_the_host_starts_to_slow(
    sandbox: Sandbox,
) -> None:
    """A host stricter than Postfix's defaults (slow past 3 errors, ended at 5) and without
    PIPELINING: the engine sends one command at a time, sees the first slowed reply, ends the
    session there and keeps every later session under 3 refusals. No session is ended by the
    host, no address is lost."""
    stats = sandbox.stats("mx.strict.test")
    stats.reset()
    engine = Engine(settings(sandbox))
    assert_all_right(await run(engine, addresses_of("strict.test")))
    assert "too_many_errors" not in said(sandbox, "mx.strict.test")
    # the reply that taught the limit (and the QUIT sent after it, not waited for)
    assert 1 <= stats.error_sleeps <= 2
    assert engine.politeness["limits_met"] == 0


async def test_an_error_limit_met_mid_batch_is_come_back_not_a_verdict(sandbox: Sandbox) -> None:
    """With PIPELINING a batch is sent whole: on a host stricter than the defaults the first
    session meets the hard limit (421 too many errors). What it cut off is asked again in new
    sessions under the limit learnt, and the host never has to say it again."""
    engine = Engine(settings(sandbox))
    sandbox.stats("mx.strictpipe.test").reset()
    assert_all_right(await run(engine, addresses_of("strictpipe.test", dead_first=True)))
    assert said(sandbox, "mx.strictpipe.test") == ["too_many_errors"]
    assert engine.politeness["limits_met"] == 1


# -- tarpits ---------------------------------------------------------------------------------------


async def test_a_tarpit_on_each_refusal_is_waited_for_reply_by_reply(sandbox: Sandbox) -> None:
    """Exchange holds each rejected recipient (300 ms here): a pipelined batch of three refusals
    takes longer than one step's time-out (0.5 s), but each reply comes within it, so the host
    is alive and every address gets its verdict without a session running out of time (which
    would cost a session more for each held recipient)."""
    stats = sandbox.stats("mx.exchange.test")
    stats.reset()
    engine = Engine(settings(sandbox, smtp_timeout=0.5))
    assert_all_right(await run(engine, addresses_of("exchange.test", dead_first=True)))
    assert stats.error_sleeps == 15  # every refusal, the catch-all probe's too
    assert stats.connections <= engine.settings.host_concurrency  # the main and a side session


async def test_a_tarpit_longer_than_a_step_is_waited_for(sandbox: Sandbox) -> None:
    """Each refusal held 1.3 s, the step time-out 1 s: the host has answered MAIL, so it is
    alive, and a held recipient's reply is waited for patiently (up to ``retry_max_wait``) in
    the same session; no address becomes unknown, no session is given up."""
    engine = Engine(settings(sandbox))
    stats = sandbox.stats("mx.deeptarpit.test")
    stats.reset()
    addresses = [f"{local}@deeptarpit.test" for local in (*DEAD[:3], *LIVE)]
    assert_all_right(await run(engine, addresses))
    assert stats.connections <= engine.settings.host_concurrency  # the main and a side session
    assert stats.error_sleeps == 4  # each refusal (and the probe's) asked once


async def test_a_tarpits_waits_are_shared_by_two_sessions(sandbox: Sandbox) -> None:
    """Once a host is seen holding its refusals, the domain's recipients go over as many
    sessions side by side as the host's politeness allows (2), in small batches: the held
    replies are waited for two at a time."""
    stats = sandbox.stats("mx.widetarpit.test")
    stats.reset()
    engine = Engine(settings(sandbox))
    assert_all_right(await run(engine, addresses_of("widetarpit.test", dead_first=True)))
    assert stats.max_active == engine.settings.host_concurrency == 2


# -- what already worked stays working -------------------------------------------------------------


async def test_postscreen_strict_pipelining_and_required_tls(sandbox: Sandbox) -> None:
    """The engine waits for the last line of postscreen's greeting (talking early is a
    pregreet: 521 and dropped), takes the deep tests' 450 4.3.2 as come-back, never pipelines
    to a host that does not advertise it, and takes STARTTLS when offered: every verdict right,
    nothing said."""
    hosts = ["mx.screened.test", "mx.nopipe.test", "mx.tlsonly.test"]
    for host in hosts:
        sandbox.stats(host).reset()
    engine = Engine(settings(sandbox))
    addresses = [
        a for name in ("screened", "nopipe", "tlsonly") for a in addresses_of(f"{name}.test")
    ]
    assert_all_right(await run(engine, addresses))
    assert [said(sandbox, host) for host in hosts] == [[], [], []]
    assert sandbox.stats("mx.nopipe.test").max_commands_per_read == 1
    assert sandbox.stats("mx.screened.test").connections >= 2  # the deep tests' come-back


# -- connection limits and provider bans ---------------------------------------------------------


async def test_too_many_connections_means_fewer_sessions_to_that_host(sandbox: Sandbox) -> None:
    """One connection at a time per client: the second session of the engine (2 per host by
    default) is greeted 421 once; after that the engine holds one session at a time there and
    every address is verified."""
    stats = sandbox.stats("mx.anvil.test")
    stats.reset()
    engine = Engine(settings(sandbox))
    addresses = [a for i in range(3) for a in addresses_of(f"anvil{i}.test")]
    assert_all_right(await run(engine, addresses))
    assert said(sandbox, "mx.anvil.test") == ["too_many_connections"]
    assert engine.politeness["limits_met"] == 1


async def test_a_provider_ban_backs_off_every_host_of_the_provider(sandbox: Sandbox) -> None:
    """Two MX hosts of one provider allow 3 sessions together; the engine's first sessions (2
    per host) trip it: Gmail's 421 4.7.28. The engine then leaves both hosts alone for the ban,
    comes back with fewer sessions, and loses no verdict."""
    hosts = ["alt1.aspmx.l.google.com", "alt2.aspmx.l.google.com"]
    for host in hosts:
        sandbox.stats(host).reset()
    engine = Engine(settings(sandbox, ban_backoff=1.2, retry_delays=(0.5, 1.0, 2.0, 4.0)))
    addresses = [a for i in range(6) for a in addresses_of(f"gmailish{i}.test")]
    assert_all_right(await run(engine, addresses))
    events = [event for host in hosts for event in sandbox.stats(host).events]
    assert [kind for _, kind, _ in events].count("rate_ban") == 1
    assert engine.politeness["bans"] == 1
    # no session to either host while the ban lasted, once the engine had heard of it (the
    # sessions already on their way when the ban began are greeted with it too)
    banned_at = next(at for at, kind, _ in events if kind == "rate_ban")
    opened = [at for host in hosts for at in sandbox.stats(host).opened_at]
    assert [at for at in opened if banned_at + 0.1 < at < banned_at + 1.0] == []


async def test_the_provider_budget_keeps_within_a_providers_limits(sandbox: Sandbox) -> None:
    """The engine holds at most ``provider_concurrency`` sessions to all of a provider's MX
    hosts together (2 here, under the 2 x 2 its two hosts' own budgets allow), and is never
    banned."""
    for host in ("mx1.yahoodns.net", "mx2.yahoodns.net"):
        sandbox.stats(host).reset()
    engine = Engine(settings(sandbox, provider_concurrency=2))
    addresses = [a for i in range(6) for a in addresses_of(f"polite{i}.test")]
    assert_all_right(await run(engine, addresses))
    assert engine.statistics["max_sessions_one_provider"] <= 2
    report = sandbox.defence_report()
    # as the host counts them, a session's close may reach it after the next one's connect
    assert report["providers"]["yahoo"]["max_active"] <= 2 + 1
    assert report["providers"]["yahoo"]["bans"] == 0
    assert engine.politeness["limits_met"] == 0
    assert engine.politeness["max_sessions_one_host"] <= engine.settings.host_concurrency


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("421-4.7.28 [127.0.0.1] Our system has detected an unusual rate of", "rate"),
        ("421 4.7.500 Server busy. Please try again later from [1.2.3.4]. (S77714)", "rate"),
        ("451 4.7.650 The mail server [1.2.3.4] has been temporarily rate limited", "rate"),
        ("421 4.7.0 [TSS04] Messages from 1.2.3.4 temporarily deferred", "rate"),
        ("421 4.7.0 Too many concurrent SMTP connections from 1.2.3.4", "connections"),
        ("421 4.7.0 mx.example Error: too many connections from 1.2.3.4", "connections"),
        ("421 4.7.0 mx.example Error: too many errors", "errors"),
        ("554 5.5.0 Error: SMTP protocol synchronization", "protocol"),
        ("450 4.2.0 <a@b.test>: Recipient address rejected: Greylisted", None),
        ("452 4.5.3 Too many recipients", None),
        ("421 4.7.0 Too many recipients in this session, closing connection", None),
        ("550 5.1.1 <a@b.test>: Recipient address rejected: User unknown", None),
    ],
)
def test_replies_that_say_we_went_too_far(text: str, limit: str | None) -> None:
    from listhygiene.engine.replies import limit_of
    from listhygiene.engine.smtp_client import _parse_reply

    found = limit_of(_parse_reply([text.encode()]))
    assert (found.value if found else None) == limit

"""How the engine talks to mail hosts: sessions, pipelining, caps, retries, time bounds.

Each test runs a small world in the sandbox and checks both the verdicts and what the hosts saw
(``sandbox.stats``): the number of connections, recipients, pipelined reads, concurrency.
"""

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

import listhygiene
from listhygiene.engine import Engine, EngineSettings
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Reason, Status
from tests.conftest import sandbox_settings


def mx(host: str) -> list[dict]:
    return [{"preference": 10, "host": host}]


PEOPLE = [f"person{i}" for i in range(40)]
WORLD = {
    "domains": {
        "big.test": {"mx": mx("mx.big.test"), "mailboxes": PEOPLE},
        "nopipe.test": {"mx": mx("mx.nopipe.test"), "mailboxes": PEOPLE[:10]},
        "cap452.test": {"mx": mx("mx.cap452.test"), "mailboxes": PEOPLE[:10]},
        "cap421.test": {"mx": mx("mx.cap421.test"), "mailboxes": PEOPLE[:10]},
        "catchall.test": {"mx": mx("mx.catchall.test"), "catch_all": True},
        "grey.test": {"mx": mx("mx.grey.test"), "mailboxes": ["erin"]},
        "backup.test": {
            "mx": [
                {"preference": 5, "host": "down.backup.test"},
                {"preference": 10, "host": "up.backup.test"},
            ],
            "mailboxes": ["hal"],
        },
        "silent.test": {"mx": mx("mx.silent.test"), "mailboxes": ["x"]},
        "endless.test": {"mx": mx("mx.endless.test"), "mailboxes": ["x"]},
        "garbage.test": {"mx": mx("mx.garbage.test"), "mailboxes": ["x"]},
        "drop.test": {"mx": mx("mx.drop.test"), "mailboxes": ["x"]},
        "tarpit.test": {"mx": mx("mx.tarpit.test"), "mailboxes": ["x"]},
        "ascii.test": {"mx": mx("mx.ascii.test"), "mailboxes": ["plain", "josé"]},
        "listed.test": {"mx": mx("mx.listed.test"), "mailboxes": ["ruth"]},
        **{
            f"shared{i}.test": {"mx": mx("mx.shared.test"), "mailboxes": ["a", "b"]}
            for i in range(6)
        },
        **{f"refused{i}.test": {"mx": mx("mx.refused.test"), "mailboxes": ["a"]} for i in range(6)},
    },
    "hosts": {
        "mx.big.test": {},
        "mx.nopipe.test": {"pipelining": False},
        "mx.cap452.test": {"max_rcpt_per_connection": 3},
        "mx.cap421.test": {"max_rcpt_per_connection": 3, "too_many_reply": "421"},
        "mx.catchall.test": {},
        "mx.grey.test": {"greylist_delay_ms": 500},
        "down.backup.test": {"behaviour": "refuse"},
        "up.backup.test": {},
        "mx.silent.test": {"behaviour": "silent"},
        "mx.endless.test": {"behaviour": "endless"},
        "mx.garbage.test": {"behaviour": "garbage"},
        "mx.drop.test": {"behaviour": "drop"},
        "mx.tarpit.test": {"banner_delay_ms": 5000},
        "mx.ascii.test": {"smtputf8": False},
        "mx.listed.test": {},
        "mx.shared.test": {"latency_ms": 100},
        "mx.refused.test": {"behaviour": "refuse"},
    },
    "dnsbl": {"bl.sandbox.test": ["mx.listed.test"]},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def settings(sandbox: Sandbox, **changes: object) -> EngineSettings:
    return sandbox_settings(sandbox, **({"smtp_timeout": 1.0} | changes))


async def run(engine: Engine, addresses: list) -> dict[str, VerificationResult]:
    results = [r async for r in engine.verify_many(addresses)]
    assert len(results) == len(addresses)
    return {r.email: r for r in results}


# -- sessions and pipelining --------------------------------------------------------------------


async def test_one_domain_is_verified_over_one_pipelined_session(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.big.test")
    stats.reset()
    addresses = [f"{p}@big.test" for p in PEOPLE] + ["ghost@big.test"]
    results = await run(Engine(settings(sandbox)), addresses)
    assert all(results[f"{p}@big.test"].status is Status.VALID for p in PEOPLE)
    assert results["ghost@big.test"].reason is Reason.MAILBOX_NOT_FOUND
    assert stats.connections == 1  # 41 recipients and a catch-all probe: one session
    # transactions hold no more recipients than the session may still have refused (9 by
    # default, errors_per_session): 9 (the probe refused), 8, 8, 8, 8, then the last 1
    assert stats.mail_commands == 6
    assert stats.rcpt_commands == 42
    assert stats.max_commands_per_read >= 10  # MAIL and a batch of 9 RCPT in one write


async def test_without_pipelining_commands_go_one_by_one(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.nopipe.test")
    stats.reset()
    results = await run(Engine(settings(sandbox)), [f"{p}@nopipe.test" for p in PEOPLE[:10]])
    assert {r.status for r in results.values()} == {Status.VALID}
    assert stats.connections == 1
    assert stats.max_commands_per_read == 1


@pytest.mark.parametrize("host", ["cap452", "cap421"])
async def test_too_many_recipients_is_a_cap_not_a_verdict(sandbox: Sandbox, host: str) -> None:
    stats = sandbox.stats(f"mx.{host}.test")
    stats.reset()
    addresses = [f"{p}@{host}.test" for p in PEOPLE[:10]] + [f"nobody@{host}.test"]
    results = await run(Engine(settings(sandbox)), addresses)
    assert {results[a].status for a in addresses[:10]} == {Status.VALID}
    assert results[f"nobody@{host}.test"].reason is Reason.MAILBOX_NOT_FOUND
    # the cap of 3 was learnt: later sessions stay within it
    assert stats.connections >= 4
    assert stats.rcpt_commands <= len(addresses) + 1 + 2 * (stats.connections - 1) + 25


async def test_falls_back_to_the_next_mx(sandbox: Sandbox) -> None:
    results = await run(Engine(settings(sandbox)), ["hal@backup.test"])
    assert results["hal@backup.test"].status is Status.VALID


async def test_sessions_to_one_host_are_capped(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.shared.test")
    stats.reset()
    addresses = [f"{p}@shared{i}.test" for i in range(6) for p in ("a", "b")]
    engine = Engine(settings(sandbox, host_concurrency=2, host_rate=100))
    results = await run(engine, addresses)
    assert {r.status for r in results.values()} == {Status.VALID}
    assert stats.max_active <= 2
    assert stats.connections == 6  # one session per domain


# -- catch-all, greylisting ---------------------------------------------------------------------


async def test_catch_all_is_probed_once_per_domain_per_run(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.catchall.test")
    stats.reset()
    engine = Engine(settings(sandbox))
    first = await run(engine, ["a@catchall.test", "b@catchall.test"])
    second = await run(engine, ["c@catchall.test"])
    for result in (*first.values(), *second.values()):
        assert result.status is Status.CATCHALL
        assert result.is_catchall
        assert result.to_form_b()["status"] == "accept_all"
    probes = [r for r in stats.recipients if r.startswith("lh-")]
    assert len(probes) == 1


async def test_greylisting_is_retried_after_the_delay(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox, retry_delays=(0.7,), mail_from="grey1@verifier.test"))
    results = await run(engine, ["erin@grey.test"])
    assert results["erin@grey.test"].status is Status.VALID


async def test_greylisting_without_retries_left_is_unknown(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox, retry_delays=(), mail_from="grey2@verifier.test"))
    result = (await run(engine, ["erin@grey.test"]))["erin@grey.test"]
    assert (result.status, result.reason) == (Status.UNKNOWN, Reason.GREYLISTED)
    assert result.credits_used == 0


# -- hostile and broken hosts: bounded time, unknown with a reason ------------------------------


@pytest.mark.parametrize(
    ("domain", "reason"),
    [
        ("silent.test", Reason.SMTP_TIMEOUT),
        ("tarpit.test", Reason.SMTP_TIMEOUT),
        ("endless.test", Reason.SMTP_UNREACHABLE),
        ("garbage.test", Reason.SMTP_UNREACHABLE),
        ("drop.test", Reason.SMTP_UNREACHABLE),
        ("refused0.test", Reason.SMTP_UNREACHABLE),
    ],
)
async def test_broken_hosts_cost_bounded_time(
    sandbox: Sandbox, domain: str, reason: Reason
) -> None:
    engine = Engine(settings(sandbox, smtp_timeout=0.5))
    started = time.monotonic()
    result = (await run(engine, [f"x@{domain}"]))[f"x@{domain}"]
    elapsed = time.monotonic() - started
    assert (result.status, result.reason) == (Status.UNKNOWN, reason)
    assert elapsed < 0.5 * 3 + 0.5  # a few steps' limits at most, never the host's pace


async def test_utf8_local_part_is_not_sent_to_a_host_without_smtputf8(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.ascii.test")
    stats.reset()
    results = await run(Engine(settings(sandbox)), ["josé@ascii.test", "plain@ascii.test"])
    assert results["josé@ascii.test"].reason is Reason.SMTPUTF8_UNSUPPORTED
    assert results["plain@ascii.test"].status is Status.VALID
    assert not any("jos" in r for r in stats.recipients)


# -- DNS-side behaviour -------------------------------------------------------------------------


async def test_private_mx_hosts_are_no_mail_server_unless_allowed(sandbox: Sandbox) -> None:
    result = (await run(Engine(settings(sandbox, allow_private_mx=False)), ["person1@big.test"]))[
        "person1@big.test"
    ]
    assert (result.status, result.reason) == (Status.INVALID, Reason.NO_MAIL_SERVER)
    assert result.mx_records == ("non_routable",)


async def test_dns_answers_are_cached_for_the_run(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox, check_smtp=False))
    await run(engine, ["person1@big.test"])
    lookups = engine.statistics["dns_lookups"]
    await run(engine, ["person2@big.test", "person3@big.test"])
    assert engine.statistics["dns_lookups"] == lookups


async def test_dnsbl_reputation(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox, dnsbl_zones=("bl.sandbox.test",), check_smtp=False))
    results = await run(engine, ["ruth@listed.test", "person1@big.test"])
    listed = results["ruth@listed.test"].domain_reputation
    assert (listed.is_listed, listed.blacklists, listed.checked) == (
        True,
        ("bl.sandbox.test",),
        True,
    )
    assert listed.mx_ip == sandbox.address_of("mx.listed.test")
    clean = results["person1@big.test"].domain_reputation
    assert (clean.is_listed, clean.checked) == (False, True)
    unchecked = await run(Engine(settings(sandbox, check_smtp=False)), ["ruth@listed.test"])
    assert unchecked["ruth@listed.test"].domain_reputation.checked is False


# -- the run ------------------------------------------------------------------------------------


async def test_health_signal_when_most_domains_are_unreachable(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(settings(sandbox))
    with caplog.at_level(logging.ERROR, logger="listhygiene.health"):
        results = await run(engine, [f"a@refused{i}.test" for i in range(6)])
    assert {r.reason for r in results.values()} == {Reason.SMTP_UNREACHABLE}
    assert engine.health.problem is not None
    assert "port 25" in engine.health.problem
    assert any("port 25" in record.message for record in caplog.records)
    healthy = Engine(settings(sandbox))
    await run(healthy, [f"a@shared{i}.test" for i in range(6)])
    assert healthy.health.problem is None


async def test_any_input_gives_a_result_never_an_exception(sandbox: Sandbox) -> None:
    weird = [
        None,
        42,
        "",
        "   ",
        "a" * 5000,
        "no-at-sign",
        "a@b@c",
        "\x00@big.test",
        "x@localhost",
        "person1@[127.0.0.1]",
        b"bytes@big.test",
        "person1@big.test",
    ]
    results = [r async for r in Engine(settings(sandbox)).verify_many(weird)]
    assert len(results) == len(weird)
    assert sum(r.status is Status.INVALID for r in results) == len(weird) - 1
    assert sum(r.status is Status.VALID for r in results) == 1


async def test_duplicates_get_one_probe_and_one_result_each(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.big.test")
    stats.reset()
    addresses = ["person5@big.test", "Person5@BIG.test ", "person5@big.test"]
    results = [r async for r in Engine(settings(sandbox)).verify_many(addresses)]
    assert len(results) == 3
    assert {r.status for r in results} == {Status.VALID}
    assert stats.recipients.count("person5@big.test") == 1


async def test_reading_ahead_is_bounded(sandbox: Sandbox) -> None:
    pulled = 0
    yielded = 0
    most_ahead = 0

    def source() -> Iterator[str]:
        nonlocal pulled
        for i in range(200):
            pulled += 1
            yield f"person{i % 40}@nowhere{i}.test"

    engine = Engine(settings(sandbox, max_pending=5, check_smtp=False))
    async for _ in engine.verify_many(source()):
        yielded += 1
        most_ahead = max(most_ahead, pulled - yielded)
    assert yielded == 200
    assert most_ahead <= 5


# -- SOCKS5 -------------------------------------------------------------------------------------


@pytest.fixture
def socks_proxy(
    start_socks_proxy: Callable[..., tuple[str, subprocess.Popen[bytes]]],
) -> tuple[str, subprocess.Popen[bytes]]:
    """A real SOCKS5 proxy (pproxy) on loopback."""
    return start_socks_proxy()


async def test_socks5_proxy_carries_the_sessions(
    sandbox: Sandbox, socks_proxy: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proxy = socks_proxy
    results = await run(
        Engine(settings(sandbox, socks_proxy=url)), ["person1@big.test", "ghost@big.test"]
    )
    assert results["person1@big.test"].status is Status.VALID
    assert results["ghost@big.test"].reason is Reason.MAILBOX_NOT_FOUND
    proxy.kill()  # SIGKILL: pproxy may linger on SIGTERM while it drains its connections
    await asyncio.to_thread(proxy.wait, 5)
    # with the proxy gone, nothing reaches the host: the traffic did go through it
    down = await run(Engine(settings(sandbox, socks_proxy=url)), ["person1@big.test"])
    assert down["person1@big.test"].reason is Reason.SMTP_UNREACHABLE


# -- the blocking API and the command -----------------------------------------------------------


def test_sync_verify_and_verify_many(sandbox: Sandbox) -> None:
    config = settings(sandbox)
    result = listhygiene.verify("person1@big.test", settings=config)
    assert result.status is Status.VALID
    results = list(listhygiene.verify_many(["person2@big.test", "nope@big.test"], settings=config))
    assert sorted(r.status for r in results) == [Status.INVALID, Status.VALID]


async def test_sync_verify_works_inside_a_running_loop(sandbox: Sandbox) -> None:
    # as in a notebook, where an event loop already runs
    result = listhygiene.verify("person1@big.test", settings=settings(sandbox))
    assert result.status is Status.VALID


def test_cli_verify_prints_json_lines(sandbox: Sandbox, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import os

    listing = tmp_path / "list.txt"
    listing.write_text("person1@big.test\n\nghost@big.test\n")
    env = {**os.environ, **sandbox.engine_environment()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "listhygiene.cli",
            "verify",
            "not-an-address",
            "--file",
            str(listing),
            "--helo",
            "verifier.test",
            "--form",
            "b",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    by_email = {line["email"]: line for line in lines}
    assert by_email["person1@big.test"]["status"] == "valid"
    assert by_email["ghost@big.test"]["reason"] == "mailbox_not_found"
    assert by_email["not-an-address"]["status"] == "invalid"
    assert len(lines) == 3


def test_an_engine_can_be_used_from_several_event_loops(sandbox: Sandbox) -> None:
    engine = Engine(settings(sandbox))
    first = asyncio.run(engine.verify("person1@big.test"))
    second = asyncio.run(engine.verify("person2@big.test"))
    assert first.status is second.status is Status.VALID

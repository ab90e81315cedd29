"""Verdicts that stay the same from run to run, and bounded waits, on a hostile mail world.

Greylisting catch-all domains (the probe is retried like any RCPT), greylisting that names its
delay or wants a real wait (retries after the shortest wait the host accepts), silent MX hosts
(the next MX starts after a short head start, not after the whole time-out). Behaviour is
asserted, not time: which hosts were contacted, in which order, how many sessions, the verdicts.
"""

from collections import deque

import pytest

from listhygiene.engine import Engine, EngineSettings
from listhygiene.engine.pacing import Pacer
from listhygiene.engine.probe import DomainProber, MailboxVerdict, ProbeContext
from listhygiene.engine.resolver import Resolver
from listhygiene.engine.syntax import Address, parse_address
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Reason, Status
from tests.conftest import sandbox_settings


def mx(*hosts: str) -> list[dict]:
    return [{"preference": 10 * (i + 1), "host": host} for i, host in enumerate(hosts)]


WORLD = {
    "domains": {
        # greylisting: a catch-all domain, an ordinary one, on one host
        "greyca.test": {"mx": mx("mx.grey.test"), "catch_all": True, "mailboxes": ["ann"]},
        "greyplain.test": {"mx": mx("mx.grey.test"), "mailboxes": ["bob"]},
        # greylisting that names its delay ("Greylisted for 1 seconds")
        "named.test": {"mx": mx("mx.named.test"), "mailboxes": ["cat"]},
        "named2.test": {"mx": mx("mx.named.test"), "mailboxes": ["cat"]},
        # greylisting that wants a real wait, says nothing: two domains on one host
        "slowa.test": {"mx": mx("mx.slow.test"), "mailboxes": ["dan"]},
        "slowb.test": {"mx": mx("mx.slow.test"), "mailboxes": ["dan"]},
        # silent MX hosts
        "backup.test": {"mx": mx("mx1.backup.test", "mx2.backup.test"), "mailboxes": ["eve"]},
        "twosilent.test": {"mx": mx("mx1.twosilent.test", "mx2.twosilent.test")},
        # a primary that answers, slowly, and a backup that answers at once
        "late.test": {"mx": mx("mx1.late.test", "mx2.late.test"), "mailboxes": ["fay", "gus"]},
        # two hosts that answer at once: with no head start, both open a session
        "twin.test": {"mx": mx("mx1.twin.test", "mx2.twin.test"), "mailboxes": ["fay", "gus"]},
        # a busy primary (one slot) and a backup that must stay unused
        **{
            f"busy{i}.test": {"mx": mx("mx1.busy.test", "mx2.busy.test"), "mailboxes": ["hal"]}
            for i in range(3)
        },
        # shared silent primary, politeness of the race
        **{
            f"shared{i}.test": {
                "mx": mx("mx1.shared.test", "mx2.shared.test"),
                "mailboxes": ["ivy"],
            }
            for i in range(3)
        },
    },
    "hosts": {
        "mx.grey.test": {"greylist_delay_ms": 300},
        "mx.named.test": {"greylist_delay_ms": 1000, "greylist_names_delay": True},
        "mx.slow.test": {"greylist_delay_ms": 1000},
        "mx1.backup.test": {"behaviour": "silent"},
        "mx2.backup.test": {},
        "mx1.twosilent.test": {"behaviour": "silent"},
        "mx2.twosilent.test": {"behaviour": "silent"},
        "mx1.late.test": {"banner_delay_ms": 600},
        "mx2.late.test": {},
        "mx1.twin.test": {},
        "mx2.twin.test": {},
        "mx1.busy.test": {},
        "mx2.busy.test": {},
        "mx1.shared.test": {"behaviour": "silent"},
        "mx2.shared.test": {},
    },
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def settings(sandbox: Sandbox, **changes: object) -> EngineSettings:
    return sandbox_settings(sandbox, **({"mx_head_start": 0.2} | changes))


async def run(engine: Engine, addresses: list[str]) -> dict[str, VerificationResult]:
    results = [r async for r in engine.verify_many(addresses)]
    assert len(results) == len(addresses)
    return {r.email: r for r in results}


def verdicts(results: dict[str, VerificationResult]) -> dict[str, tuple]:
    return {a: (r.status, r.reason, r.is_catchall) for a, r in results.items()}


# -- item 2: the catch-all probe is retried like a mailbox RCPT ----------------------------------


async def test_two_runs_over_a_greylisting_catch_all_give_the_same_verdicts(
    sandbox: Sandbox,
) -> None:
    stats = sandbox.stats("mx.grey.test")
    addresses = ["ann@greyca.test", "zed@greyca.test", "kim@greyca.test"]
    addresses += ["bob@greyplain.test", "ghost@greyplain.test"]
    options = {"retry_delays": (0.5,), "mail_from": "tworuns@verifier.test"}
    first = await run(Engine(settings(sandbox, **options)), addresses)
    stats.reset()
    # a fresh engine (a restart): the mailboxes' triplets are known now, the new probe's are not
    second = await run(Engine(settings(sandbox, **options)), addresses)
    assert verdicts(second) == verdicts(first)
    assert {first[a].status for a in addresses[:3]} == {Status.CATCHALL}
    assert first["bob@greyplain.test"].status is Status.VALID
    assert first["bob@greyplain.test"].is_catchall is False
    assert first["ghost@greyplain.test"].reason is Reason.MAILBOX_NOT_FOUND
    # the second run's probes were greylisted, then asked again (the same local part)
    probes = [r for r in stats.recipients if r.startswith("lh-")]
    assert len(probes) == 4
    assert len(set(probes)) == 2


async def test_a_probe_still_greylisted_after_the_retries_leaves_accepted_addresses_unknown(
    sandbox: Sandbox,
) -> None:
    options = {"mail_from": "noretry@verifier.test"}
    await run(Engine(settings(sandbox, retry_delays=(0.5,), **options)), ["ann@greyca.test"])
    # the mailbox's triplet passes now; the new engine's probe is refused and never retried
    result = (await run(Engine(settings(sandbox, **options)), ["ann@greyca.test"]))[
        "ann@greyca.test"
    ]
    assert (result.status, result.reason) == (Status.UNKNOWN, Reason.GREYLISTED)


# -- item 3: retry after the shortest wait the host accepts --------------------------------------


async def test_a_delay_named_by_the_reply_is_honoured(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.named.test")
    stats.reset()
    # the schedule's first point (0.2 s) is too early for this host, which says "1 seconds"
    engine = Engine(settings(sandbox, retry_delays=(0.2,), mail_from="named@verifier.test"))
    result = (await run(engine, ["cat@named.test"]))["cat@named.test"]
    assert result.status is Status.VALID
    assert stats.connections == 2  # refused once, accepted at the named delay: no early retry


async def test_a_named_delay_longer_than_the_run_waits_is_left_to_the_second_pass(
    sandbox: Sandbox,
) -> None:
    stats = sandbox.stats("mx.named.test")
    stats.reset()
    engine = Engine(
        settings(
            sandbox,
            retry_delays=(0.2, 0.2, 0.2),
            retry_max_wait=0.5,
            mail_from="named-long@verifier.test",
        )
    )
    result = (await run(engine, ["cat@named2.test"]))["cat@named2.test"]
    assert (result.status, result.reason) == (Status.UNKNOWN, Reason.GREYLISTED)
    assert stats.connections == 1  # no retry that the host said would fail


async def test_a_host_teaches_its_greylisting_delay_to_the_next_domain(sandbox: Sandbox) -> None:
    stats = sandbox.stats("mx.slow.test")
    engine = Engine(settings(sandbox, retry_delays=(0.4,) * 5, mail_from="learn@verifier.test"))
    stats.reset()
    first = await run(engine, ["dan@slowa.test"])
    assert first["dan@slowa.test"].status is Status.VALID
    assert stats.connections == 4  # refused at 0, 0.4 and 0.8 s, accepted at 1.2 s
    stats.reset()
    second = await run(engine, ["dan@slowb.test"])
    assert second["dan@slowb.test"].status is Status.VALID
    assert stats.connections == 2  # straight to the wait that passed on this host


# -- item 4: the next MX after a head start, not after the whole time-out -------------------------


async def test_a_backup_behind_a_silent_primary_starts_before_the_primary_times_out(
    sandbox: Sandbox,
) -> None:
    primary, backup = sandbox.stats("mx1.backup.test"), sandbox.stats("mx2.backup.test")
    primary.reset()
    backup.reset()
    config = settings(sandbox)
    result = (await run(Engine(config), ["eve@backup.test"]))["eve@backup.test"]
    assert result.status is Status.VALID
    assert backup.recipients[-1] == "eve@backup.test"  # the verdict came from the backup
    assert primary.connections == backup.connections == 1
    # the backup was contacted while the primary still had most of its time limit to answer
    # (the order of events against the configured limit, not a measured duration)
    assert backup.opened_at[0] < primary.opened_at[0] + config.smtp_timeout / 2
    assert backup.opened_at[0] < primary.closed_at[0]


async def test_two_silent_mx_hosts_are_waited_for_together(sandbox: Sandbox) -> None:
    first, second = sandbox.stats("mx1.twosilent.test"), sandbox.stats("mx2.twosilent.test")
    first.reset()
    second.reset()
    config = settings(sandbox)
    result = (await run(Engine(config), ["x@twosilent.test"]))["x@twosilent.test"]
    assert (result.status, result.reason) == (Status.UNKNOWN, Reason.SMTP_TIMEOUT)
    assert first.connections == second.connections == 1
    assert second.opened_at[0] < first.opened_at[0] + config.smtp_timeout / 2


@pytest.mark.parametrize(
    ("domain", "head_start"),
    [("late.test", 0.2), ("twin.test", 0.0)],
    ids=["primary-answers-after-the-backup", "both-answer-at-once"],
)
async def test_a_second_host_that_opens_too_gives_no_second_verdict(
    sandbox: Sandbox, domain: str, head_start: float
) -> None:
    config = settings(sandbox, mx_head_start=head_start)
    route = await Resolver(config).route(domain)
    primary, backup = sandbox.stats(f"mx1.{domain}"), sandbox.stats(f"mx2.{domain}")
    primary.reset()
    backup.reset()
    finished: list[tuple[Address, MailboxVerdict]] = []
    addresses = [parse_address(f"{local}@{domain}") for local in ("fay", "gus", "nope")]
    prober = DomainProber(
        ProbeContext(config, Pacer(config)),
        domain,
        route,
        lambda address, verdict: finished.append((address, verdict)),
    )
    await prober.run(deque(a for a in addresses if a is not None))
    # ``finish`` got each address once
    assert sorted(a.email for a, _ in finished) == sorted(a.email for a in addresses if a)
    # one host verified the mailboxes and the probe: nothing was asked on both
    assert len(primary.recipients) + len(backup.recipients) == 4
    assert primary.connections + backup.connections >= 1


async def test_a_busy_primary_is_waited_for_not_raced(sandbox: Sandbox) -> None:
    primary, backup = sandbox.stats("mx1.busy.test"), sandbox.stats("mx2.busy.test")
    primary.reset()
    backup.reset()
    # one session at a time, one new session a second: the third domain queues about 2 s for
    # the primary's slot; the head start runs from its connection, not from its queueing
    engine = Engine(settings(sandbox, host_concurrency=1, host_rate=1.0))
    results = await run(engine, [f"hal@busy{i}.test" for i in range(3)])
    assert {r.status for r in results.values()} == {Status.VALID}
    assert primary.connections == 3
    assert backup.connections == 0


async def test_the_race_stays_within_each_hosts_politeness(sandbox: Sandbox) -> None:
    primary, backup = sandbox.stats("mx1.shared.test"), sandbox.stats("mx2.shared.test")
    primary.reset()
    backup.reset()
    engine = Engine(settings(sandbox, host_concurrency=1, host_rate=100.0))
    results = await run(engine, [f"ivy@shared{i}.test" for i in range(3)])
    assert {r.status for r in results.values()} == {Status.VALID}
    assert primary.max_active <= 1
    assert backup.max_active <= 1

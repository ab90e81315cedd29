"""Generated worlds: deterministic, valid, big enough, and answering as ``expected`` says."""

import asyncio
import json
import os
import re
import subprocess
import sys
from collections import Counter

import aiosmtplib
import dns.asyncresolver
import dns.resolver
import pytest

from listhygiene.sandbox import Sandbox, World, load_world
from listhygiene.sandbox.generate import (
    BEHAVIOURS,
    DEFAULT_MIX,
    GREYLIST_DELAY_MS,
    HOSTILE_MIX,
    RCPT_CAP,
    GeneratedWorld,
    generate_world,
)
from listhygiene.statuses import Reason, Status

DOMAIN_NAME = re.compile(r"^[a-z]+[0-9]+\.test$")
HOST_NAME = re.compile(r"^mx[0-9]+\.hosting[0-9]+\.test$")
ROLE_LOCALS = {"info", "admin", "support", "sales", "postmaster", "noreply"}


@pytest.fixture(scope="module")
def big() -> GeneratedWorld:
    return generate_world(2024)


def domain_of(address: str) -> str:
    return address.rpartition("@")[2]


# -- (a) determinism ------------------------------------------------------------------------------


def test_same_seed_same_world_other_seed_differs() -> None:
    one = generate_world(7, domains=40, addresses=300)
    two = generate_world(7, domains=40, addresses=300)
    other = generate_world(8, domains=40, addresses=300)
    assert one.world_json() == two.world_json()
    assert one.addresses == two.addresses
    assert dict(one.expected) == dict(two.expected)
    assert one.world_json() != other.world_json()
    assert one.addresses != other.addresses


def test_same_seed_same_json_in_another_process() -> None:
    """No dependence on string hashing (set order) or on the global random state."""
    code = (
        "import random, sys; random.seed(99);"
        "from listhygiene.sandbox.generate import generate_world;"
        "g = generate_world(7, domains=40, addresses=300);"
        "sys.stdout.write(g.world_json() + '\\n'.join(g.addresses))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    here = generate_world(7, domains=40, addresses=300)
    assert out == here.world_json() + "\n".join(here.addresses)


def test_write_round_trips(tmp_path) -> None:
    gen = generate_world(3, domains=30, addresses=150)
    gen.write(tmp_path / "world.json", tmp_path / "addresses.txt")
    assert load_world(tmp_path / "world.json") == gen.world
    lines = (tmp_path / "addresses.txt").read_text(encoding="utf-8").splitlines()
    assert tuple(lines) == gen.addresses
    gen.write(tmp_path / "only.json")
    assert (tmp_path / "only.json").read_text(encoding="utf-8") == gen.world_json()


# -- (b) a benchmark-sized world ------------------------------------------------------------------


def test_benchmark_world_validates_and_is_big_enough(big: GeneratedWorld) -> None:
    data = json.loads(big.world_json())
    assert World.from_dict(data) == big.world
    assert abs(len(big.addresses) - 3000) <= 30
    assert len(set(big.addresses)) == len(big.addresses)
    assert set(big.expected) == set(big.addresses) == set(big.kinds)
    used = {domain_of(a) for a in big.addresses}
    assert len(used) >= 300
    assert all(DOMAIN_NAME.match(d) for d in used)
    # shared hosting: about one host per three domains, each with the reply latency
    assert 80 <= len(big.world.hosts) <= 110
    assert all(HOST_NAME.match(h) for h in big.world.hosts)
    assert {h.latency_ms for h in big.world.hosts.values()} == {20}
    served = Counter(h for d in big.world.domains for h in big.world.mail_hosts_of(d))
    assert set(served) == set(big.world.hosts)
    assert max(served.values()) >= 3
    # hostile hosts stay out of the default mix
    assert all(h.behaviour == "smtp" and h.banner_delay_ms == 0 for h in big.world.hosts.values())


def test_default_mix_is_followed(big: GeneratedWorld) -> None:
    counts = Counter(big.kinds.values())
    assert set(counts) == set(DEFAULT_MIX)
    total = sum(DEFAULT_MIX.values())
    for name, weight in DEFAULT_MIX.items():
        assert counts[name] == pytest.approx(3000 * weight / total, abs=2), name
    verdicts = Counter(big.expected.values())
    assert verdicts[(Status.VALID, None)] > 1500
    for verdict in [
        (Status.INVALID, Reason.MAILBOX_NOT_FOUND),
        (Status.INVALID, Reason.MAILBOX_DISABLED),
        (Status.INVALID, Reason.NO_MAIL_SERVER),
        (Status.RISKY, Reason.MAILBOX_FULL),
        (Status.CATCHALL, Reason.CATCH_ALL),
        (Status.ROLE, Reason.ROLE_ACCOUNT),
    ]:
        assert verdicts[verdict] > 0, verdict
    hosts = big.world.hosts.values()
    assert any(h.greylist_delay_ms == GREYLIST_DELAY_MS for h in hosts)
    assert any(h.max_rcpt_per_connection == RCPT_CAP for h in hosts)


def test_expected_agrees_with_the_world(big: GeneratedWorld) -> None:
    """Every expectation follows from the world's records, row by row of the table."""
    world = big.world
    for address, (status, reason) in big.expected.items():
        local, _, name = address.rpartition("@")
        spec = world.domains.get(name)
        kind = big.kinds[address]
        if reason is Reason.NO_MAIL_SERVER:
            assert spec is None or spec.dns == "nxdomain" or spec.null_mx or not (spec.mx or spec.a)
            continue
        assert spec is not None
        assert spec.dns == "ok"
        assert world.mail_hosts_of(name)
        hosts = [world.hosts[h] for h in world.mail_hosts_of(name)]
        if kind == "greylist":
            assert all(h.greylist_delay_ms for h in hosts)
        if kind == "rcpt_cap":
            assert all(h.max_rcpt_per_connection == RCPT_CAP for h in hosts)
        if kind == "implicit_mx":
            assert not spec.mx
            assert spec.a
        if status is Status.CATCHALL:
            assert spec.catch_all
            continue
        assert not spec.catch_all
        if reason is Reason.MAILBOX_NOT_FOUND:
            assert local not in (*spec.mailboxes, *spec.full, *spec.disabled)
        elif reason is Reason.MAILBOX_DISABLED:
            assert local in spec.disabled
        elif reason is Reason.MAILBOX_FULL:
            assert local in spec.full
        elif status is Status.ROLE:
            assert local in spec.mailboxes
            assert local in ROLE_LOCALS
        else:
            assert (status, reason) == (Status.VALID, None)
            assert local in spec.mailboxes
            assert local not in ROLE_LOCALS


def test_hostile_behaviours_only_through_mix() -> None:
    mix = {**DEFAULT_MIX, "silent": 0.05, "tarpit": 0.05, "refuse": 0.03, "servfail": 0.03}
    gen = generate_world(5, domains=60, addresses=400, latency_ms=0, mix=mix)
    behaviours = Counter(h.behaviour for h in gen.world.hosts.values())
    assert behaviours["silent"] >= 1
    assert behaviours["refuse"] >= 1
    assert any(h.banner_delay_ms > 10_000 for h in gen.world.hosts.values())
    by_kind = {gen.kinds[a]: gen.expected[a] for a in gen.addresses}
    assert by_kind["silent"] == (Status.UNKNOWN, Reason.SMTP_TIMEOUT)
    assert by_kind["tarpit"] == (Status.UNKNOWN, Reason.SMTP_TIMEOUT)
    assert by_kind["refuse"] == (Status.UNKNOWN, Reason.SMTP_UNREACHABLE)
    assert by_kind["servfail"] == (Status.UNKNOWN, Reason.DNS_ERROR)


def test_hostile_mix_adds_silent_pairs_backups_and_greylisting_catch_all() -> None:
    gen = generate_world(1, mix=HOSTILE_MIX)
    world = gen.world
    by_kind: dict[str, set[str]] = {}
    for address in gen.addresses:
        by_kind.setdefault(gen.kinds[address], set()).add(domain_of(address))
    for domain in by_kind["silent_mx"]:
        hosts = world.mail_hosts_of(domain)
        assert len(hosts) == 2
        assert {world.hosts[h].behaviour for h in hosts} == {"silent"}
    for domain in by_kind["backup_mx"]:
        primary, backup = world.mail_hosts_of(domain)
        assert (world.hosts[primary].behaviour, world.hosts[backup].behaviour) == (
            "silent",
            "smtp",
        )
    for domain in by_kind["greylist_catch_all"]:
        assert world.domains[domain].catch_all
        assert all(world.hosts[h].greylist_delay_ms for h in world.mail_hosts_of(domain))
    expected = {gen.kinds[a]: gen.expected[a] for a in gen.addresses}
    assert expected["silent_mx"] == (Status.UNKNOWN, Reason.SMTP_TIMEOUT)
    assert expected["greylist_catch_all"] == (Status.CATCHALL, Reason.CATCH_ALL)
    backups = [gen.expected[a] for a in gen.addresses if gen.kinds[a] == "backup_mx"]
    assert (Status.VALID, None) in backups  # the backup's own mailboxes' verdicts
    greylisting = [h for h in world.hosts.values() if h.greylist_delay_ms]
    assert {h.greylist_names_delay for h in greylisting} == {True, False}


def test_hostile_mix_has_hosts_that_defend_themselves() -> None:
    """Issue 25: the hostile world's hosts defend themselves as Postfix, Exchange and the big
    providers document it, and the verdicts expected are still the mailboxes' own."""
    gen = generate_world(1, mix=HOSTILE_MIX)
    world = gen.world
    domains: dict[str, set[str]] = {}
    for address in gen.addresses:
        domains.setdefault(gen.kinds[address], set()).add(domain_of(address))

    def hosts_of(kind: str) -> list:
        return [world.hosts[h] for d in domains[kind] for h in world.mail_hosts_of(d)]

    assert {
        (h.soft_error_limit, h.hard_error_limit, h.error_sleep_ms) for h in hosts_of("harvest")
    } == {(10, 20, 1000)}
    assert {h.rejected_rcpt_delay_ms for h in hosts_of("reject_tarpit")} == {5000}
    assert all(h.postscreen and h.postscreen.deep_tests for h in hosts_of("postscreen"))
    assert all(h.strict_pipelining and not h.pipelining for h in hosts_of("strict_pipelining"))
    assert all(h.require_tls and h.starttls for h in hosts_of("require_tls"))
    google = {h for d in domains["google"] for h in world.mail_hosts_of(d)}
    assert google == {"aspmx.l.google.com", "alt1.aspmx.l.google.com"}
    assert set(world.providers["google"].hosts) == google
    microsoft = {h for d in domains["microsoft"] for h in world.mail_hosts_of(d)}
    assert len(microsoft) == len(domains["microsoft"])  # a host name per tenant
    assert all(h.endswith(".mail.protection.outlook.com") for h in microsoft)
    assert set(world.providers["microsoft"].hosts) == microsoft
    expected = {gen.kinds[a]: gen.expected[a] for a in gen.addresses}
    assert expected["disposable_mx"] == (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN)
    harvest = [gen.expected[a] for a in gen.addresses if gen.kinds[a] == "harvest"]
    dead = sum(v == (Status.INVALID, Reason.MAILBOX_NOT_FOUND) for v in harvest)
    assert dead > len(harvest) / 2  # domains of many dead mailboxes


def test_every_behaviour_can_be_generated() -> None:
    gen = generate_world(
        9, domains=len(BEHAVIOURS) * 2, addresses=400, mix=dict.fromkeys(BEHAVIOURS, 1)
    )
    assert set(gen.kinds.values()) == set(BEHAVIOURS)
    assert World.from_dict(json.loads(gen.world_json())) == gen.world


def test_explicit_host_count() -> None:
    gen = generate_world(4, domains=50, addresses=200, hosts=12)
    assert len(gen.world.hosts) == 12


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mix": {"valid": 1, "bogus": 1}}, "unknown behaviour"),
        ({"mix": {"valid": -1}}, ">= 0"),
        ({"mix": {"valid": 0}}, "no behaviour"),
        ({"domains": 50, "addresses": 10}, "every domain"),
        ({"domains": 3, "addresses": 100}, "fewer than"),
        ({"domains": 50, "addresses": 200, "hosts": 1}, "between"),
    ],
)
def test_bad_arguments_fail_loudly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_world(1, **kwargs)


# -- (c) the generated world over real sockets ----------------------------------------------------


async def mail_host_address(resolver: dns.asyncresolver.Resolver, domain: str) -> str | None:
    """The address of the domain's preferred mail host; None when it has no mail server."""
    try:
        answer = await resolver.resolve(domain, "MX")
    except dns.resolver.NXDOMAIN:
        return None
    except dns.resolver.NoAnswer:
        try:
            implicit = await resolver.resolve(domain, "A")  # implicit MX
        except dns.resolver.NoAnswer:
            return None
        return implicit[0].address
    best = min(answer, key=lambda mx: mx.preference)
    if str(best.exchange) == ".":
        assert len(answer) == 1  # RFC 7505 null MX: "MX 0 ." alone
        assert best.preference == 0
        return None
    return (await resolver.resolve(best.exchange, "A"))[0].address


async def rcpt(ip: str, port: int, recipients: list[str]) -> list[tuple[int, str]]:
    """One SMTP session: the RCPT replies, in order."""
    client = aiosmtplib.SMTP(hostname=ip, port=port, timeout=5, local_hostname="probe.test")
    await client.connect()
    try:
        await client.ehlo()
        await client.mail("probe@probe.test")
        replies = []
        for recipient in recipients:
            reply = await client.execute_command(b"RCPT", f"TO:<{recipient}>".encode())
            replies.append((reply.code, reply.message))
        await client.quit()
        return replies
    finally:
        client.close()


def assert_reply(address: str, verdict: tuple[Status, Reason | None], reply: tuple[int, str]):
    code, text = reply
    match verdict:
        case (Status.VALID | Status.ROLE | Status.CATCHALL, _):
            assert code == 250, (address, reply)
        case (Status.INVALID, Reason.MAILBOX_NOT_FOUND):
            assert (code, text[:5]) == (550, "5.1.1"), (address, reply)
        case (Status.INVALID, Reason.MAILBOX_DISABLED):
            assert (code, text[:5]) == (550, "5.2.1"), (address, reply)
        case (Status.RISKY, Reason.MAILBOX_FULL):
            assert (code, text[:5]) == (552, "5.2.2"), (address, reply)
        case _:
            pytest.fail(f"no reply expected for {address} {verdict}")


async def test_small_world_answers_as_expected() -> None:
    gen = generate_world(11, domains=20, addresses=200, latency_ms=0)
    samples: dict[str, list[str]] = {}
    for address in gen.addresses:
        samples.setdefault(gen.kinds[address], [])
        if len(samples[gen.kinds[address]]) < 3:
            samples[gen.kinds[address]].append(address)
    assert set(samples) == set(DEFAULT_MIX)

    with Sandbox(gen.world) as sandbox:
        resolver = sandbox.async_resolver()
        port = sandbox.smtp_port
        checked = Counter()
        for kind, addresses in samples.items():
            for address in addresses:
                verdict = gen.expected[address]
                ip = await mail_host_address(resolver, domain_of(address))
                if verdict == (Status.INVALID, Reason.NO_MAIL_SERVER):
                    assert ip is None, address
                    checked[kind] += 1
                    continue
                assert ip is not None, address
                if kind == "greylist":
                    [first] = await rcpt(ip, port, [address])
                    assert first[0] == 450, first
                    assert first[1].startswith("4.2.0"), first
                    await asyncio.sleep(GREYLIST_DELAY_MS / 1000 + 0.1)
                if kind == "rcpt_cap":
                    replies = await rcpt(ip, port, [address] * (RCPT_CAP + 1))
                    assert replies[-1][0] == 452, replies
                    assert replies[-1][1].startswith("4.5.3"), replies
                    assert all(r == replies[0] for r in replies[:-1])
                [reply] = await rcpt(ip, port, [address])
                assert_reply(address, verdict, reply)
                if verdict[0] is Status.CATCHALL:
                    [other] = await rcpt(ip, port, [f"zz-no-such-{kind}-x7q@{domain_of(address)}"])
                    assert other[0] == 250
                checked[kind] += 1
    assert set(checked) == set(DEFAULT_MIX)

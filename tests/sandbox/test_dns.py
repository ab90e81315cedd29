"""The sandbox's authoritative DNS, asked over real UDP and TCP sockets with dnspython."""

import dns.asyncresolver
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.resolver
import pytest

from listhygiene.sandbox import Sandbox

WORLD = {
    "domains": {
        "acme.test": {
            "mx": [
                {"preference": 20, "host": "mx2.acme.test"},
                {"preference": 10, "host": "mx1.acme.test"},
            ],
            "txt": ["v=spf1 -all"],
            "ttl": 120,
        },
        "implicit.test": {"a": ["mail.implicit.test"], "aaaa": ["::1"]},
        "nullmx.test": {"null_mx": True},
        "gone.test": {"dns": "nxdomain"},
        "broken.test": {"dns": "servfail"},
        "slow.test": {"dns": "timeout"},
        "private.test": {"a": ["10.1.2.3"]},
        "big.test": {"txt": [f"record {i} " + "x" * 60 for i in range(20)]},
        "sluggish.test": {"a": ["192.0.2.1"], "dns_latency_ms": 400},
    },
    "hosts": {"mx1.acme.test": {}, "mx2.acme.test": {}, "mail.implicit.test": {}},
    "dnsbl": {"bl.sandbox.test": ["mx2.acme.test"]},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture
def resolver(sandbox: Sandbox) -> dns.resolver.Resolver:
    return sandbox.resolver()


def test_mx_records_in_preference_order(resolver: dns.resolver.Resolver) -> None:
    answer = resolver.resolve("acme.test", "MX")
    records = sorted((r.preference, r.exchange.to_text()) for r in answer)
    assert records == [(10, "mx1.acme.test."), (20, "mx2.acme.test.")]
    assert answer.rrset.ttl == 120
    assert answer.response.flags & dns.flags.AA


def test_mail_hosts_resolve_to_their_own_loopback_address(
    sandbox: Sandbox, resolver: dns.resolver.Resolver
) -> None:
    for host in ("mx1.acme.test", "mx2.acme.test"):
        [record] = resolver.resolve(host, "A")
        assert record.address == sandbox.address_of(host)
        assert record.address.startswith("127.")
    assert sandbox.address_of("mx1.acme.test") != sandbox.address_of("mx2.acme.test")


def test_null_mx(resolver: dns.resolver.Resolver) -> None:
    [record] = resolver.resolve("nullmx.test", "MX")
    assert record.preference == 0
    assert record.exchange.to_text() == "."


def test_implicit_mx_domain_has_a_and_no_mx(
    sandbox: Sandbox, resolver: dns.resolver.Resolver
) -> None:
    with pytest.raises(dns.resolver.NoAnswer) as no_mx:
        resolver.resolve("implicit.test", "MX")
    # the negative answer carries the SOA, so resolvers can cache it
    assert no_mx.value.response().authority[0].rdtype == dns.rdatatype.SOA
    [record] = resolver.resolve("implicit.test", "A")
    assert record.address == sandbox.address_of("mail.implicit.test")
    [v6] = resolver.resolve("implicit.test", "AAAA")
    assert v6.address == "::1"


def test_private_only_address_is_served_as_data(resolver: dns.resolver.Resolver) -> None:
    [record] = resolver.resolve("private.test", "A")
    assert record.address == "10.1.2.3"


@pytest.mark.parametrize("name", ["gone.test", "not-in-the-world.test", "mx9.acme.test"])
def test_nxdomain(resolver: dns.resolver.Resolver, name: str) -> None:
    with pytest.raises(dns.resolver.NXDOMAIN):
        resolver.resolve(name, "MX")


def test_nxdomain_under_a_domain_carries_its_soa(sandbox: Sandbox) -> None:
    query = dns.message.make_query("nobody.acme.test", "A")
    response = dns.query.udp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
    assert response.rcode() == dns.rcode.NXDOMAIN
    [soa] = response.authority
    assert soa.name.to_text() == "acme.test."
    assert soa[0].minimum == 120


def test_empty_non_terminal_is_no_data_not_nxdomain(sandbox: Sandbox) -> None:
    """127.in-addr style: only x.y.z.w.bl.sandbox.test exists, so every name between it and the
    zone is empty (no data), at each depth, and a sibling at each depth does not exist."""
    address = sandbox.address_of("mx2.acme.test").split(".")
    for depth in (1, 2, 3):
        parent = ".".join(reversed(address[:depth])) + ".bl.sandbox.test"
        query = dns.message.make_query(parent, "A")
        response = dns.query.udp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
        assert response.rcode() == dns.rcode.NOERROR, parent
        assert response.answer == []
        sibling = "x" + parent
        query = dns.message.make_query(sibling, "A")
        response = dns.query.udp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
        assert response.rcode() == dns.rcode.NXDOMAIN, sibling


def test_a_broken_domain_is_broken_below_too(sandbox: Sandbox) -> None:
    query = dns.message.make_query("mx.broken.test", "A")
    response = dns.query.udp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
    assert response.rcode() == dns.rcode.SERVFAIL


def test_servfail_is_not_nxdomain(sandbox: Sandbox) -> None:
    query = dns.message.make_query("broken.test", "MX")
    response = dns.query.udp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
    assert response.rcode() == dns.rcode.SERVFAIL
    with pytest.raises(dns.resolver.NoNameservers):
        sandbox.resolver().resolve("broken.test", "MX")


def test_timeout_domain_never_answers(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    resolver.lifetime = 0.5
    with pytest.raises(dns.resolver.LifetimeTimeout):
        resolver.resolve("slow.test", "MX")


def test_tcp_answers_the_same(sandbox: Sandbox) -> None:
    query = dns.message.make_query("acme.test", "MX")
    response = dns.query.tcp(query, "127.0.0.1", port=sandbox.dns_port, timeout=2)
    assert response.rcode() == dns.rcode.NOERROR
    assert len(response.answer[0]) == 2


def test_large_answer_is_truncated_over_udp_and_complete_over_tcp(sandbox: Sandbox) -> None:
    query = dns.message.make_query("big.test", "TXT", use_edns=False)
    udp = dns.query.udp(
        query,
        "127.0.0.1",
        port=sandbox.dns_port,
        timeout=2,
        ignore_trailing=True,
        raise_on_truncation=False,
    )
    assert udp.flags & dns.flags.TC
    # the resolver retries over TCP on its own
    answer = sandbox.resolver().resolve("big.test", "TXT")
    assert len(answer) == 20


async def test_async_resolver(sandbox: Sandbox) -> None:
    resolver = sandbox.async_resolver()
    answer = await resolver.resolve("acme.test", "TXT")
    assert answer[0].strings == (b"v=spf1 -all",)


def test_dnsbl_zone_lists_a_host_by_its_address(
    sandbox: Sandbox, resolver: dns.resolver.Resolver
) -> None:
    listed = ".".join(reversed(sandbox.address_of("mx2.acme.test").split(".")))
    [record] = resolver.resolve(f"{listed}.bl.sandbox.test", "A")
    assert record.address == "127.0.0.2"
    clean = ".".join(reversed(sandbox.address_of("mx1.acme.test").split(".")))
    with pytest.raises(dns.resolver.NXDOMAIN):
        resolver.resolve(f"{clean}.bl.sandbox.test", "A")


def test_garbage_datagram_is_ignored_and_server_keeps_serving(sandbox: Sandbox) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"\x00\x01garbage", ("127.0.0.1", sandbox.dns_port))
    assert sandbox.resolver().resolve("acme.test", "MX")


async def test_a_slow_domain_answers_after_a_quick_one_asked_later(sandbox: Sandbox) -> None:
    """``dns_latency_ms`` delays its domain's answers without holding up the others."""
    import asyncio

    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [sandbox.dns_server.rsplit(":", 1)[0]]
    resolver.port = int(sandbox.dns_server.rsplit(":", 1)[1])
    answered: list[str] = []

    async def ask(name: str) -> None:
        await resolver.resolve(name, "A", raise_on_no_answer=False)
        answered.append(name)

    slow = asyncio.ensure_future(ask("sluggish.test"))
    await asyncio.sleep(0.05)  # asked first
    await ask("mail.implicit.test")
    await slow
    assert answered == ["mail.implicit.test", "sluggish.test"]

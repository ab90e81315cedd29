"""The vectorised paths agree with the scalar ones, field for field."""

import random

import pyarrow as pa

from listhygiene.engine import Engine, EngineSettings
from listhygiene.engine.bulk import verify_column_without_smtp
from listhygiene.engine.syntax import parse_address, parse_addresses, within_limits
from listhygiene.sandbox import Sandbox


def answering_addresses(sandbox: Sandbox) -> list[str]:
    """The world's addresses but those of domains whose nameserver never answers: those cost a
    whole DNS time-out, and the comparisons below run with the engine's default of 5 s so that
    a loaded machine's slow answer is not taken for a time-out (the time-out's verdict is
    tested in tests/sandbox/test_sample_world.py)."""
    return [
        address
        for address in sandbox.world.addresses()
        if sandbox.world.domains[address.rpartition("@")[2]].dns != "timeout"
    ]


def tricky_strings(count: int, seed: int = 7) -> list[str]:
    """Strings near the edges of address syntax: dots, dashes, odd characters, lengths, case."""
    rng = random.Random(seed)
    local_chars = "abcXYZ09._-+!#$%&'*/=?^`{|}~\"() ,:;<>@[\\]éü\u00a0"
    domain_chars = "abcxyz09-.éü_"
    tlds = [
        "test",
        "com",
        "c0m",
        "x1",
        "localhost",
        "local",
        "onion",
        "invalid",
        "arpa",
        "a",
        "xn--p1ai",
        "museum",
        "t-est",
        "-test",
        "test-",
    ]
    out = []
    for _ in range(count):
        local = "".join(
            rng.choice(local_chars) for _ in range(rng.choice([1, 2, 5, 12, 63, 64, 65]))
        )
        labels = [
            "".join(rng.choice(domain_chars) for _ in range(rng.choice([1, 3, 8, 63, 64])))
            for _ in range(rng.choice([0, 1, 2]))
        ]
        domain = ".".join([*labels, rng.choice(tlds)])
        text = f"{local}@{domain}"
        if rng.random() < 0.2:
            text = text.lower()
        if rng.random() < 0.05:
            text = f" {text} "
        if rng.random() < 0.05:
            text = text.replace("@", "@@")
        out.append(text)
    # plain addresses the fast path should take
    out += [f"user{i}.name+tag@mail{i % 7}.example{i % 3}.test" for i in range(2000)]
    out += [
        "a" * 64 + "@x.test",
        "a" * 65 + "@x.test",
        "ab--cd@x.test",
        "x@ab--cd.test",
        "x@xn--bcher-kva.test",
        "x@123.456",
        "x@sub.123",
        "Mixed@Case.Test",
    ]
    return out


def test_vectorised_syntax_agrees_with_email_validator() -> None:
    values = tricky_strings(20_000)
    table = parse_addresses(pa.array(values)).to_pylist()
    accepted = 0
    for value, row in zip(values, table, strict=True):
        address = parse_address(value)
        assert row["valid"] == (address is not None), value
        if address is not None:
            accepted += 1
            assert (
                row["email"],
                row["local_part"],
                row["domain"],
                row["domain_unicode"],
                row["needs_smtputf8"],
            ) == (
                address.email,
                address.local_part,
                address.domain,
                address.domain_unicode,
                address.needs_smtputf8,
            ), value
    assert accepted > 2000  # the comparison covered both sides


def test_scalar_shortcut_agrees_with_email_validator() -> None:
    from email_validator import EmailNotValidError, validate_email

    for value in tricky_strings(10_000, seed=11):
        address = parse_address(value)
        try:
            valid = validate_email(
                value.strip(),
                check_deliverability=False,
                allow_smtputf8=True,
                allow_quoted_local=True,
                test_environment=True,
            )
        except EmailNotValidError:
            valid = None
        if valid is not None and not within_limits(valid.local_part, valid.ascii_domain):
            valid = None  # RFC 5321's 64-octet local part, which email-validator leaves to strict
        assert (address is None) == (valid is None), value
        if valid is not None and address is not None:
            assert address.email == valid.normalized
            assert address.domain == valid.ascii_domain


#: The sample world, fresh for this module (greylisting remembers whom it has seen).
SANDBOX_WORLD = "sample_data/world.json"


async def test_column_without_smtp_equals_the_engine(sandbox: Sandbox) -> None:
    settings = EngineSettings(
        dns_server=sandbox.dns_server,
        smtp_port=sandbox.smtp_port,
        allow_private_mx=True,
        helo="verifier.test",
        dns_timeout=5.0,
        check_smtp=False,
        dnsbl_zones=("bl.sandbox.test",),
    )
    addresses = [
        *answering_addresses(sandbox),
        "someone@not-in-the-world.test",
        "bad@@x",
        "",
        "   ",
        "info+eu@contoso.test",
        "no-reply@contoso.test",
        "x@localhost",
        "jordan.blake@parked-brand.test",
        "Mixed.Case@Northwind.Test",
        "josé@bücher.test",
    ]
    reference = {key: result async for key, result in Engine(settings).verify_each(addresses)}
    table = await verify_column_without_smtp(Engine(settings), pa.array(addresses))
    assert table.num_rows == len(addresses)
    for address, row in zip(addresses, table.to_pylist(), strict=True):
        expected = reference[address].to_row(internal=True)
        expected.pop("response_time")
        row.pop("response_time")
        assert row == expected, address


async def test_settled_lookups_are_known_without_a_task_and_give_the_same_facts(
    sandbox: Sandbox,
) -> None:
    """A bulk run asks for the same domains job after job: what the caches hold is answered at
    once (``Resolver.known``, ``Reputation.known``), and equals what the lookups gave."""
    from listhygiene.engine.reputation import Reputation
    from listhygiene.engine.resolver import Resolver
    from listhygiene.results import DomainReputation

    settings = EngineSettings(
        dns_server=sandbox.dns_server, allow_private_mx=True, dns_timeout=5.0, check_smtp=False
    )
    resolver = Resolver(settings)
    reputation = Reputation(resolver.dns_resolver, ("bl.sandbox.test",))
    domain = next(iter(sandbox.world.addresses())).rpartition("@")[2]
    assert resolver.known(domain) is None  # never asked
    route = await resolver.route(domain)
    assert resolver.known(domain) == route
    assert resolver.known("never-asked.test") is None
    mx_ip = route.exchangers[0].addresses[0]
    assert reputation.known(mx_ip) is None
    assert reputation.known(mx_ip) is None  # asking whether it is known asks nothing
    listed = await reputation.of(mx_ip)
    assert reputation.known(mx_ip) == listed
    assert reputation.known("") == DomainReputation()

    engine = Engine(settings.model_copy(update={"dnsbl_zones": ("bl.sandbox.test",)}))
    domains = sorted({a.rpartition("@")[2] for a in answering_addresses(sandbox)})
    first = await engine.domain_facts(domains)
    again = await engine.domain_facts(domains)
    assert {d: f[:2] for d, f in again.items()} == {d: f[:2] for d, f in first.items()}
    assert {f[2] for f in again.values()} == {0}  # answered from the caches

"""The sample world answers as ``sample_data/README.md`` says, over real sockets.

Every address of the README's table is checked here against the running ``mail_sandbox`` (the
world named by ``listhygiene_world``, i.e. ``sample_data/world.json``): its DNS answer with
dnspython, its SMTP reply code and enhanced status code with aiosmtplib. The expectations are
written out below, not read from the README; the last tests parse the README only to prove that it,
the world and these tables name the same domains and addresses.

The companies kept for CRM samples (README, "The CRM companies") are checked by their rule: every
mailbox ``world.json`` lists for them is accepted, any other local part is unknown to the server.
"""

import asyncio
import ipaddress
import re
import time
import uuid
from pathlib import Path

import aiosmtplib
import dns.name
import dns.resolver
import pytest
from cryptography import x509

from listhygiene.sandbox import Sandbox, load_world
from listhygiene.sandbox.world import HostSpec

ROOT = Path(__file__).resolve().parents[2]
WORLD_FILE = ROOT / "sample_data" / "world.json"
README = ROOT / "sample_data" / "README.md"

HELO = "verifier.listhygiene.test"
SENDER = "verify@verifier.listhygiene.test"
#: Per-step aiosmtplib timeout: every reply of the sandbox comes at once, except the tarpit's.
TIMEOUT = 3.0

OK = (250, "2.1.5")
USER_UNKNOWN = (550, "5.1.1")

NORTHWIND = [
    "james.wilson", "mary.johnson", "robert.brown", "patricia.garcia", "john.miller",
    "jennifer.davis", "michael.rodriguez", "linda.martinez", "david.hernandez", "elizabeth.lopez",
    "william.gonzalez", "barbara.anderson", "richard.thomas", "susan.taylor", "joseph.moore",
    "jessica.jackson", "thomas.martin", "sarah.lee", "charles.perez", "karen.thompson",
]  # fmt: skip
GLOBEX = [
    f"{local}@globex.test"
    for local in ("ana.silva", "ben.carter", "chloe.nguyen", "diego.ramos",
                  "emma.fischer", "farid.haddad", "grace.kim", "hugo.weber")
]  # fmt: skip
INITECH = [
    f"{local}@initech.test"
    for local in ("peter.gibbons", "michael.bolton", "samir.nagheenanajar", "milton.waddams",
                  "bill.lumbergh", "joanna.moore", "tom.smykowski", "lawrence.hart")
]  # fmt: skip
ROLES = [f"{local}@contoso.test" for local in ("info", "admin", "support", "sales", "postmaster")]

#: (address, the mail host that receives it, (RCPT reply code, enhanced status code)): one RCPT
#: in a fresh session each, as README's table says.
RCPT_TABLE: list[tuple[str, str, tuple[int, str]]] = [
    ("alice.johnson@acme-corp.test", "mx.acme-corp.test", OK),
    ("bob.smith@acme-corp.test", "mx.acme-corp.test", OK),
    ("carol.white@acme-corp.test", "mx.acme-corp.test", OK),
    ("nobody.here@acme-corp.test", "mx.acme-corp.test", USER_UNKNOWN),
    *((f"{local}@northwind.test", "mx.northwind.test", OK) for local in NORTHWIND),
    ("nina.patel@fabrikam.test", "mx.fabrikam.test", OK),
    ("anyone-at-all@fabrikam.test", "mx.fabrikam.test", OK),
    ("info@fabrikam.test", "mx.fabrikam.test", OK),
    ("dana.cole@litware.test", "mx.litware.test", (552, "5.2.2")),
    ("evan.price@adventure-works.test", "mx.adventure-works.test", (550, "5.2.1")),
    *((address, "mx.globex.test", OK) for address in GLOBEX),
    *((address, "mx.initech.test", OK) for address in INITECH),
    ("olga.petrova@wideworld-importers.test", "mx.wideworld-importers.test", (550, "5.7.1")),
    ("andre.dubois@proseware.test", "mx.proseware.test", OK),
    ("josé@lucerne-publishing.test", "mx.lucerne-publishing.test", OK),
    ("anna.schmidt@bücher.test", "mx.xn--bcher-kva.test", OK),
    ("priya.shah@trey-research.test", "host.trey-research.test", OK),
    ("tom.becker@datum-corp.test", "mx2.datum-corp.test", OK),
    ("ella.wright@wingtip-toys.test", "mx.wingtip-toys.test", OK),
    ("noah.king@southridge-video.test", "mx.southridge-video.test", OK),
    ("fatima.zahra@lamna-healthcare.test", "mx.lamna-healthcare.test", OK),
    ("paul.novak@consolidated-messenger.test", "mx.consolidated-messenger.test", OK),
    *((address, "mx.contoso.test", OK) for address in ROLES),
    ("kevin.lee@contoso.test", "mx.contoso.test", OK),
    ("noreply@contoso.test", "mx.contoso.test", USER_UNKNOWN),
    ("quicktest.4821@mailinator.com", "mail.mailinator.com", OK),
    ("no-such-inbox@mailinator.com", "mail.mailinator.com", USER_UNKNOWN),
    ("ruth.baker@adatum.test", "mx.adatum.test", OK),
]

#: Addresses of the README whose behaviour is not one RCPT reply: each has its own test below.
GREYLISTED = "greta.olsen@tailspin.test"
NO_SMTPUTF8 = "andré@proseware.test"
TARPIT = "liam.oconnor@margie-travel.test"
CONNECT_BLOCK = "yuki.tanaka@blue-yonder.test"
REFUSED = "ivan.horvat@coho-winery.test"
SILENT = "zoe.turner@fourth-coffee.test"
GARBAGE = "raj.mehta@woodgrove-bank.test"
DROP = "lena.vogel@graphic-design-institute.test"
ENDLESS = "oscar.munson@munson-pickles.test"
NULL_MX = "jordan.blake@parked-brand.test"
NXDOMAIN = ["max.mustermann@defunct-startup.test", "someone@not-in-the-world.test"]
SERVFAIL = "claire.dupont@humongous-insurance.test"
DNS_TIMEOUT = "sven.berg@alpine-ski-house.test"
NO_MAIL_SERVER = "marta.rossi@relecloud.test"
DANGLING_MX = "kim.larsen@tailwind-traders.test"
PRIVATE_A = "ines.costa@nod-publishers.test"

#: The mail host of each address whose SMTP behaviour has its own test.
HOST_OF = {
    GREYLISTED: "mx.tailspin.test",
    NO_SMTPUTF8: "mx.proseware.test",
    TARPIT: "mx.margie-travel.test",
    CONNECT_BLOCK: "mx.blue-yonder.test",
    REFUSED: "mx.coho-winery.test",
    SILENT: "mx.fourth-coffee.test",
    GARBAGE: "mx.woodgrove-bank.test",
    DROP: "mx.graphic-design-institute.test",
    ENDLESS: "mx.munson-pickles.test",
}
CHECKED_ELSEWHERE = [
    *HOST_OF, NULL_MX, *NXDOMAIN, SERVFAIL, DNS_TIMEOUT, NO_MAIL_SERVER, DANGLING_MX, PRIVATE_A,
]  # fmt: skip

#: The CRM companies and free providers: domain -> (its one MX: preference, host; its role
#: mailboxes). Every mailbox world.json lists for them gets 250 2.1.5; any other local part 550.
CLOUDMAIL, MAILSHIELD = "aspmx.cloudmail-hosting.test", "inbound.mailshield.test"
CRM_DOMAINS: dict[str, tuple[tuple[int, str], set[str]]] = {
    "brightwater-analytics.test": ((1, CLOUDMAIL), {"info", "sales"}),
    "harborline-logistics.test": ((10, "mx.harborline-logistics.test"), {"info", "support"}),
    "pinecrest-dental.test": ((1, CLOUDMAIL), {"info"}),
    "meridian-capital.test": ((10, MAILSHIELD), {"info"}),
    "oakridge-software.test": ((10, "mx.oakridge-software.test"), {"sales", "support"}),
    "bluepeak-energy.test": ((10, "mail.bluepeak-energy.test"), set()),
    "sterling-hotels.test": ((10, MAILSHIELD), {"info", "sales"}),
    "nordlicht-maschinenbau.test": ((10, "mail.nordlicht-maschinenbau.test"), {"info"}),
    "riverbend-foods.test": ((1, CLOUDMAIL), {"sales"}),
    "summit-legal.test": ((1, CLOUDMAIL), {"info"}),
    "ironclad-manufacturing.test": ((10, "mx.ironclad-manufacturing.test"), {"sales", "support"}),
    "lumen-health.test": ((10, MAILSHIELD), {"info", "support"}),
    "gmail.com": ((5, "gmail-smtp-in.l.google.com"), set()),
    "yahoo.com": ((1, "mta5.am0.yahoodns.net"), set()),
}
#: Local parts that are no mailbox on any CRM domain: a person and a role.
CRM_UNKNOWN = ["no.such.person", "marketing"]
#: A person's mailbox on a CRM domain: first.last (free providers: digits or "_" too).
PERSON = re.compile(r"[a-z]+(-[a-z]+)*[._][a-z]+(-[a-z]+)*[0-9]*")


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox(mail_sandbox: Sandbox) -> Sandbox:
    """``mail_sandbox``, provided it runs the sample world (``--listhygiene-world`` may differ)."""
    if mail_sandbox.world != load_world(WORLD_FILE):
        pytest.skip("mail_sandbox does not run sample_data/world.json")
    return mail_sandbox


def domain_of(address: str) -> str:
    return address.rpartition("@")[2]


def a_label(domain: str) -> str:
    return dns.name.from_unicode(domain, idna_codec=dns.name.IDNA_2008).to_text(True).lower()


def on_the_wire(address: str) -> str:
    """The address as a verifier sends it: the domain as A-labels, the local part as it is."""
    local, _, domain = address.rpartition("@")
    return f"{local}@{a_label(domain)}"


def client(sandbox: Sandbox, host: str, *, timeout: float = TIMEOUT) -> aiosmtplib.SMTP:
    return aiosmtplib.SMTP(
        hostname=sandbox.address_of(host),
        port=sandbox.smtp_port,
        timeout=timeout,
        start_tls=False,
        local_hostname=HELO,
    )


def status(reply: aiosmtplib.SMTPResponse) -> tuple[int, str]:
    """(reply code, enhanced status code) of a reply."""
    return reply.code, reply.message.split(" ", 1)[0]


async def mail_from(smtp: aiosmtplib.SMTP, sender: str = SENDER, *, utf8: bool = False) -> None:
    options = [b"SMTPUTF8"] if utf8 else []
    reply = await smtp.execute_command(b"MAIL", b"FROM:<" + sender.encode() + b">", *options)
    assert status(reply) == (250, "2.1.0"), reply


async def rcpt(smtp: aiosmtplib.SMTP, address: str) -> aiosmtplib.SMTPResponse:
    return await smtp.execute_command(b"RCPT", b"TO:<" + on_the_wire(address).encode() + b">")


async def rcpt_replies(
    sandbox: Sandbox, host: str, addresses: list[str], *, sender: str = SENDER
) -> list[aiosmtplib.SMTPResponse]:
    """One session: EHLO, MAIL FROM (with SMTPUTF8 for a UTF-8 address), one RCPT each, QUIT."""
    smtp = client(sandbox, host)
    await smtp.connect()
    try:
        await smtp.ehlo()
        await mail_from(smtp, sender, utf8=not all(a.isascii() for a in addresses))
        replies = [await rcpt(smtp, address) for address in addresses]
        await smtp.quit()
    finally:
        smtp.close()
    return replies


async def read_reply(reader: asyncio.StreamReader) -> list[str]:
    """The lines of one (possibly multi-line) SMTP reply, read off a raw connection."""
    lines = []
    while True:
        line = (await asyncio.wait_for(reader.readline(), TIMEOUT)).decode().rstrip("\r\n")
        assert line, "the server closed the connection"
        lines.append(line)
        if line[3:4] != "-":
            return lines


async def raw_connection(
    sandbox: Sandbox, host: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(
        asyncio.open_connection(sandbox.address_of(host), sandbox.smtp_port), TIMEOUT
    )


# -- one RCPT reply per address --------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "host"),
    [pytest.param(a, h, id=a) for a, h in [*((a, h) for a, h, _ in RCPT_TABLE), *HOST_OF.items()]],
)
def test_mail_route(sandbox: Sandbox, address: str, host: str) -> None:
    """The domain's MX (or implicit MX) leads to the host README names, at its address."""
    resolver = sandbox.resolver()
    domain = domain_of(address)
    try:
        answer = resolver.resolve(domain, "MX")
    except dns.resolver.NoAnswer:  # implicit MX: the domain's own A record
        addresses = [r.address for r in resolver.resolve(domain, "A")]
    else:
        exchanges = [r.exchange.to_text(omit_final_dot=True) for r in answer]
        assert host in exchanges
        addresses = [r.address for r in resolver.resolve(host, "A")]
    assert addresses == [sandbox.address_of(host)]


@pytest.mark.parametrize(
    ("address", "host", "expected"), [pytest.param(*row, id=row[0]) for row in RCPT_TABLE]
)
async def test_rcpt_reply(
    sandbox: Sandbox, address: str, host: str, expected: tuple[int, str]
) -> None:
    [reply] = await rcpt_replies(sandbox, host, [address])
    assert status(reply) == expected, reply.message


async def test_policy_block_at_rcpt_names_the_blocklist(sandbox: Sandbox) -> None:
    address = "olga.petrova@wideworld-importers.test"
    [reply] = await rcpt_replies(sandbox, "mx.wideworld-importers.test", [address])
    assert status(reply) == (550, "5.7.1")
    assert "blocked using zen.spamhaus.org" in reply.message


# -- DNS ---------------------------------------------------------------------------------------


def test_null_mx(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    [mx] = resolver.resolve(domain_of(NULL_MX), "MX")
    assert (mx.preference, mx.exchange) == (0, dns.name.root)
    # The web server's A record is there too, and is no implicit MX.
    assert [r.address for r in resolver.resolve(domain_of(NULL_MX), "A")] == ["192.0.2.80"]


@pytest.mark.parametrize("rdtype", ["MX", "A"])
@pytest.mark.parametrize("address", NXDOMAIN)
def test_nxdomain(sandbox: Sandbox, address: str, rdtype: str) -> None:
    with pytest.raises(dns.resolver.NXDOMAIN):
        sandbox.resolver().resolve(domain_of(address), rdtype)


@pytest.mark.parametrize("rdtype", ["MX", "A"])
def test_servfail(sandbox: Sandbox, rdtype: str) -> None:
    with pytest.raises(dns.resolver.NoNameservers, match="SERVFAIL"):
        sandbox.resolver().resolve(domain_of(SERVFAIL), rdtype)


def test_dns_timeout(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    resolver.lifetime = 1.0
    with pytest.raises(dns.resolver.LifetimeTimeout):
        resolver.resolve(domain_of(DNS_TIMEOUT), "MX")


@pytest.mark.parametrize("rdtype", ["MX", "A", "AAAA"])
def test_domain_without_mail_server(sandbox: Sandbox, rdtype: str) -> None:
    with pytest.raises(dns.resolver.NoAnswer):
        sandbox.resolver().resolve(domain_of(NO_MAIL_SERVER), rdtype)


def test_domain_without_mail_server_exists(sandbox: Sandbox) -> None:
    answer = sandbox.resolver().resolve(domain_of(NO_MAIL_SERVER), "TXT")
    assert b"v=spf1 -all" in {b"".join(r.strings) for r in answer}


def test_implicit_mx(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    with pytest.raises(dns.resolver.NoAnswer):
        resolver.resolve("trey-research.test", "MX")
    addresses = [r.address for r in resolver.resolve("trey-research.test", "A")]
    assert addresses == [sandbox.address_of("host.trey-research.test")]


def test_several_mx(sandbox: Sandbox) -> None:
    answer = sandbox.resolver().resolve("datum-corp.test", "MX")
    assert sorted((r.preference, r.exchange.to_text(True)) for r in answer) == [
        (10, "mx1.datum-corp.test"),
        (20, "mx2.datum-corp.test"),
    ]


def test_dangling_mx(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    [mx] = resolver.resolve(domain_of(DANGLING_MX), "MX")
    assert mx.exchange.to_text(True) == "mx.decommissioned.tailwind-traders.test"
    for rdtype in ("A", "AAAA"):
        with pytest.raises(dns.resolver.NXDOMAIN):
            resolver.resolve(mx.exchange, rdtype)


def test_only_a_private_address(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    with pytest.raises(dns.resolver.NoAnswer):
        resolver.resolve(domain_of(PRIVATE_A), "MX")
    [a] = resolver.resolve(domain_of(PRIVATE_A), "A")
    assert a.address == "127.255.0.1"
    assert not ipaddress.ip_address(a.address).is_global


def test_idn_domain_is_served_as_its_a_label(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    for name in ("bücher.test", "xn--bcher-kva.test"):
        [mx] = resolver.resolve(name, "MX")
        assert mx.exchange.to_text(True) == "mx.xn--bcher-kva.test"


def dnsbl_name(sandbox: Sandbox, host: str) -> str:
    octets = sandbox.address_of(host).split(".")
    return ".".join(reversed(octets)) + ".bl.sandbox.test"


def test_dnsbl_lists_one_mail_host(sandbox: Sandbox) -> None:
    resolver = sandbox.resolver()
    listed = dnsbl_name(sandbox, "mx.adatum.test")
    assert [r.address for r in resolver.resolve(listed, "A")] == ["127.0.0.2"]
    [txt] = resolver.resolve(listed, "TXT")
    assert txt.strings == (b"Listed by the listhygiene sandbox",)
    with pytest.raises(dns.resolver.NXDOMAIN):
        resolver.resolve(dnsbl_name(sandbox, "mx.acme-corp.test"), "A")


# -- SMTP behaviours that are more than one reply ----------------------------------------------


async def test_greylisting_then_accepted_after_the_delay(sandbox: Sandbox) -> None:
    # A sender of its own, so that no earlier probe of this session has passed the greylist.
    sender = f"greylist-{uuid.uuid4().hex[:12]}@verifier.listhygiene.test"
    host = HOST_OF[GREYLISTED]
    first = await rcpt_replies(sandbox, host, [GREYLISTED, GREYLISTED], sender=sender)
    assert [status(r) for r in first] == [(450, "4.2.0")] * 2
    assert "Greylisted" in first[0].message
    await asyncio.sleep(1.6)
    [retry] = await rcpt_replies(sandbox, host, [GREYLISTED], sender=sender)
    assert status(retry) == OK


async def test_rcpt_cap_answered_452_keeps_the_session(sandbox: Sandbox) -> None:
    replies = await rcpt_replies(sandbox, "mx.globex.test", GLOBEX[:5])  # QUIT still gets 221
    assert [status(r) for r in replies] == [OK] * 3 + [(452, "4.5.3")] * 2


async def test_rcpt_cap_answered_421_closes_the_session(sandbox: Sandbox) -> None:
    reader, writer = await raw_connection(sandbox, "mx.initech.test")
    try:
        assert (await read_reply(reader))[-1].startswith("220 ")
        commands = [f"EHLO {HELO}", f"MAIL FROM:<{SENDER}>"]
        commands += [f"RCPT TO:<{address}>" for address in INITECH[:4]]
        replies = []
        for command in commands:
            writer.write(command.encode() + b"\r\n")
            replies.append((await read_reply(reader))[-1])
        assert [r[:9] for r in replies[2:]] == ["250 2.1.5"] * 3 + ["421 4.7.0"]
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed by the server
    finally:
        writer.close()


async def test_policy_block_at_connect(sandbox: Sandbox) -> None:
    reader, writer = await raw_connection(sandbox, HOST_OF[CONNECT_BLOCK])
    try:
        [banner] = await read_reply(reader)
        assert banner.startswith("554 5.7.1 ")
        assert "blocked using b.barracudacentral.org" in banner
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    finally:
        writer.close()
    with pytest.raises(aiosmtplib.SMTPConnectResponseError) as caught:
        await client(sandbox, HOST_OF[CONNECT_BLOCK]).connect()
    assert caught.value.code == 554


async def test_no_smtputf8(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[NO_SMTPUTF8])
    await smtp.connect()
    try:
        await smtp.ehlo()
        assert not smtp.supports_extension("smtputf8")
        refused = await smtp.execute_command(b"MAIL", f"FROM:<{SENDER}>".encode(), b"SMTPUTF8")
        assert refused.code == 501
        await mail_from(smtp)
        reply = await rcpt(smtp, NO_SMTPUTF8)
        assert reply.code == 500  # aiosmtpd's "strict ASCII mode": no enhanced code
        await smtp.quit()
    finally:
        smtp.close()


async def test_smtputf8_advertised(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.lucerne-publishing.test")
    await smtp.connect()
    try:
        await smtp.ehlo()
        assert smtp.supports_extension("smtputf8")
        await smtp.quit()
    finally:
        smtp.close()


async def test_tarpit_banner(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[TARPIT], timeout=6)
    started = time.monotonic()
    banner = await smtp.connect()
    waited = time.monotonic() - started
    try:
        assert banner.code == 220
        assert waited >= 2.9
        await smtp.ehlo()
        await mail_from(smtp)
        assert status(await rcpt(smtp, TARPIT)) == OK
        await smtp.quit()
    finally:
        smtp.close()


@pytest.mark.parametrize("host", [HOST_OF[REFUSED], "mx1.datum-corp.test"])
async def test_connection_refused(sandbox: Sandbox, host: str) -> None:
    with pytest.raises(aiosmtplib.SMTPConnectError) as caught:
        await client(sandbox, host).connect()
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


async def test_silent_host_times_out(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[SILENT], timeout=1)
    started = time.monotonic()
    with pytest.raises(aiosmtplib.SMTPConnectTimeoutError):
        await smtp.connect()
    assert time.monotonic() - started < 2.5
    smtp.close()


async def test_garbage_host(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[GARBAGE])
    with pytest.raises(aiosmtplib.SMTPResponseException, match="Malformed SMTP response"):
        await smtp.connect()
    smtp.close()


async def test_drop_host(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[DROP])
    banner = await smtp.connect()
    try:
        assert banner.code == 220
        with pytest.raises(aiosmtplib.SMTPServerDisconnected):
            await smtp.ehlo()
    finally:
        smtp.close()


async def test_endless_banner(sandbox: Sandbox) -> None:
    smtp = client(sandbox, HOST_OF[ENDLESS])
    with pytest.raises(aiosmtplib.SMTPResponseException, match="Response too long"):
        await smtp.connect()
    smtp.close()


@pytest.mark.parametrize(
    ("host", "advertised"), [("mx.acme-corp.test", True), ("mx.wingtip-toys.test", False)]
)
async def test_pipelining_advertised(sandbox: Sandbox, host: str, advertised: bool) -> None:
    smtp = client(sandbox, host)
    await smtp.connect()
    try:
        await smtp.ehlo()
        assert smtp.supports_extension("pipelining") is advertised
        await smtp.quit()
    finally:
        smtp.close()


async def test_pipelined_batch_gets_every_reply(sandbox: Sandbox) -> None:
    reader, writer = await raw_connection(sandbox, "mx.acme-corp.test")
    try:
        await read_reply(reader)
        writer.write(f"EHLO {HELO}\r\n".encode())
        await read_reply(reader)
        writer.write(
            f"MAIL FROM:<{SENDER}>\r\nRCPT TO:<alice.johnson@acme-corp.test>\r\n"
            "RCPT TO:<nobody.here@acme-corp.test>\r\n".encode()
        )
        replies = [(await read_reply(reader))[-1][:9] for _ in range(3)]
        assert replies == ["250 2.1.0", "250 2.1.5", "550 5.1.1"]
    finally:
        writer.close()
    assert sandbox.stats("mx.acme-corp.test").max_commands_per_read >= 3


async def test_starttls_with_self_signed_certificate(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.southridge-video.test")
    await smtp.connect()
    try:
        await smtp.ehlo()
        assert smtp.supports_extension("starttls")
        assert (await smtp.starttls(validate_certs=False)).code == 220
        der = smtp.get_transport_info("ssl_object").getpeercert(binary_form=True)
        certificate = x509.load_der_x509_certificate(der)
        assert certificate.issuer == certificate.subject  # self-signed
        await smtp.ehlo()
        await mail_from(smtp)
        assert status(await rcpt(smtp, "noah.king@southridge-video.test")) == OK
        await smtp.quit()
    finally:
        smtp.close()


async def test_reply_latency(sandbox: Sandbox) -> None:
    smtp = client(sandbox, "mx.lamna-healthcare.test")
    await smtp.connect()
    try:
        await smtp.ehlo()
        started = time.monotonic()
        await smtp.noop()
        assert time.monotonic() - started >= 0.045
        await smtp.quit()
    finally:
        smtp.close()


async def test_max_connections(sandbox: Sandbox) -> None:
    host = "mx.consolidated-messenger.test"
    held = [client(sandbox, host), client(sandbox, host)]
    try:
        for smtp in held:
            assert (await smtp.connect()).code == 220
        with pytest.raises(aiosmtplib.SMTPConnectResponseError) as caught:
            await client(sandbox, host).connect()
        assert caught.value.code == 421
        assert caught.value.message.startswith("4.7.0 ")
        for smtp in held:
            await smtp.quit()
    finally:
        for smtp in held:
            smtp.close()
    # Once the two have quit, a new connection is welcome again.
    deadline = time.monotonic() + TIMEOUT
    while True:
        smtp = client(sandbox, host)
        try:
            banner = await smtp.connect()
        except aiosmtplib.SMTPConnectResponseError:
            assert time.monotonic() < deadline, "the connection slots were never released"
            await asyncio.sleep(0.05)
            continue
        finally:
            smtp.close()
        assert banner.code == 220
        break


# -- the CRM companies, by rule --------------------------------------------------------------


def crm_mailboxes(domain: str) -> list[str]:
    return list(load_world(WORLD_FILE).domains[domain].mailboxes)


@pytest.mark.parametrize("domain", CRM_DOMAINS)
def test_crm_domain_mx(sandbox: Sandbox, domain: str) -> None:
    (preference, host), _ = CRM_DOMAINS[domain]
    resolver = sandbox.resolver()
    [mx] = resolver.resolve(domain, "MX")
    assert (mx.preference, mx.exchange.to_text(omit_final_dot=True)) == (preference, host)
    assert [r.address for r in resolver.resolve(host, "A")] == [sandbox.address_of(host)]


@pytest.mark.parametrize("domain", CRM_DOMAINS)
def test_crm_domain_mailboxes(domain: str) -> None:
    """Each domain has people (first.last) and exactly the role mailboxes written above."""
    _, roles = CRM_DOMAINS[domain]
    mailboxes = crm_mailboxes(domain)
    assert len(mailboxes) == len(set(mailboxes))
    assert {m for m in mailboxes if not PERSON.fullmatch(m)} == roles
    assert not set(CRM_UNKNOWN) & set(mailboxes)
    spec = load_world(WORLD_FILE).domains[domain]
    assert (spec.full, spec.disabled, spec.catch_all, spec.dns) == ([], [], False, "ok")


@pytest.mark.parametrize("domain", CRM_DOMAINS)
async def test_crm_rcpt_replies(sandbox: Sandbox, domain: str) -> None:
    """One session per domain: every listed mailbox is accepted, unlisted local parts are not."""
    (_, host), _ = CRM_DOMAINS[domain]
    addresses = [f"{local}@{domain}" for local in [*crm_mailboxes(domain), *CRM_UNKNOWN]]
    replies = await rcpt_replies(sandbox, host, addresses)
    got = {address: status(reply) for address, reply in zip(addresses, replies, strict=True)}
    want = {a: USER_UNKNOWN if a.partition("@")[0] in CRM_UNKNOWN else OK for a in addresses}
    assert got == want


def test_crm_hosts_are_plain() -> None:
    """No behaviour on the CRM hosts: a list of their addresses verifies quickly."""
    hosts = load_world(WORLD_FILE).hosts
    for (_, host), _ in CRM_DOMAINS.values():
        assert hosts[host] == HostSpec(), host


# -- README, world and these tables agree ------------------------------------------------------

ADDRESS = re.compile(r"`([^`\s@]+@[^`\s@]+)`")
#: A row of README's "The CRM companies" table: domain, company, `host` (preference), mailboxes,
#: role mailboxes.
CRM_ROW = re.compile(
    r"\| `(?P<domain>[^`@\s]+)` \| [^|]+ \| `(?P<host>[^`]+)` \((?P<preference>\d+)\) "
    r"\| (?P<count>\d+) \| (?P<roles>[^|]+) \|"
)


def readme_addresses() -> set[str]:
    """The addresses in the first column of README's tables, domains as A-labels."""
    found = set()
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            found.update(on_the_wire(a) for a in ADDRESS.findall(line.split("|")[1]))
    return found


def readme_crm_companies() -> dict[str, tuple[tuple[int, str], int, set[str]]]:
    """README's "The CRM companies": domain -> ((MX preference, host), mailboxes, roles)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The CRM companies", 1)[1].split("\n## ", 1)[0]
    found = {}
    for match in CRM_ROW.finditer(section):
        roles = set(re.findall(r"`([^`]+)`", match["roles"]))
        preference_host = (int(match["preference"]), match["host"])
        found[a_label(match["domain"])] = (preference_host, int(match["count"]), roles)
    return found


def checked_addresses() -> set[str]:
    return {on_the_wire(a) for a in [*(row[0] for row in RCPT_TABLE), *CHECKED_ELSEWHERE]}


def test_every_domain_of_the_world_is_in_the_readme() -> None:
    world = load_world(WORLD_FILE)
    documented = {domain_of(a) for a in readme_addresses()} | set(readme_crm_companies())
    # the names of the verifying machine (its PTR) are in "The verifying machine"
    machine = README.read_text(encoding="utf-8").split("## The verifying machine", 1)[1]
    machine = machine.split("\n## ", 1)[0]
    assert [name for name in world.ptr.values() if f"| `{name}` |" not in machine] == []
    assert set(world.domains) - documented - set(world.ptr.values()) == set()


def test_every_address_and_host_of_the_world_is_in_the_readme() -> None:
    world = load_world(WORLD_FILE)
    crm = readme_crm_companies()
    listed = {on_the_wire(a) for a in world.addresses() if domain_of(a) not in crm}
    assert listed - readme_addresses() == set()
    text = README.read_text(encoding="utf-8")
    assert [host for host in world.hosts if f"`{host}`" not in text] == []


def test_readme_crm_section_matches_the_world() -> None:
    """Each CRM domain's row gives its MX, its number of mailboxes and its role mailboxes."""
    world = load_world(WORLD_FILE)
    for domain, (mx, count, roles) in readme_crm_companies().items():
        spec = world.domains[domain]
        assert [(m.preference, m.host) for m in spec.mx] == [mx], domain
        assert len(spec.mailboxes) == count, domain
        assert {m for m in spec.mailboxes if not PERSON.fullmatch(m)} == roles, domain
    # the CRM domains are apart from the table of behaviours
    assert not {domain_of(a) for a in readme_addresses()} & set(readme_crm_companies())


def test_every_address_of_the_readme_is_tested() -> None:
    assert readme_addresses() == checked_addresses()
    readme_crm = readme_crm_companies()
    assert set(readme_crm) == set(CRM_DOMAINS)
    assert {d: (mx, roles) for d, (mx, _, roles) in readme_crm.items()} == CRM_DOMAINS


def test_world_has_a_description() -> None:
    assert load_world(WORLD_FILE).description.strip()

"""The engine's verdict for every address of the sample world, as ``sample_data/README.md`` says.

The engine runs twice over the whole world (once per module): with ``check_smtp`` on and with it
off. Each address then gets its own test of the form A status, reason, score, ``smtp_check``,
``credits_used`` and flags, and of the form B status and reason. The expected verdicts are written
out below from the README's table and PRODUCT.md ("Statuses"), not computed by the code under
test.

The companies kept for CRM samples (README, "The CRM companies": twelve companies and two free
providers, 613 mailboxes) follow one rule, so their rows are built from it rather than written out:
every mailbox world.json lists is valid (role for a role mailbox), any other local part is invalid /
mailbox_not_found; addresses at ``gmail.com`` and ``yahoo.com`` have ``is_free`` true. Their
verdicts are checked one domain per test.

Settings: a per-step SMTP timeout of 1.5 s (the 3 s tarpit is ``unknown / smtp_timeout``), one
retry after 1.8 s (the 1.5 s greylist is passed: ``valid``), a DNS timeout of 1 s, and
``allow_private_mx`` on (so ``nod-publishers.test``, whose implicit MX is a loopback address where
nothing listens, is ``unknown / smtp_unreachable``, not ``invalid / no_mail_server``).
"""

import asyncio
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest

from listhygiene.engine import Engine, EngineSettings
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox, load_world

WORLD_FILE = Path(__file__).resolve().parents[2] / "sample_data" / "world.json"
DNSBL_ZONE = "bl.sandbox.test"

# -- the expected table --------------------------------------------------------------------------
# "status/reason", or "status" alone when the reason is null.

VALID = "valid"
ROLE = "role/role_account"
CATCHALL = "catchall/catch_all"
ACCEPT_ALL = "accept_all"
NOT_FOUND = "invalid/mailbox_not_found"
DISABLED = "invalid/mailbox_disabled"
FULL = "risky/mailbox_full"
FULL_B = "invalid/mailbox_full"
NO_MAIL = "invalid/no_mail_server"
DISPOSABLE = "disposable/disposable_domain"
DNS_ERR = "unknown/dns_error"
UNREACHABLE = "unknown/smtp_unreachable"
TIMEOUT = "unknown/smtp_timeout"
BLOCKED = "unknown/blocked"
NO_SMTPUTF8 = "unknown/smtputf8_unsupported"
SYNTAX = "invalid/invalid_syntax"


class Expected(NamedTuple):
    email: str  # the address as the result reports it (Unicode domain)
    a: str  # form A, check_smtp on
    b: str  # form B, check_smtp on
    a_off: str  # form A, check_smtp off
    b_off: str  # form B, check_smtp off


NORTHWIND = [
    "james.wilson", "mary.johnson", "robert.brown", "patricia.garcia", "john.miller",
    "jennifer.davis", "michael.rodriguez", "linda.martinez", "david.hernandez", "elizabeth.lopez",
    "william.gonzalez", "barbara.anderson", "richard.thomas", "susan.taylor", "joseph.moore",
    "jessica.jackson", "thomas.martin", "sarah.lee", "charles.perez", "karen.thompson",
]  # fmt: skip
GLOBEX = [
    "ana.silva", "ben.carter", "chloe.nguyen", "diego.ramos",
    "emma.fischer", "farid.haddad", "grace.kim", "hugo.weber",
]  # fmt: skip
INITECH = [
    "peter.gibbons", "michael.bolton", "samir.nagheenanajar", "milton.waddams",
    "bill.lumbergh", "joanna.moore", "tom.smykowski", "lawrence.hart",
]  # fmt: skip


def _plain_valid(addresses: list[str]) -> list[Expected]:
    return [Expected(a, VALID, VALID, VALID, VALID) for a in addresses]


# fmt: off
TABLE: list[Expected] = [
    *_plain_valid(["alice.johnson@acme-corp.test", "bob.smith@acme-corp.test",
                   "carol.white@acme-corp.test"]),
    Expected("nobody.here@acme-corp.test",             NOT_FOUND,   NOT_FOUND,   VALID, VALID),
    *_plain_valid([f"{local}@northwind.test" for local in NORTHWIND]),
    Expected("nina.patel@fabrikam.test",               CATCHALL,    ACCEPT_ALL,  VALID, VALID),
    Expected("anyone-at-all@fabrikam.test",            CATCHALL,    ACCEPT_ALL,  VALID, VALID),
    Expected("info@fabrikam.test",                     CATCHALL,    ACCEPT_ALL,  ROLE,  VALID),
    # greylisted for 1.5 s; the engine's one retry comes after 1.8 s
    Expected("greta.olsen@tailspin.test",              VALID,       VALID,       VALID, VALID),
    Expected("dana.cole@litware.test",                 FULL,        FULL_B,      VALID, VALID),
    Expected("evan.price@adventure-works.test",        DISABLED,    DISABLED,    VALID, VALID),
    # at most 3 RCPT a session (then 452, or 421 and close): the rest go in new sessions
    *_plain_valid([f"{local}@globex.test" for local in GLOBEX]),
    *_plain_valid([f"{local}@initech.test" for local in INITECH]),
    Expected("olga.petrova@wideworld-importers.test",  BLOCKED,     BLOCKED,     VALID, VALID),
    Expected("yuki.tanaka@blue-yonder.test",           BLOCKED,     BLOCKED,     VALID, VALID),
    Expected("andré@proseware.test",                   NO_SMTPUTF8, NO_SMTPUTF8, VALID, VALID),
    Expected("andre.dubois@proseware.test",            VALID,       VALID,       VALID, VALID),
    Expected("josé@lucerne-publishing.test",           VALID,       VALID,       VALID, VALID),
    Expected("anna.schmidt@bücher.test",               VALID,       VALID,       VALID, VALID),
    # banner after 3 s; the per-step timeout is 1.5 s
    Expected("liam.oconnor@margie-travel.test",        TIMEOUT,     TIMEOUT,     VALID, VALID),
    Expected("ivan.horvat@coho-winery.test",           UNREACHABLE, UNREACHABLE, VALID, VALID),
    Expected("zoe.turner@fourth-coffee.test",          TIMEOUT,     TIMEOUT,     VALID, VALID),
    Expected("raj.mehta@woodgrove-bank.test",          UNREACHABLE, UNREACHABLE, VALID, VALID),
    Expected("lena.vogel@graphic-design-institute.test", UNREACHABLE, UNREACHABLE, VALID, VALID),
    Expected("oscar.munson@munson-pickles.test",       UNREACHABLE, UNREACHABLE, VALID, VALID),
    Expected("jordan.blake@parked-brand.test",         NO_MAIL,     NO_MAIL,     NO_MAIL, NO_MAIL),
    Expected("priya.shah@trey-research.test",          VALID,       VALID,       VALID, VALID),
    Expected("max.mustermann@defunct-startup.test",    NO_MAIL,     NO_MAIL,     NO_MAIL, NO_MAIL),
    Expected("someone@not-in-the-world.test",          NO_MAIL,     NO_MAIL,     NO_MAIL, NO_MAIL),
    Expected("claire.dupont@humongous-insurance.test", DNS_ERR,     DNS_ERR,     DNS_ERR, DNS_ERR),
    Expected("sven.berg@alpine-ski-house.test",        DNS_ERR,     DNS_ERR,     DNS_ERR, DNS_ERR),
    Expected("marta.rossi@relecloud.test",             NO_MAIL,     NO_MAIL,     NO_MAIL, NO_MAIL),
    Expected("tom.becker@datum-corp.test",             VALID,       VALID,       VALID, VALID),
    Expected("ella.wright@wingtip-toys.test",          VALID,       VALID,       VALID, VALID),
    Expected("noah.king@southridge-video.test",        VALID,       VALID,       VALID, VALID),
    Expected("fatima.zahra@lamna-healthcare.test",     VALID,       VALID,       VALID, VALID),
    Expected("paul.novak@consolidated-messenger.test", VALID,       VALID,       VALID, VALID),
    Expected("kim.larsen@tailwind-traders.test",       NO_MAIL,     NO_MAIL,     NO_MAIL, NO_MAIL),
    # allow_private_mx on: the loopback implicit MX is tried, and refuses
    Expected("ines.costa@nod-publishers.test",         UNREACHABLE, UNREACHABLE, VALID, VALID),
    Expected("info@contoso.test",                      ROLE,        VALID,       ROLE,  VALID),
    Expected("admin@contoso.test",                     ROLE,        VALID,       ROLE,  VALID),
    Expected("support@contoso.test",                   ROLE,        VALID,       ROLE,  VALID),
    Expected("sales@contoso.test",                     ROLE,        VALID,       ROLE,  VALID),
    Expected("postmaster@contoso.test",                ROLE,        VALID,       ROLE,  VALID),
    Expected("kevin.lee@contoso.test",                 VALID,       VALID,       VALID, VALID),
    Expected("noreply@contoso.test",                   NOT_FOUND,   NOT_FOUND,   ROLE,  VALID),
    Expected("quicktest.4821@mailinator.com",          DISPOSABLE,  VALID,       DISPOSABLE, VALID),
    Expected("no-such-inbox@mailinator.com",           DISPOSABLE,  NOT_FOUND,   DISPOSABLE, VALID),
    Expected("ruth.baker@adatum.test",                 VALID,       VALID,       VALID, VALID),
    # not in the README: row 1 of the decision table
    Expected("not-an-address",                         SYNTAX,      SYNTAX,      SYNTAX, SYNTAX),
]
# fmt: on

#: The CRM companies and free providers: domain -> its role mailboxes (README, "The CRM companies").
CRM_ROLES: dict[str, set[str]] = {
    "brightwater-analytics.test": {"info", "sales"},
    "harborline-logistics.test": {"info", "support"},
    "pinecrest-dental.test": {"info"},
    "meridian-capital.test": {"info"},
    "oakridge-software.test": {"sales", "support"},
    "bluepeak-energy.test": set(),
    "sterling-hotels.test": {"info", "sales"},
    "nordlicht-maschinenbau.test": {"info"},
    "riverbend-foods.test": {"sales"},
    "summit-legal.test": {"info"},
    "ironclad-manufacturing.test": {"sales", "support"},
    "lumen-health.test": {"info", "support"},
    "gmail.com": set(),
    "yahoo.com": set(),
}
FREE_DOMAINS = {"gmail.com", "yahoo.com"}
#: Per CRM domain, local parts that are no mailbox: a person (valid without SMTP) and a role.
CRM_UNKNOWN = {"no.such.person": VALID, "marketing": ROLE}


def _crm_rows(domain: str) -> list[Expected]:
    rows = []
    for local in load_world(WORLD_FILE).domains[domain].mailboxes:
        verdict = ROLE if local in CRM_ROLES[domain] else VALID
        rows.append(Expected(f"{local}@{domain}", verdict, VALID, verdict, VALID))
    for local, without_smtp in CRM_UNKNOWN.items():
        rows.append(Expected(f"{local}@{domain}", NOT_FOUND, NOT_FOUND, without_smtp, VALID))
    return rows


CRM_TABLE: dict[str, list[Expected]] = {domain: _crm_rows(domain) for domain in CRM_ROLES}
ALL_ROWS = [*TABLE, *(row for rows in CRM_TABLE.values() for row in rows)]
BY_EMAIL = {row.email: row for row in ALL_ROWS}

#: Addresses the README names that are not mailboxes of the world (World.addresses() lacks them).
EXTRA_INPUTS = [
    "nobody.here@acme-corp.test",
    "anyone-at-all@fabrikam.test",
    "info@fabrikam.test",
    "someone@not-in-the-world.test",
    "noreply@contoso.test",
    "no-such-inbox@mailinator.com",
    "not-an-address",
    *(f"{local}@{domain}" for domain in CRM_ROLES for local in CRM_UNKNOWN),
]

#: mx_records words by domain (default: one MX with a usable address).
MX_WORDS: dict[str, list[str]] = {
    "parked-brand.test": ["null"],
    "trey-research.test": ["implicit"],
    "nod-publishers.test": ["implicit"],
    "tailwind-traders.test": ["unresolved"],
    "defunct-startup.test": [],
    "not-in-the-world.test": [],
    "humongous-insurance.test": [],
    "alpine-ski-house.test": [],
    "relecloud.test": [],
    "datum-corp.test": ["valid", "valid"],
}
ROLE_LOCALS = {"info", "admin", "support", "sales", "postmaster", "noreply", "marketing"}
#: PRODUCT.md, "Statuses".
SCORES = {
    "valid": 0.95,
    "invalid": 0.1,
    "unknown": 0.5,
    "risky": 0.4,
    "disposable": 0.3,
    "catchall": 0.7,
    "role": 0.6,
}
FORM_B_SCORES = {"valid": 0.95, "accept_all": 0.7, "invalid": 0.1, "unknown": 0.5}
VALID_WITHOUT_SMTP = 0.9

# -- the two runs --------------------------------------------------------------------------------


def _inputs() -> list[str]:
    return [*load_world(WORLD_FILE).addresses(), *EXTRA_INPUTS]


class Run(NamedTuple):
    results: list[VerificationResult]
    by_email: dict[str, VerificationResult]


def _run(sandbox: Sandbox, *, check_smtp: bool) -> Run:
    settings = EngineSettings(
        dns_server=sandbox.dns_server,
        smtp_port=sandbox.smtp_port,
        allow_private_mx=True,
        helo="verifier.test",
        smtp_timeout=1.5,
        dns_timeout=1.0,
        retry_delays=(1.8,),
        dnsbl_zones=(DNSBL_ZONE,),
        check_smtp=check_smtp,
    )

    async def collect() -> list[VerificationResult]:
        return [r async for r in Engine(settings).verify_many(_inputs())]

    results = asyncio.run(collect())
    return Run(results, {r.email: r for r in results})


@pytest.fixture(scope="module")
def sandbox(mail_sandbox: Sandbox) -> Sandbox:
    if mail_sandbox.world != load_world(WORLD_FILE):
        pytest.skip("mail_sandbox does not run sample_data/world.json")
    return mail_sandbox


@pytest.fixture(scope="module")
def smtp_run(sandbox: Sandbox) -> Run:
    return _run(sandbox, check_smtp=True)


@pytest.fixture(scope="module")
def dns_run(sandbox: Sandbox) -> Run:
    return _run(sandbox, check_smtp=False)


@pytest.fixture(params=["smtp", "no_smtp"])
def run(request: pytest.FixtureRequest) -> tuple[bool, Run]:
    check_smtp = request.param == "smtp"
    return check_smtp, request.getfixturevalue("smtp_run" if check_smtp else "dns_run")


def _split(verdict: str) -> tuple[str, str | None]:
    status, _, reason = verdict.partition("/")
    return status, reason or None


# -- the table itself ----------------------------------------------------------------------------


def test_table_names_every_address_of_the_world_once() -> None:
    from listhygiene.engine.syntax import parse_address

    assert len(BY_EMAIL) == len(ALL_ROWS)
    world = {parse_address(a).email for a in load_world(WORLD_FILE).addresses()}  # type: ignore[union-attr]
    assert world <= set(BY_EMAIL)
    assert len(_inputs()) == len(ALL_ROWS)
    # the CRM domains are those the hand-written table does not name
    named = {parse_address(row.email).domain for row in TABLE if "@" in row.email}  # type: ignore[union-attr]
    machine = set(load_world(WORLD_FILE).ptr.values())  # the HELO name of `make demo`
    assert set(load_world(WORLD_FILE).domains) - named - machine == set(CRM_ROLES)


# -- every address once --------------------------------------------------------------------------


def test_every_address_has_exactly_one_result(run: tuple[bool, Run]) -> None:
    _, outcome = run
    counts = Counter(r.email for r in outcome.results)
    assert {email: n for email, n in counts.items() if n != 1} == {}
    assert set(counts) == set(BY_EMAIL)
    assert len(outcome.results) == len(_inputs())


# -- per address, SMTP on ------------------------------------------------------------------------


def _check_common(result: VerificationResult, row: Expected, *, check_smtp: bool) -> None:
    status, reason = _split(row.a if check_smtp else row.a_off)
    assert (result.status.value, result.reason.value if result.reason else None) == (
        status,
        reason,
    )
    expected_score = SCORES[status]
    if status == "valid" and not check_smtp:
        expected_score = VALID_WITHOUT_SMTP
    assert result.score == pytest.approx(expected_score)
    assert result.credits_used == (0 if status == "unknown" else 1)
    takes_mail = reason not in ("invalid_syntax", "no_mail_server", "dns_error")
    assert result.smtp_check is (check_smtp and takes_mail)

    form_b = result.to_form_b()
    b_status, b_reason = _split(row.b if check_smtp else row.b_off)
    assert (form_b["status"], form_b["reason"]) == (b_status, b_reason)
    b_score = FORM_B_SCORES[b_status]
    if b_status == "valid" and not check_smtp:
        b_score = VALID_WITHOUT_SMTP
    assert form_b["score"] == pytest.approx(b_score)
    assert form_b["credits_used"] == result.credits_used

    if status == "valid":
        assert result.is_deliverable
    if status == "invalid":
        assert not result.is_deliverable

    # flags, as measured whatever the status
    if reason == "invalid_syntax":
        assert (result.domain, result.mx_records) == ("", ())
        return
    local, domain = row.email.rsplit("@", 1)
    assert result.domain == domain
    assert result.is_disposable is (domain == "mailinator.com")
    assert result.is_role is (local in ROLE_LOCALS)
    assert result.is_free is (domain in FREE_DOMAINS)
    assert list(result.mx_records) == MX_WORDS.get(domain, ["valid"])


@pytest.mark.parametrize("row", TABLE, ids=[row.email for row in TABLE])
def test_verdict_with_smtp(smtp_run: Run, row: Expected) -> None:
    result = smtp_run.by_email[row.email]
    _check_common(result, row, check_smtp=True)
    assert result.is_catchall is row.email.endswith("@fabrikam.test")


@pytest.mark.parametrize("row", TABLE, ids=[row.email for row in TABLE])
def test_verdict_without_smtp(dns_run: Run, row: Expected) -> None:
    result = dns_run.by_email[row.email]
    _check_common(result, row, check_smtp=False)
    assert result.is_catchall is False  # not measured without SMTP


@pytest.mark.parametrize("domain", CRM_ROLES)
def test_crm_verdicts(run: tuple[bool, Run], domain: str) -> None:
    check_smtp, outcome = run
    for row in CRM_TABLE[domain]:
        result = outcome.by_email[row.email]
        _check_common(result, row, check_smtp=check_smtp)
        assert result.is_catchall is False


# -- reputation ----------------------------------------------------------------------------------


def test_listed_mail_host_is_reported_without_changing_the_verdict(
    smtp_run: Run, sandbox: Sandbox
) -> None:
    result = smtp_run.by_email["ruth.baker@adatum.test"]
    reputation = result.domain_reputation
    assert reputation.mx_ip == sandbox.address_of("mx.adatum.test")
    assert reputation.checked
    assert reputation.is_listed
    assert list(reputation.blacklists) == [DNSBL_ZONE]
    assert result.status.value == "valid"


def test_unlisted_mail_host(smtp_run: Run, sandbox: Sandbox) -> None:
    reputation = smtp_run.by_email["alice.johnson@acme-corp.test"].domain_reputation
    assert reputation.mx_ip == sandbox.address_of("mx.acme-corp.test")
    assert reputation.checked
    assert not reputation.is_listed
    assert list(reputation.blacklists) == []


def test_no_reputation_without_a_mail_host(smtp_run: Run) -> None:
    reputation = smtp_run.by_email["max.mustermann@defunct-startup.test"].domain_reputation
    assert (reputation.mx_ip, reputation.checked, reputation.is_listed) == ("", False, False)

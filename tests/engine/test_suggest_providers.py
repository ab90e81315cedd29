"""Typo suggestions and the mail provider (issue 19, items 1 and 2; docs/engine.md).

Unit and property tests of ``engine/suggest.py`` and ``engine/providers.py``, then a sandbox
world whose domains have the MX host names of the big providers, verified over real sockets.
"""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import OSA

from listhygiene.engine import Engine
from listhygiene.engine.providers import PROVIDERS, provider_of
from listhygiene.engine.suggest import PROVIDER_DOMAINS, Suggester, suggest
from listhygiene.results import VerificationResult
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Status

# -- suggestions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("email", "expected"),
    [
        ("jane@gmial.com", "jane@gmail.com"),
        ("jane@hotmial.com", "jane@hotmail.com"),
        ("jane@yahoo.con", "jane@yahoo.com"),
        ("jane@gamil.com", "jane@gmail.com"),
        ("jane@outlok.com", "jane@outlook.com"),
        ("Jane.Doe+news@GMIAL.COM", "Jane.Doe+news@gmail.com"),
    ],
)
def test_typos_of_big_providers_are_suggested(email: str, expected: str) -> None:
    assert suggest(email) == expected


@pytest.mark.parametrize(
    "email",
    [
        "jane@gmail.com",  # right already
        "jane@ymail.com",  # Yahoo's own domain, one letter from gmail.com
        "jane@gmx.de",
        "jane@acme-corp.test",  # far from every provider
        "jane@abc.com",  # two edits from aol.com in a short name
        "not an address",
        "@gmial.com",
    ],
)
def test_no_suggestion_for_real_or_distant_domains(email: str) -> None:
    assert suggest(email) is None


def test_the_lists_own_common_domains_are_candidates_and_known() -> None:
    suggester = Suggester(["northwind-traders.com", "gmial.com"])
    assert suggester.address("ann@northwind-tarders.com") == "ann@northwind-traders.com"
    # a domain the list itself has often is taken as meant, not as a typo
    assert suggester.address("ann@gmial.com") is None


_DOMAIN = st.from_regex(r"[a-z]{2,12}\.(com|net|org|co|con|cm)", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(domain=_DOMAIN)
def test_a_suggestion_is_a_known_domain_within_a_small_distance(domain: str) -> None:
    suggester = Suggester()
    found = suggester.domain(domain)
    if found is None:
        return
    assert found in PROVIDER_DOMAINS
    assert found != domain
    assert OSA.distance(domain, found) <= (1 if len(domain) < 12 else 2)
    assert suggester.domain(found) is None  # the suggestion is itself never "corrected"


@settings(max_examples=200, deadline=None)
@given(
    local=st.from_regex(r"[a-z0-9._]{1,20}", fullmatch=True),
    provider=st.sampled_from(PROVIDER_DOMAINS),
)
def test_a_suggestion_keeps_the_local_part(local: str, provider: str) -> None:
    typo = provider[1] + provider[0] + provider[2:]  # swap the first two letters
    found = suggest(f"{local}@{typo}")
    assert found is None or found.rpartition("@")[0] == local


# -- providers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "domain", "expected"),
    [
        (["aspmx.l.google.com", "alt1.aspmx.l.google.com"], "acme.com", "google"),
        (["gmail-smtp-in.l.google.com"], "gmail.com", "google"),
        (["smtp.google.com"], "acme.com", "google"),
        (["acme-com.mail.protection.outlook.com"], "acme.com", "microsoft"),
        (["hotmail-com.olc.protection.outlook.com"], "hotmail.com", "microsoft"),
        (["mta5.am0.yahoodns.net"], "yahoo.com", "yahoo"),
        (["mx0a-00123401.pphosted.com"], "acme.com", "proofpoint"),
        (["eu-smtp-inbound-1.mimecast.com"], "acme.co.uk", "mimecast"),
        (["mx.zoho.eu"], "acme.de", "zoho"),
        (["in1-smtp.messagingengine.com"], "acme.com", "fastmail"),
        (["mx01.mail.icloud.com"], "me.com", "icloud"),
        (["d123.ess.barracudanetworks.com"], "acme.com", "barracuda"),
        (["inbound-smtp.eu-west-1.amazonaws.com"], "acme.com", "amazon"),
        (["mail.acme.com"], "acme.com", "self_hosted"),
        (["acme.com"], "acme.com", "self_hosted"),  # the implicit MX
        (["mx.hosting-company.net"], "acme.com", "other"),
        (["mx.other.co.uk"], "acme.co.uk", "other"),
        (["evil-google.com"], "acme.com", "other"),  # a suffix matches whole labels only
        ([], "acme.com", None),
    ],
)
def test_provider_from_mx_host_names(hosts: list[str], domain: str, expected: str | None) -> None:
    found = provider_of(hosts, domain)
    assert found == expected
    assert found is None or found in PROVIDERS


# -- over the sandbox -----------------------------------------------------------------------------


def _mx(*hosts: str) -> list[dict[str, object]]:
    return [{"preference": 10 * (i + 1), "host": h} for i, h in enumerate(hosts)]


WORLD = {
    "domains": {
        "gworkspace.test": {
            "mx": _mx("aspmx.l.google.com", "alt1.aspmx.l.google.com"),
            "mailboxes": ["ann"],
        },
        "m365.test": {"mx": _mx("m365-test.mail.protection.outlook.com"), "mailboxes": ["ann"]},
        "gateway.test": {"mx": _mx("mx0a-001.pphosted.com"), "mailboxes": ["ann"]},
        "mimecast.test": {"mx": _mx("eu-smtp-inbound-1.mimecast.com"), "mailboxes": ["ann"]},
        "own.test": {"mx": _mx("mail.own.test"), "mailboxes": ["ann"]},
        "implicit.test": {"a": ["host.implicit.test"], "mailboxes": ["ann"]},
        "hosted.test": {"mx": _mx("mx.shared-hosting.test"), "mailboxes": ["ann"]},
        # a typo domain that exists and takes mail: the suggestion is advice only
        "outlok.com": {"mx": _mx("mx.outlok.com"), "mailboxes": ["ann"]},
    },
    "hosts": {
        "aspmx.l.google.com": {},
        "alt1.aspmx.l.google.com": {},
        "m365-test.mail.protection.outlook.com": {},
        "mx0a-001.pphosted.com": {},
        "eu-smtp-inbound-1.mimecast.com": {},
        "mail.own.test": {},
        "host.implicit.test": {},
        "mx.shared-hosting.test": {},
        "mx.outlok.com": {},
    },
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def _verify(
    engine: Engine, emails: list[str], check_smtp: bool = True
) -> dict[str, VerificationResult]:
    async def run() -> dict[str, VerificationResult]:
        return {r.email: r async for r in engine.verify_many(emails, check_smtp=check_smtp)}

    return asyncio.run(run())


@pytest.mark.parametrize("check_smtp", [True, False])
def test_mx_provider_over_the_sandbox(sandbox: Sandbox, check_smtp: bool) -> None:
    engine = Engine(sandbox.engine_settings(helo="verifier.test"))
    results = _verify(
        engine,
        [
            "ann@gworkspace.test",
            "ann@m365.test",
            "ann@gateway.test",
            "ann@mimecast.test",
            "ann@own.test",
            "ann@implicit.test",
            "ann@hosted.test",
            "ann@nxdomain.test",
        ],
        check_smtp,
    )
    assert {email: r.mx_provider for email, r in results.items()} == {
        "ann@gworkspace.test": "google",
        "ann@m365.test": "microsoft",
        "ann@gateway.test": "proofpoint",
        "ann@mimecast.test": "mimecast",
        "ann@own.test": "self_hosted",
        "ann@implicit.test": "self_hosted",
        "ann@hosted.test": "other",
        "ann@nxdomain.test": None,  # no mail host to classify
    }
    assert results["ann@gworkspace.test"].status is Status.VALID


def test_a_suggestion_changes_neither_the_address_nor_its_status(sandbox: Sandbox) -> None:
    settings_ = sandbox.engine_settings(helo="verifier.test")
    advised = _verify(Engine(settings_), ["ann@outlok.com", "bob@outlok.com"])
    plain_engine = Engine(settings_)
    plain_engine.suggester = Suggester(["outlok.com"])  # the list's own domain: no advice
    plain = _verify(plain_engine, ["ann@outlok.com", "bob@outlok.com"])
    assert advised["ann@outlok.com"].suggestion == "ann@outlook.com"
    assert advised["bob@outlok.com"].suggestion == "bob@outlook.com"
    assert plain["ann@outlok.com"].suggestion is None
    for email in ("ann@outlok.com", "bob@outlok.com"):
        assert advised[email].email == email
        assert advised[email].status == plain[email].status
        assert advised[email].reason == plain[email].reason
    assert advised["ann@outlok.com"].status is Status.VALID
    assert advised["bob@outlok.com"].status is Status.INVALID


def test_form_b_carries_did_you_mean_only_with_a_suggestion(sandbox: Sandbox) -> None:
    results = _verify(
        Engine(sandbox.engine_settings(helo="verifier.test")), ["ann@outlok.com", "ann@own.test"]
    )
    assert results["ann@outlok.com"].to_form_b()["did_you_mean"] == "ann@outlook.com"
    assert "did_you_mean" not in results["ann@own.test"].to_form_b()
    back = VerificationResult.from_form_b(results["ann@outlok.com"].to_form_b())
    assert back.suggestion == "ann@outlook.com"
    # form A's shape is unchanged
    assert "suggestion" not in results["ann@outlok.com"].to_form_a()
    assert "mx_provider" not in results["ann@outlok.com"].to_form_a()

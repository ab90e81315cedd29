"""Address syntax and normalisation, and the disposable / free / role lists."""

import pytest

from listhygiene.engine.lists import is_disposable, is_free, is_role
from listhygiene.engine.syntax import Address, parse_address

# -- parse_address -------------------------------------------------------------------------------


def test_plain_address() -> None:
    assert parse_address("alice.johnson@acme-corp.test") == Address(
        email="alice.johnson@acme-corp.test",
        local_part="alice.johnson",
        domain="acme-corp.test",
        domain_unicode="acme-corp.test",
        needs_smtputf8=False,
    )


@pytest.mark.parametrize("raw", ["anna.schmidt@bücher.test", "anna.schmidt@xn--bcher-kva.test"])
def test_idn_domain_in_a_labels_for_dns_and_unicode_for_people(raw: str) -> None:
    address = parse_address(raw)
    assert address is not None
    assert address.domain == "xn--bcher-kva.test"
    assert address.domain_unicode == "bücher.test"
    assert address.email == "anna.schmidt@bücher.test"
    assert address.smtp_address == "anna.schmidt@xn--bcher-kva.test"
    assert not address.needs_smtputf8


def test_domain_is_lower_cased_local_part_kept() -> None:
    address = parse_address("Anna.Schmidt@BÜCHER.Test")
    assert address is not None
    assert (address.local_part, address.domain, address.email) == (
        "Anna.Schmidt",
        "xn--bcher-kva.test",
        "Anna.Schmidt@bücher.test",
    )


def test_utf8_local_part_needs_smtputf8() -> None:
    address = parse_address("josé@lucerne-publishing.test")
    assert address is not None
    assert address.needs_smtputf8
    assert address.local_part == "josé"
    assert address.smtp_address == "josé@lucerne-publishing.test"


def test_utf8_local_part_is_nfc_normalised() -> None:
    address = parse_address("jose\u0301@lucerne-publishing.test")  # e + combining acute
    assert address is not None
    assert address.local_part == "jos\u00e9"


@pytest.mark.parametrize(
    ("raw", "local_part"),
    [
        ('"john doe"@example.com', '"john doe"'),
        ('"a@b"@example.com', '"a@b"'),
        ('"john"@example.com', "john"),  # needless quotes are dropped
    ],
)
def test_quoted_local_parts(raw: str, local_part: str) -> None:
    address = parse_address(raw)
    assert address is not None
    assert address.local_part == local_part
    assert address.smtp_address == f"{local_part}@example.com"
    assert not address.needs_smtputf8


@pytest.mark.parametrize(
    "raw",
    [
        "  alice@acme-corp.test  ",
        "\talice@acme-corp.test\r\n",
        "\u00a0alice@acme-corp.test\u00a0",
        " " * 2000 + "alice@acme-corp.test",  # the limit applies after trimming
    ],
)
def test_surrounding_whitespace_is_ignored(raw: str) -> None:
    address = parse_address(raw)
    assert address is not None
    assert address.email == "alice@acme-corp.test"


@pytest.mark.parametrize(
    "raw",
    [None, 42, 3.5, True, b"alice@acme-corp.test", ["alice@acme-corp.test"], object()],
    ids=["none", "int", "float", "bool", "bytes", "list", "object"],
)
def test_non_strings_are_not_addresses(raw: object) -> None:
    assert parse_address(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        "a" * 1100 + "@example.com",
        "alice@" + "b" * 1100 + ".com",
        "alice@acme-corp.test" + " x" * 600,
    ],
    ids=["long-local", "long-domain", "long-junk"],
)
def test_inputs_over_1024_characters_are_refused(raw: str) -> None:
    assert len(raw.strip()) > 1024
    assert parse_address(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        "root@localhost",
        "x@foo.localhost",
        "x@foo.invalid",
        "x@foo.local",
        "x@foo.onion",
        "user@[127.0.0.1]",
        "user@[IPv6:2001:db8::1]",
        "user@127.0.0.1",
    ],
)
def test_special_use_names_and_ip_literals_are_invalid(raw: str) -> None:
    assert parse_address(raw) is None


@pytest.mark.parametrize("raw", ["someone@example.test", "alice@acme-corp.test", "a@b.c.test"])
def test_dot_test_domains_are_accepted(raw: str) -> None:
    address = parse_address(raw)
    assert address is not None
    assert address.domain.endswith(".test")


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "plainaddress",
        "a@b",
        "a@@b.com",
        "@example.com",
        "alice@",
        ".alice@example.com",
        "alice.@example.com",
        "al..ice@example.com",
        "alice@-example.com",
        "alice@example..com",
        "al ice@example.com",
        "Jane Doe <jane@example.com>",
        "mailto:jane@example.com",
    ],
)
def test_malformed_addresses_are_invalid(raw: str) -> None:
    assert parse_address(raw) is None


# -- lists ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        ("mailinator.com", True),
        ("MAILINATOR.COM", True),
        ("eu.mailinator.com", True),  # a subdomain of a listed domain
        ("xmailinator.com", False),  # ends like a listed name, but is not a subdomain of one
        ("gmail.com", False),
        ("acme-corp.test", False),
        ("com", False),
    ],
)
def test_is_disposable(domain: str, expected: bool) -> None:
    assert is_disposable(domain) is expected


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        ("gmail.com", True),
        ("GMail.com", True),
        ("yahoo.com", True),
        ("outlook.com", True),
        ("mailinator.com", False),  # disposable, so not a free provider
        ("acme-corp.test", False),
    ],
)
def test_is_free(domain: str, expected: bool) -> None:
    assert is_free(domain) is expected


@pytest.mark.parametrize(
    ("local_part", "expected"),
    [
        ("info", True),
        ("INFO", True),
        ("No-Reply", True),
        ("noreply", True),
        ("sales+eu", True),
        ("postmaster", True),
        ("admin", True),
        ("support", True),
        ("abuse", True),
        ("webmaster", True),
        ("john", False),
        ("john+info", False),
        ("info.john", False),
        ("kevin.lee", False),
    ],
)
def test_is_role(local_part: str, expected: bool) -> None:
    assert is_role(local_part) is expected

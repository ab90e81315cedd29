"""Engine settings: keyword arguments, ``LISTHYGIENE_*`` environment variables, validation."""

import ipaddress
import os
import socket

import pytest
from pydantic import ValidationError

from listhygiene.engine import EngineSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``LISTHYGIENE_*`` variable of the caller's shell (a running sandbox, say) leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("LISTHYGIENE_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = EngineSettings()
    assert settings.dns_server is None
    assert settings.nameserver is None  # the system's resolvers
    assert settings.smtp_port == 25
    assert settings.allow_private_mx is False
    assert settings.check_smtp is True
    assert settings.dnsbl_zones == ()
    assert settings.retry_delays == (1.0, 4.0, 15.0)  # short: long waits are the second pass
    assert settings.retry_max_wait == 60.0
    assert settings.mx_head_start == 2.0


def test_default_helo_is_the_machines_own_name() -> None:
    settings = EngineSettings()
    assert settings.helo == socket.getfqdn()
    assert settings.mail_from == f"verify@{settings.helo}"


def test_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTHYGIENE_DNS_SERVER", "127.0.0.1:5300")
    monkeypatch.setenv("LISTHYGIENE_SMTP_PORT", "2525")
    monkeypatch.setenv("LISTHYGIENE_ALLOW_PRIVATE_MX", "1")
    monkeypatch.setenv("LISTHYGIENE_RETRY_DELAYS", "1,2.5")
    monkeypatch.setenv("LISTHYGIENE_DNSBL_ZONES", "a.test,b.test")
    monkeypatch.setenv("LISTHYGIENE_HELO", "verifier.example.org")
    monkeypatch.setenv("LISTHYGIENE_SMTP_TIMEOUT", "7.5")
    monkeypatch.setenv("LISTHYGIENE_CONCURRENCY", "8")
    monkeypatch.setenv("LISTHYGIENE_CHECK_SMTP", "false")
    settings = EngineSettings()
    assert settings.dns_server == "127.0.0.1:5300"
    assert settings.nameserver == ("127.0.0.1", 5300)
    assert settings.smtp_port == 2525
    assert settings.allow_private_mx is True
    assert settings.retry_delays == (1.0, 2.5)
    assert settings.dnsbl_zones == ("a.test", "b.test")
    assert settings.helo == "verifier.example.org"
    assert settings.mail_from == "verify@verifier.example.org"
    assert settings.smtp_timeout == 7.5
    assert settings.concurrency == 8
    assert settings.check_smtp is False


def test_lists_from_environment_tolerate_spaces_and_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTHYGIENE_RETRY_DELAYS", "")
    monkeypatch.setenv("LISTHYGIENE_DNSBL_ZONES", " a.test , ,b.test ")
    settings = EngineSettings()
    assert settings.retry_delays == ()  # no retries
    assert settings.dnsbl_zones == ("a.test", "b.test")


def test_keyword_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTHYGIENE_SMTP_PORT", "2525")
    assert EngineSettings(smtp_port=2626).smtp_port == 2626


def test_explicit_mail_from_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTHYGIENE_MAIL_FROM", "probe@lists.example.org")
    settings = EngineSettings(helo="mx.example.org")
    assert settings.mail_from == "probe@lists.example.org"
    assert EngineSettings(helo="mx.example.org").mail_from == "probe@lists.example.org"
    assert EngineSettings(helo="h.example.org", mail_from="me@x.test").mail_from == "me@x.test"


def test_default_mail_from_follows_helo() -> None:
    assert EngineSettings(helo="verifier.test").mail_from == "verify@verifier.test"


@pytest.mark.parametrize(
    ("dns_server", "nameserver"),
    [
        ("127.0.0.1:5300", ("127.0.0.1", 5300)),
        ("10.0.0.1", ("10.0.0.1", 53)),
        ("[::1]:5353", ("::1", 5353)),
        ("[::1]", ("::1", 53)),
        ("::1", ("::1", 53)),
        ("2001:db8::53", ("2001:db8::53", 53)),
        ("[2001:db8::53]:5300", ("2001:db8::53", 5300)),
        ("2606:4700:4700::1111", ("2606:4700:4700::1111", 53)),
    ],
)
def test_nameserver(dns_server: str, nameserver: tuple[str, int]) -> None:
    assert EngineSettings(dns_server=dns_server).nameserver == nameserver


@pytest.mark.parametrize("dns_server", ["2001:4860:4860:0:0:0:0:8888", "fe80:0:0:0:0:0:0:1"])
def test_nameserver_bare_ipv6_is_a_host(dns_server: str) -> None:
    expected = str(ipaddress.ip_address(dns_server))  # normalised: 2001:4860:4860::8888
    assert EngineSettings(dns_server=dns_server).nameserver == (expected, 53)


def test_nameserver_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LISTHYGIENE_DNS_SERVER", "[::1]:5353")
    assert EngineSettings().nameserver == ("::1", 5353)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("smtp_port", 0),
        ("smtp_port", 65536),
        ("smtp_port", "smtp"),
        ("concurrency", 0),
        ("host_concurrency", 0),
        ("smtp_timeout", 0),
        ("dns_timeout", -1),
        ("host_rate", 0),
        ("rcpt_per_session", 0),
        ("retry_delays", "1,-2"),
        ("retry_delays", "soon"),
        ("allow_private_mx", "maybe"),
        ("max_pending", 0),
    ],
)
def test_invalid_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        EngineSettings(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LISTHYGIENE_SMTP_PORT", "twenty-five"),
        ("LISTHYGIENE_SMTP_PORT", "70000"),
        ("LISTHYGIENE_ALLOW_PRIVATE_MX", "perhaps"),
        ("LISTHYGIENE_RETRY_DELAYS", "1,-2"),
        ("LISTHYGIENE_RETRY_DELAYS", "1,x"),
        ("LISTHYGIENE_SMTP_TIMEOUT", "0"),
        ("LISTHYGIENE_CONCURRENCY", "-3"),
    ],
)
def test_invalid_environment_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        EngineSettings()


@pytest.mark.parametrize("dns_server", ["127.0.0.1:99999", "127.0.0.1:dns"])
def test_invalid_dns_server_is_refused(dns_server: str) -> None:
    with pytest.raises(ValidationError):
        EngineSettings(dns_server=dns_server)


def test_settings_are_frozen() -> None:
    settings = EngineSettings()
    with pytest.raises(ValidationError):
        settings.smtp_port = 2525  # type: ignore[misc]

"""What the sandbox says about the verifying machine itself (issue 29, item 2): a reverse zone of
PTR records, a switch that makes its resolver lie about NXDOMAIN, and mail hosts whose EHLO reply
names the client's address as Gmail's does; ``listhygiene doctor`` is tested against them."""

import smtplib
from collections.abc import Callable

import dns.rcode
import dns.resolver
import dns.reversename
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.sandbox.world import World, WorldError

WORLD = {
    "domains": {"acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}]}},
    "hosts": {"mx.acme.test": {"ehlo_names_client": True}, "plain.acme.test": {}},
    "ptr": {"127.0.0.1": "Verifier.TEST.", "192.0.2.10": "mail.example.test"},
}

MakeSandbox = Callable[..., Sandbox]


def test_the_reverse_zone_answers_ptr_records(make_mail_sandbox: MakeSandbox) -> None:
    resolver = make_mail_sandbox(WORLD).resolver()
    answer = resolver.resolve(dns.reversename.from_address("127.0.0.1"), "PTR")
    assert [r.target.to_text() for r in answer] == ["verifier.test."]
    assert answer.rrset is not None
    assert answer.rrset.name.to_text() == "1.0.0.127.in-addr.arpa."
    other = resolver.resolve(dns.reversename.from_address("192.0.2.10"), "PTR")
    assert [r.target.to_text() for r in other] == ["mail.example.test."]
    with pytest.raises(dns.resolver.NXDOMAIN) as missing:
        resolver.resolve(dns.reversename.from_address("127.0.0.2"), "PTR")
    # the denial carries the reverse zone's SOA, so that it can be cached (RFC 2308)
    response = missing.value.responses()[missing.value.qnames()[0]]
    assert [r.name.to_text() for r in response.authority] == ["in-addr.arpa."]


def test_a_lying_resolver_answers_names_that_do_not_exist(make_mail_sandbox: MakeSandbox) -> None:
    resolver = make_mail_sandbox(WORLD | {"nxdomain_answer": "127.0.0.53"}).resolver()
    assert [r.address for r in resolver.resolve("no-such-name.com", "A")] == ["127.0.0.53"]
    answer = resolver.resolve("no-such-name.com", "MX", raise_on_no_answer=False)
    assert answer.rrset is None
    assert answer.response.rcode() == dns.rcode.NOERROR
    # names that exist are answered as before
    assert [r.exchange.to_text() for r in resolver.resolve("acme.test", "MX")] == ["mx.acme.test."]
    truthful = make_mail_sandbox(WORLD).resolver()
    with pytest.raises(dns.resolver.NXDOMAIN):
        truthful.resolve("no-such-name.com", "A")


def test_an_ehlo_reply_can_name_the_client(make_mail_sandbox: MakeSandbox) -> None:
    sandbox = make_mail_sandbox(WORLD)
    with smtplib.SMTP(sandbox.address_of("mx.acme.test"), sandbox.smtp_port, timeout=5) as smtp:
        code, text = smtp.ehlo("verifier.test")
    assert code == 250
    assert text.decode().splitlines()[0] == "mx.acme.test at your service, [127.0.0.1]"
    with smtplib.SMTP(sandbox.address_of("plain.acme.test"), sandbox.smtp_port, timeout=5) as smtp:
        _, plain = smtp.ehlo("verifier.test")
    assert plain.decode().splitlines()[0] == "plain.acme.test"


@pytest.mark.parametrize(
    ("change", "where", "what"),
    [
        ({"ptr": {"mx.acme.test": "a.test"}}, "ptr", "'mx.acme.test' is not an IPv4 address"),
        ({"ptr": {"127.0.0.1": ""}}, "ptr", "must be a non-empty host name"),
        ({"nxdomain_answer": "somewhere"}, "nxdomain_answer", "'somewhere' is not an IPv4"),
    ],
)
def test_bad_machine_records_are_named(change: dict[str, object], where: str, what: str) -> None:
    with pytest.raises(WorldError) as caught:
        World.from_dict(WORLD | change)
    [(path, message)] = caught.value.problems
    assert path == where
    assert what in message

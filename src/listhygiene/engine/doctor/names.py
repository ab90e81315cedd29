"""The DNS checks: a resolver that answers NXDOMAIN truthfully, and what DNS says of this
machine's address (its PTR, forward-confirmed; the HELO name resolving to it; the DNSBLs), with
how that address is found."""

import asyncio
import contextlib
import ipaddress
import secrets
import socket
import string
from urllib.parse import urlsplit

import dns.asyncresolver
import dns.exception
import dns.resolver
import dns.reversename

from listhygiene.engine.doctor.port25 import MailHosts, ip_text, proxy_of
from listhygiene.engine.doctor.report import ADDRESS_FROM, Check, Status
from listhygiene.engine.reputation import Reputation
from listhygiene.engine.settings import EngineSettings
from listhygiene.results import DomainReputation

__all__ = ["address_checks", "first_address", "resolver_check"]

# -- the resolver --------------------------------------------------------------------------------


def _random_name() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "lh-" + "".join(secrets.choice(alphabet) for _ in range(20)) + ".com"


def _nameservers(resolver: dns.asyncresolver.Resolver, settings: EngineSettings) -> str:
    if settings.dns_server:
        return settings.dns_server
    return ", ".join(str(s) for s in resolver.nameservers) or "none configured"


async def resolver_check(resolver: dns.asyncresolver.Resolver, settings: EngineSettings) -> Check:
    """A name that cannot exist must be NXDOMAIN: a resolver that answers it (ISPs that send
    typos to a search page do) makes every domain that does not exist look real."""
    name = _random_name()
    where = _nameservers(resolver, settings)
    try:
        answer = await resolver.resolve(name, "A", raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return Check(
            "resolver", Status.OK, f"{where} answers NXDOMAIN for a name that does not exist"
        )
    except dns.exception.DNSException as exc:
        return Check(
            "resolver",
            Status.FAIL,
            f"{where} did not answer ({type(exc).__name__}): every DNS verdict would be unknown",
            "point --dns-server (or /etc/resolv.conf) at a resolver that answers",
        )
    found = ", ".join(r.to_text() for r in answer.rrset) if answer.rrset else "no data"
    return Check(
        "resolver",
        Status.FAIL,
        f"{where} answered {name}, which does not exist, with {found} instead of NXDOMAIN: "
        "domains that do not exist would not be found invalid",
        "use a resolver that does not rewrite NXDOMAIN (a local unbound, or --dns-server 1.1.1.1)",
    )


# -- this machine's address ----------------------------------------------------------------------


def _route_address(toward: str) -> str | None:
    """The local address the kernel would send from to ``toward`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in toward else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((toward, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return None


async def _proxy_host_address(url: str) -> str | None:
    host = urlsplit(url).hostname or ""
    if ip_text(host):
        return ip_text(host)
    with contextlib.suppress(OSError):
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return str(infos[0][4][0]) if infos else None
    return None


async def first_address(hosts: MailHosts, settings: EngineSettings) -> tuple[str | None, str]:
    """This machine's address before any mail host has named it: the SOCKS proxy's when the
    sessions go through one, else the local address of the route to the first mail host (to
    the nameserver when there is none)."""
    if hosts.targets:
        host, ip, domain = hosts.targets[0]
        proxy = proxy_of(host, domain, settings)
        if proxy is not None:
            return await _proxy_host_address(proxy), "proxy"
        return _route_address(ip), "route"
    proxy = settings.proxy_for(None)
    if proxy is not None:
        return await _proxy_host_address(proxy), "proxy"
    return _route_address((settings.nameserver or ("192.0.2.1",))[0]), "route"


async def _forward(resolver: dns.asyncresolver.Resolver, name: str, version: int) -> list[str]:
    """The addresses ``name`` resolves to, of the family of ``version`` (empty: none)."""
    try:
        answer = await resolver.resolve(name, "A" if version == 4 else "AAAA")
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    return [str(ipaddress.ip_address(r.address)) for r in answer]


async def _ptr_names(resolver: dns.asyncresolver.Resolver, address: str) -> list[str]:
    try:
        answer = await resolver.resolve(dns.reversename.from_address(address), "PTR")
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    return [r.target.to_text(omit_final_dot=True).lower() for r in answer]


async def _looked_up(
    resolver: dns.asyncresolver.Resolver, address: str, settings: EngineSettings
) -> list[Check]:
    version = ipaddress.ip_address(address).version
    helo = settings.helo.lower().rstrip(".")
    names, helo_addresses, listing = await asyncio.gather(
        _ptr_names(resolver, address),
        _forward(resolver, helo, version),
        Reputation(resolver, settings.dnsbl_zones).of(address),
        return_exceptions=True,
    )
    confirmed: list[str] = []
    if isinstance(names, list):
        resolved = await asyncio.gather(
            *(_forward(resolver, n, version) for n in names), return_exceptions=True
        )
        confirmed = [n for n, a in zip(names, resolved, strict=True) if _holds(a, address)]
    return [
        _reverse_check(address, names, confirmed, helo),
        _helo_check(address, helo, helo_addresses, confirmed),
        _dnsbl_check(address, settings.dnsbl_zones, listing),
    ]


def _unasked(name: str, what: str, failure: BaseException) -> Check:
    """A check whose DNS question got no answer: a warning, the resolver check says why."""
    return Check(
        name,
        Status.WARN,
        f"{what} could not be asked ({type(failure).__name__})",
        "see the resolver check",
    )


def _holds(addresses: list[str] | BaseException, address: str) -> bool:
    return not isinstance(addresses, BaseException) and address in addresses


def _reverse_check(
    address: str, names: list[str] | BaseException, confirmed: list[str], helo: str
) -> Check:
    if isinstance(names, BaseException):
        return _unasked("reverse_dns", f"the PTR of {address}", names)
    set_ptr = (
        f"ask whoever owns {address} (your hosting provider or ISP) to set its PTR to a name "
        f"that resolves back to it, ideally the HELO name {helo}"
    )
    if not names:
        return Check(
            "reverse_dns",
            Status.FAIL,
            f"{address} has no PTR record: many mail hosts refuse or slow down such clients",
            set_ptr,
        )
    if not confirmed:
        return Check(
            "reverse_dns",
            Status.FAIL,
            f"{address} has PTR {', '.join(names)}, which does not resolve back to {address}",
            f"point {names[0]}'s A record at {address}, or {set_ptr.removeprefix('ask ')}",
        )
    return Check(
        "reverse_dns", Status.OK, f"{address} has PTR {confirmed[0]}, which resolves back to it"
    )


def _helo_check(
    address: str, helo: str, found: list[str] | BaseException, confirmed: list[str]
) -> Check:
    if isinstance(found, BaseException):
        return _unasked("helo", f"the address of {helo}", found)
    if address in found:
        return Check("helo", Status.OK, f"{helo} resolves to {address}")
    suggestion = next((n for n in confirmed if n != helo), None)
    advice = f"pick a HELO name that resolves to {address}: --helo NAME (LISTHYGIENE_HELO)" + (
        f", e.g. {suggestion}, its PTR name" if suggestion else ""
    )
    what = f"resolves to {', '.join(found)}, not to {address}" if found else "does not resolve"
    return Check("helo", Status.FAIL, f"the HELO name {helo} {what}", advice)


def _dnsbl_check(
    address: str, zones: tuple[str, ...], listing: DomainReputation | BaseException
) -> Check:
    if not zones:
        return Check(
            "dnsbl",
            Status.WARN,
            f"no DNSBL configured: {address} was not looked up",
            "name the blocklists mail hosts use: LISTHYGIENE_DNSBL_ZONES=zen.spamhaus.org,"
            "bl.spamcop.net (or --dnsbl ZONE,ZONE)",
        )
    if isinstance(listing, BaseException) or not listing.checked:
        return Check(
            "dnsbl",
            Status.WARN,
            f"none of {', '.join(zones)} answered for {address}",
            "see the resolver check (some DNSBLs refuse queries from public resolvers)",
        )
    if listing.blacklists:
        return Check(
            "dnsbl",
            Status.FAIL,
            f"{address} is listed on {', '.join(listing.blacklists)}: mail hosts that use it "
            "refuse this machine",
            f"find why on {listing.blacklists[0]}'s lookup page, fix it, then ask for delisting "
            "(or verify from another address)",
        )
    return Check("dnsbl", Status.OK, f"{address} is on none of {', '.join(zones)}")


def _unchecked(why: str) -> list[Check]:
    """The address checks when there is no address to check: each says why."""
    advice = "state this machine's public address: doctor --address IP"
    return [Check(name, Status.WARN, why, advice) for name in ("reverse_dns", "helo", "dnsbl")]


async def address_checks(
    resolver: dns.asyncresolver.Resolver, address: str | None, source: str, settings: EngineSettings
) -> list[Check]:
    """The reverse DNS, HELO and DNSBL checks of ``address`` (found from ``source``): warnings
    saying why when there is none, or it is not public (but under ``allow_private_mx``)."""
    if address is None:
        return _unchecked("this machine's address could not be found: not checked")
    if not settings.allow_private_mx and not ipaddress.ip_address(address).is_global:
        return _unchecked(
            f"{address} ({ADDRESS_FROM[source]}) is not a public address: mail hosts see the "
            "address of the NAT in front of this machine; not checked"
        )
    return await _looked_up(resolver, address, settings)

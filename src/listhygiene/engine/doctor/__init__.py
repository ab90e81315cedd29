"""``listhygiene doctor``: can this machine verify at all? (PRODUCT.md, "Host self-audit")

On a new machine every verdict comes back ``unknown`` for one of four reasons, none of them the
addresses': outbound port 25 is blocked, the machine's address has no reverse DNS (or its HELO
name does not resolve back to it) so mail hosts refuse it, the address is on a blocklist, or the
resolver hides NXDOMAIN (then nothing is ever ``no_mail_server`` either). Each check here says
what it found in one line and what to do about it; docs/engine.md, "Doctor: auditing this
machine", gives the decisions (which mail hosts, how the address is found).

Everything runs with short time limits and side by side, so the whole takes a few seconds even
when port 25 is silently dropped:

* the MX hosts of a few big providers' domains (:data:`DEFAULT_DOMAINS`), found through the
  configured resolver, are asked for a greeting on ``smtp_port``, through the SOCKS proxy when
  one is configured; the first greeting ends the check;
* a random name that cannot exist is asked of the resolver, which must say NXDOMAIN;
* this machine's address (given, or the one a mail host names in its EHLO reply, or the SOCKS
  proxy's, or the local address of the route to the mail hosts) is looked up in the reverse
  zone and the configured DNSBLs, and the HELO name must resolve to it.
"""

import asyncio
import time
from collections.abc import Iterable

from listhygiene.engine.doctor.names import address_checks, first_address, resolver_check
from listhygiene.engine.doctor.port25 import mail_hosts, port_25_check
from listhygiene.engine.doctor.report import Check, DoctorReport, Status
from listhygiene.engine.resolver import Resolver
from listhygiene.engine.settings import EngineSettings

__all__ = ["DEFAULT_DOMAINS", "Check", "DoctorReport", "Status", "doctor"]

#: Whose mail hosts port 25 is tried on: big providers that always listen (Gmail, Microsoft,
#: Yahoo). Resolved through the configured resolver, so under the sandbox they are its hosts.
DEFAULT_DOMAINS = ("gmail.com", "outlook.com", "yahoo.com")
#: The most a DNS lookup of the doctor may take, retries included.
DNS_SECONDS = 2.0


async def doctor(
    settings: EngineSettings,
    *,
    address: str | None = None,
    domains: Iterable[str] = DEFAULT_DOMAINS,
) -> DoctorReport:
    """Check what makes every verdict ``unknown`` on this machine (docs/engine.md, "Doctor").

    ``address``: this machine's public address, when known (else found as the module says);
    ``domains``: whose mail hosts port 25 is tried on.
    """
    started = time.perf_counter()
    domains = tuple(d.strip().lower().rstrip(".") for d in domains if d.strip())
    settings = settings.model_copy(update={"dns_timeout": min(settings.dns_timeout, DNS_SECONDS)})
    resolver = Resolver(settings)
    dns_resolver = resolver.dns_resolver

    honest = asyncio.create_task(resolver_check(dns_resolver, settings))
    hosts = await mail_hosts(resolver, domains)
    port_25 = asyncio.create_task(port_25_check(hosts, domains, settings))
    # The address checks start beside port 25's, with the address known now; a mail host that
    # names another one (its EHLO reply) has them asked again for it.
    source = "option"
    if address is None:
        address, source = await first_address(hosts, settings)
    first = asyncio.create_task(address_checks(dns_resolver, address, source, settings))
    port_check, attempts = await port_25
    seen = next((a.seen_as for a in attempts if a.seen_as), None)
    if source != "option" and seen is not None and seen != address:
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        looked_up = await address_checks(dns_resolver, seen, "ehlo", settings)
    else:
        looked_up = await first
    if source != "option" and seen is not None:
        address, source = seen, "ehlo"
    return DoctorReport(
        (port_check, await honest, *looked_up),
        address,
        source if address is not None else "",
        time.perf_counter() - started,
        port_25_blocked=port_check.status is Status.FAIL and bool(attempts),
    )

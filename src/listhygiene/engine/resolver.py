"""Where a domain's mail goes: MX by preference, null MX, implicit MX, told apart from failures.

dnspython's async resolver does the asking, with one LRU cache per engine that honours TTLs
(negative answers too, by the SOA minimum), so a whole run asks each name once per TTL. A lookup
that fails (SERVFAIL, timeout) is *undeterminable*, never "no mail server": that distinction is
the product.

Queries take slots of a :class:`~listhygiene.engine.fairness.FairSlots` by the caller's lane:
interactive lookups before bulk ones, bulk tenants in turn, a few slots kept for interactive work
(docs/service.md, "Fairness").
"""

import asyncio
import ipaddress
import time
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver

from listhygiene.engine.fairness import FairSlots, Lane, Priority, current_lane
from listhygiene.engine.settings import EngineSettings
from listhygiene.engine.trace import Trace, active
from listhygiene.statuses import DnsOutcome

__all__ = ["MailExchanger", "MailRoute", "MxStatus", "Resolver"]


class MxStatus:
    """Words of ``mx_records``: one per mail exchanger, in preference order."""

    VALID = "valid"  # has an address the engine may connect to
    UNRESOLVED = "unresolved"  # the host name has no address (or does not exist)
    NON_ROUTABLE = "non_routable"  # only private/loopback/reserved addresses, not allowed
    ERROR = "error"  # its address lookup failed (SERVFAIL, timeout)
    NULL = "null"  # RFC 7505 null MX
    IMPLICIT = "implicit"  # no MX: the domain's own A/AAAA (RFC 5321 section 5.1)


@dataclass(frozen=True, slots=True)
class MailExchanger:
    name: str
    preference: int
    addresses: tuple[str, ...]  # usable addresses, IPv4 first


@dataclass(frozen=True, slots=True)
class MailRoute:
    """The outcome of a domain's DNS, and its usable mail exchangers in order."""

    outcome: DnsOutcome
    exchangers: tuple[MailExchanger, ...] = ()
    mx_records: tuple[str, ...] = ()
    #: Seconds this route may be reused (the smallest TTL it rests on).
    ttl: float = 300.0


_FAILURES = (dns.resolver.NoNameservers, dns.exception.Timeout, dns.resolver.NoRootSOA)
#: How long a failed lookup is remembered before it is asked again.
_ERROR_TTL = 30.0
#: DNS queries out at once, per engine.
_MAX_IN_FLIGHT = 64
#: Of those, how many bulk work may hold: the rest answer interactive lookups without a wait,
#: and fewer bulk answers arriving at once leave the event loop to interactive requests sooner
#: (16 in flight: over 500 lookups a second at 30 ms each; docs/service.md, "Fairness").
_BULK_IN_FLIGHT = 16


class Resolver:
    """MX routes for domains, cached for their TTL and shared by every task of a run."""

    def __init__(
        self, settings: EngineSettings, *, resolver: dns.asyncresolver.Resolver | None = None
    ) -> None:
        self.settings = settings
        self._resolver = resolver or self._make_resolver(settings)
        #: domain -> (expiry, its route, the class that asked for it)
        self._routes: dict[str, tuple[float, asyncio.Task[MailRoute], Priority]] = {}
        #: (name, type, class) -> the query in flight: an interactive caller never waits on a
        #: bulk query still queued for a slot (at worst one question is asked twice)
        self._in_flight: dict[
            tuple[str, str, Priority], asyncio.Task[dns.resolver.Answer | None]
        ] = {}
        self._query_slots = FairSlots(_MAX_IN_FLIGHT, bulk_limit=_BULK_IN_FLIGHT)
        self.lookups = 0

    @staticmethod
    def _make_resolver(settings: EngineSettings) -> dns.asyncresolver.Resolver:
        nameserver = settings.nameserver
        resolver = dns.asyncresolver.Resolver(configure=nameserver is None)
        if nameserver is not None:
            resolver.nameservers = [nameserver[0]]
            resolver.port = nameserver[1]
        resolver.lifetime = settings.dns_timeout
        resolver.timeout = min(2.0, settings.dns_timeout)
        resolver.cache = dns.resolver.LRUCache(max_size=200_000)
        return resolver

    @property
    def dns_resolver(self) -> dns.asyncresolver.Resolver:
        """The underlying resolver (for blocklist lookups, which share its cache)."""
        return self._resolver

    def known(self, domain: str) -> MailRoute | None:
        """The route of ``domain`` when a lookup of it has succeeded and is still fresh: what
        :meth:`route` would return at once, without a task (a bulk run asks for the same
        domains job after job; docs/pipeline.md, "Speed")."""
        cached = self._routes.get(domain)
        if cached is None or cached[0] <= time.monotonic():
            return None
        shared = cached[1]
        if not shared.done() or shared.cancelled() or shared.exception() is not None:
            return None
        return shared.result()

    async def route(self, domain: str) -> MailRoute:
        """The mail route of ``domain`` (A-labels); concurrent callers share one lookup
        (but for an interactive caller, a bulk lookup still under way: it asks on its own)."""
        now = time.monotonic()
        priority = current_lane().priority
        cached = self._routes.get(domain)
        if cached is not None and cached[0] > now:
            _, shared, asked_by = cached
            if shared.done() or asked_by is priority or priority is Priority.BULK:
                return await asyncio.shield(shared)
        # The lookup is a task of its own, not the first caller's: a caller that is cancelled
        # (a client gone, a request's time limit) must not cancel it for the others sharing it.
        lookup = asyncio.get_running_loop().create_task(self._lookup(domain))
        self._routes[domain] = (now + _ERROR_TTL, lookup, priority)

        def settle(task: "asyncio.Task[MailRoute]") -> None:
            current = self._routes.get(domain)
            if current is None or current[1] is not task:
                return
            if task.cancelled() or task.exception() is not None:
                self._routes.pop(domain, None)
            else:
                self._routes[domain] = (now + task.result().ttl, task, priority)

        lookup.add_done_callback(settle)
        return await asyncio.shield(lookup)

    async def _query(self, name: str, rdtype: str) -> dns.resolver.Answer | None:
        """An answer, None for no data; NXDOMAIN and failures raise.

        Identical questions in flight share one query (mail hosts serve many domains), and at
        most ``_MAX_IN_FLIGHT`` queries are out at once: a burst of thousands overflows the
        nameserver's receive buffer, and every lost datagram costs a retry time-out. Waiting
        queries get their slots by lane (``fairness.py``), not by arrival.
        """
        lane = current_lane()
        key = (name, rdtype, lane.priority)
        shared = self._in_flight.get(key)
        if shared is not None:
            return await asyncio.shield(shared)
        # A task of its own, as in route(): a cancelled caller leaves it to the others.
        query = asyncio.get_running_loop().create_task(self._ask(name, rdtype, lane))
        self._in_flight[key] = query

        def settle(task: "asyncio.Task[dns.resolver.Answer | None]") -> None:
            if self._in_flight.get(key) is task:
                del self._in_flight[key]
            if not task.cancelled():
                task.exception()  # retrieved: the callers, if any are left, re-raise it

        query.add_done_callback(settle)
        return await asyncio.shield(query)

    async def _ask(self, name: str, rdtype: str, lane: Lane) -> dns.resolver.Answer | None:
        async with self._query_slots.hold(lane):
            self.lookups += 1
            trace = active()
            if trace is not None:  # listhygiene explain (engine/trace.py)
                return await self._ask_traced(trace, name, rdtype)
            answer = await self._resolver.resolve(name, rdtype, raise_on_no_answer=False)
        return answer if answer.rrset is not None else None

    async def _ask_traced(self, trace: Trace, name: str, rdtype: str) -> dns.resolver.Answer | None:
        started = time.perf_counter()
        server = ",".join(str(s) for s in self._resolver.nameservers)
        peer = f"{server}:{self._resolver.port}" if self.settings.dns_server else server
        try:
            answer = await self._resolver.resolve(name, rdtype, raise_on_no_answer=False)
        except dns.exception.DNSException as exc:
            took = (time.perf_counter() - started) * 1000
            trace.add("dns", f"{rdtype} {name}: {type(exc).__name__}", took_ms=took, peer=peer)
            raise
        took = (time.perf_counter() - started) * 1000
        if answer.rrset is None:
            text = f"{rdtype} {name}: no data"
        else:
            records = "; ".join(r.to_text() for r in answer.rrset)
            text = f"{rdtype} {name}: {records} (ttl {answer.rrset.ttl})"
        trace.add("dns", text, took_ms=took, peer=peer)
        return answer if answer.rrset is not None else None

    async def _lookup(self, domain: str) -> MailRoute:
        try:
            answer = await self._query(domain, "MX")
        except dns.resolver.NXDOMAIN:
            return MailRoute(DnsOutcome.NXDOMAIN, ttl=_ERROR_TTL * 10)
        except _FAILURES:
            return MailRoute(DnsOutcome.ERROR, ttl=_ERROR_TTL)
        except dns.exception.DNSException:
            return MailRoute(DnsOutcome.ERROR, ttl=_ERROR_TTL)
        if answer is None or answer.rrset is None:  # _query gives no answer without records
            return await self._implicit(domain)
        ttl = float(answer.rrset.ttl)
        records = sorted(answer, key=lambda r: (r.preference, r.exchange.to_text()))
        real = [r for r in records if r.exchange != dns.name.root]
        if not real:  # "MX 0 ." (RFC 7505): the domain accepts no mail
            return MailRoute(DnsOutcome.NULL_MX, mx_records=(MxStatus.NULL,), ttl=ttl)
        names: list[tuple[str, int]] = []
        for record in real:
            name = record.exchange.to_text(omit_final_dot=True).lower()
            if name not in (n for n, _ in names):
                names.append((name, record.preference))
        resolved = await asyncio.gather(*(self._addresses(name) for name, _ in names))
        exchangers, words = [], []
        for (name, preference), (status, addresses, host_ttl) in zip(names, resolved, strict=True):
            words.append(status)
            ttl = min(ttl, host_ttl)
            if status == MxStatus.VALID:
                exchangers.append(MailExchanger(name, preference, addresses))
        if exchangers:
            return MailRoute(DnsOutcome.MX, tuple(exchangers), tuple(words), ttl)
        if MxStatus.ERROR in words:
            return MailRoute(DnsOutcome.ERROR, (), tuple(words), _ERROR_TTL)
        return MailRoute(DnsOutcome.NO_MAIL_SERVER, (), tuple(words), ttl)

    async def _implicit(self, domain: str) -> MailRoute:
        status, addresses, ttl = await self._addresses(domain)
        if status == MxStatus.ERROR:
            return MailRoute(DnsOutcome.ERROR, ttl=_ERROR_TTL)
        if status == MxStatus.VALID:
            exchanger = MailExchanger(domain, 0, addresses)
            return MailRoute(DnsOutcome.IMPLICIT_MX, (exchanger,), (MxStatus.IMPLICIT,), ttl)
        words = (MxStatus.NON_ROUTABLE,) if status == MxStatus.NON_ROUTABLE else ()
        return MailRoute(DnsOutcome.NO_MAIL_SERVER, (), words, ttl)

    async def _addresses(self, host: str) -> tuple[str, tuple[str, ...], float]:
        """(status, usable addresses, ttl) of a host name.

        IPv4 first: AAAA is asked only when the host has no usable A record, which halves the
        lookups of a run (IPv4 is what a probe would use first anyway).
        """
        results: list[tuple[list[str], float] | BaseException] = []
        for rdtype in ("A", "AAAA"):
            try:
                results.append(await self._records(host, rdtype))
            except Exception as exc:  # a failed lookup: maybe the other type answers
                results.append(exc)
            last = results[-1]
            if not isinstance(last, BaseException) and any(self._usable(a) for a in last[0]):
                break
        found: list[str] = []
        ttl = 3600.0
        failed = False
        for result in results:
            if isinstance(result, BaseException):
                failed = True
                continue
            values, record_ttl = result
            found.extend(values)
            ttl = min(ttl, record_ttl)
        if not found:
            return (MxStatus.ERROR if failed else MxStatus.UNRESOLVED), (), ttl
        usable = tuple(a for a in found if self._usable(a))
        if not usable:
            return MxStatus.NON_ROUTABLE, (), ttl
        return MxStatus.VALID, usable, ttl

    async def _records(self, host: str, rdtype: str) -> tuple[list[str], float]:
        try:
            answer = await self._query(host, rdtype)
        except dns.resolver.NXDOMAIN:
            return [], 300.0
        if answer is None or answer.rrset is None:  # _query gives no answer without records
            return [], 300.0
        return [r.address for r in answer], float(answer.rrset.ttl)

    def _usable(self, address: str) -> bool:
        if self.settings.allow_private_mx:
            return True
        try:
            return ipaddress.ip_address(address).is_global
        except ValueError:
            return False

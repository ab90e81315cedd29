"""The engine: addresses in, :class:`VerificationResult` out, as fast as politeness allows.

``verify_many`` streams: it reads ahead at most ``max_pending`` addresses, groups them by domain
as they come (one task per domain, which takes in late arrivals of its domain while its SMTP
session is open), and yields each result the moment it is final, in completion order. Memory is
flat in the number of addresses; DNS answers, catch-all verdicts and hosts' limits are shared by
the whole run.

Any input yields a result, never an exception: a bug in one domain's task turns that domain's
addresses into ``unknown`` results and is logged.

Several callers can share one engine (a service's keys): each run has a lane, ``priority``
(interactive or bulk) and ``tenant``, by which its DNS and SMTP slots are handed out
(``fairness.py``), and a bulk run reads ahead only ``bulk_pending`` addresses, so a big job never
holds thousands of lookups in front of anyone (docs/service.md, "Fairness").
"""

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, Iterable
from dataclasses import dataclass, field
from typing import Any

from listhygiene.engine.fairness import InteractiveActivity, Lane, Priority, lane_context
from listhygiene.engine.health import RunHealth
from listhygiene.engine.host_memory import FleetMemory
from listhygiene.engine.host_state import HostState, open_host_state
from listhygiene.engine.lists import Lists, lists_for, never_learned
from listhygiene.engine.pacing import Pacer
from listhygiene.engine.probe import DomainProber, MailboxVerdict, ProbeContext
from listhygiene.engine.providers import provider_of
from listhygiene.engine.reputation import Reputation
from listhygiene.engine.resolver import MailRoute, Resolver
from listhygiene.engine.settings import EngineSettings
from listhygiene.engine.suggest import Suggester
from listhygiene.engine.syntax import Address, parse_address
from listhygiene.results import DomainReputation, VerificationResult
from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome, Reason

log = logging.getLogger(__name__)

__all__ = ["Engine"]


#: Listed disposable domains a mail host must receive for before it is learnt as a disposable
#: service's host (docs/engine.md, "Lists").
DISPOSABLE_HOST_DOMAINS = 2


class _End(enum.Enum):
    """The end of a run's output queue: an enum member, so the queue's type can name it."""

    DONE = enum.auto()


#: What a run's output queue carries: each input with its result, then ``_End.DONE``.
_Output = tuple[object, VerificationResult] | _End


@dataclass
class _Item:
    """One address on its way through the run."""

    raw: object  # the input as given: results are paired with it
    address: Address
    started: float


@dataclass(frozen=True, slots=True)
class _Advice:
    """A domain's advice beside the verdict: the domain likely meant, who runs its mail."""

    domain: str | None
    provider: str | None


@dataclass
class _DomainJob:
    """A domain's addresses still to verify; the prober reads ``addresses`` live."""

    domain: str
    addresses: deque[Address] = field(default_factory=deque)
    #: Each distinct address's input items (the same address twice: one probe, two results).
    items: dict[Address, list[_Item]] = field(default_factory=dict)
    active: bool = True

    def add(self, item: _Item) -> None:
        group = self.items.get(item.address)
        if group is None:
            self.items[item.address] = [item]
            self.addresses.append(item.address)
        else:
            group.append(item)


class Engine:
    """Verifies addresses. One engine can serve many calls; caches live as long as it does.

    >>> engine = Engine(EngineSettings(dns_server="127.0.0.1:5300", smtp_port=2525))
    >>> result = await engine.verify("alice@example.com")
    """

    def __init__(self, settings: EngineSettings | None = None, **overrides: Any) -> None:
        if settings is None:
            settings = EngineSettings(**overrides)
        elif overrides:
            settings = settings.model_copy(update=overrides)
        self.settings = settings
        self.health = RunHealth()
        self.lists: Lists = lists_for(settings.lists_dir)
        self.suggester = Suggester(lists=self.lists)
        #: Mail hosts of disposable services learnt from listed disposable domains' MX answers
        #: (this engine's, and any a caller adds from a verdict store): a new throwaway domain
        #: on one of them is disposable too (PRODUCT.md, row 3).
        self.disposable_hosts: set[str] = set()
        #: host -> the listed disposable domains seen on it (learnt once there are enough)
        self._disposable_seen: dict[str, set[str]] = {}
        self._resolver: Resolver | None = None
        self._context: ProbeContext | None = None
        self._reputation: Reputation | None = None
        self._interactive: InteractiveActivity | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The fleet's shared host state (``shared_limits``), opened in the running loop.
        self._host_state: HostState | None = None

    def _ensure_started(self) -> None:
        # Created lazily, inside the running event loop that will use them; a new loop (another
        # asyncio.run) gets fresh ones, since futures and semaphores belong to their loop.
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._resolver = None
        if self._resolver is None:
            self._resolver = Resolver(self.settings)
            self._interactive = InteractiveActivity()
            self._reputation = Reputation(self._resolver.dns_resolver, self.settings.dnsbl_zones)
            # (a host state of an earlier loop is dropped with it: its connection was that loop's)
            shared = self.settings.shared_limits
            self._host_state = open_host_state(shared) if shared else None
            self._context = ProbeContext(
                self.settings,
                Pacer(self.settings, self._host_state),
                on_reach=self.health.record,
                fleet=FleetMemory(self._host_state),
            )

    async def aclose(self) -> None:
        """Close what the engine holds open in the running loop (the shared host state's
        connection); the engine can be used again afterwards."""
        state, self._host_state = self._host_state, None
        if state is not None:
            if self._context is not None:
                await self._context.fleet.settle()  # what it was telling the fleet lands first
            await state.close()
            self._resolver = None  # the next use opens everything again

    @property
    def statistics(self) -> dict[str, Any]:
        """Counters of the engine's work so far (for benchmarks and logs)."""
        ctx = self._context
        return {
            "dns_lookups": self._resolver.lookups if self._resolver else 0,
            "max_concurrent_sessions": ctx.pacer.max_active if ctx else 0,
            "max_sessions_one_provider": ctx.pacer.max_one_provider if ctx else 0,
            "politeness": self.politeness,
            **self.health.as_dict(),
        }

    def learn_disposable_hosts(self, domain: str, route: MailRoute) -> None:
        """Remember the mail hosts of a listed disposable ``domain`` once they receive for
        ``DISPOSABLE_HOST_DOMAINS`` listed domains: one throwaway domain on a shared web host's
        MX proves nothing of the host's other domains, several do. A shared provider's host
        (Google, Cloudflare's routing, ...: ``lists.never_learned``) is never learnt."""
        if self.lists.is_disposable(domain):
            self.add_disposable_host_sightings((mx.name, domain) for mx in route.exchangers)

    def add_disposable_host_sightings(self, pairs: Iterable[tuple[str, str]]) -> None:
        """(mail host, listed disposable domain) pairs seen: by this engine, or by earlier
        runs (a verdict store keeps them)."""
        for host, domain in pairs:
            name = host.lower().rstrip(".")
            if not name or never_learned(name):
                continue
            seen = self._disposable_seen.setdefault(name, set())
            seen.add(domain.lower())
            if len(seen) >= DISPOSABLE_HOST_DOMAINS:
                self.disposable_hosts.add(name)

    @property
    def disposable_host_sightings(self) -> set[tuple[str, str]]:
        """Every (mail host, listed disposable domain) pair this engine knows of."""
        return {(host, d) for host, domains in self._disposable_seen.items() for d in domains}

    def is_disposable(self, domain: str, route: MailRoute | None) -> bool:
        """``domain`` is listed, or its mail hosts are all a disposable service's."""
        if self.lists.is_disposable(domain):
            return True
        if route is None or not route.exchangers:
            return False
        names = [exchanger.name for exchanger in route.exchangers]
        return self.lists.is_disposable_host(names, self.disposable_hosts)

    @property
    def politeness(self) -> dict[str, int]:
        """What this engine's SMTP sessions cost the mail hosts so far (PRODUCT.md, "Fleet"):
        ``sessions``, ``max_sessions_one_host``, ``limits_met`` (replies in which a host said
        we went too far) and ``bans``."""
        if self._context is None:
            return {"sessions": 0, "max_sessions_one_host": 0, "limits_met": 0, "bans": 0}
        return self._context.politeness()

    async def verify(
        self,
        email: str,
        *,
        check_smtp: bool | None = None,
        priority: Priority | str = Priority.INTERACTIVE,
        tenant: str = "",
    ) -> VerificationResult:
        """Verify one address."""
        run = self.verify_each([email], check_smtp=check_smtp, priority=priority, tenant=tenant)
        async with contextlib.aclosing(run):
            async for _, result in run:
                return result
        raise AssertionError("verify_many yielded nothing")  # pragma: no cover

    async def verify_many(
        self,
        emails: Iterable[object] | AsyncIterable[object],
        *,
        check_smtp: bool | None = None,
        priority: Priority | str = Priority.INTERACTIVE,
        tenant: str = "",
    ) -> AsyncGenerator[VerificationResult, None]:
        """Verify many addresses; yields each result as soon as it is final (any order)."""
        async for _, result in self.verify_each(
            emails, check_smtp=check_smtp, priority=priority, tenant=tenant
        ):
            yield result

    async def verify_each(
        self,
        emails: Iterable[object] | AsyncIterable[object],
        *,
        check_smtp: bool | None = None,
        priority: Priority | str = Priority.INTERACTIVE,
        tenant: str = "",
    ) -> AsyncGenerator[tuple[object, VerificationResult], None]:
        """As ``verify_many``, paired with each input as given: results come in completion
        order, and a result's ``email`` is normalised, so callers key results by their input.

        ``priority`` (``"interactive"``, the default, or ``"bulk"``) and ``tenant`` (e.g. an API
        key's id) say whose work this is when several callers share the engine: interactive
        runs get DNS and SMTP slots first, bulk tenants take turns, and a bulk run reads ahead
        at most ``bulk_pending`` addresses."""
        self._ensure_started()
        lane = Lane(Priority(priority), tenant)
        run = _Run(self, self.settings.check_smtp if check_smtp is None else check_smtp, lane)
        async for pair in run.results(emails):
            yield pair

    async def domain_facts(
        self,
        domains: Iterable[str],
        *,
        priority: Priority | str = Priority.INTERACTIVE,
        tenant: str = "",
    ) -> dict[str, tuple[MailRoute, DomainReputation, int]]:
        """For each domain (A-labels): its mail route, its MX's reputation and the lookup's
        milliseconds. Lookups run concurrently and share the engine's caches (and its slots, by
        ``priority`` and ``tenant`` as in ``verify_each``)."""
        self._ensure_started()
        context = lane_context(Lane(Priority(priority), tenant))
        loop = asyncio.get_running_loop()
        assert self._resolver is not None
        assert self._reputation is not None
        resolver, reputation = self._resolver, self._reputation

        def mx_ip(route: MailRoute) -> str:
            return route.exchangers[0].addresses[0] if route.exchangers else ""

        async def one(domain: str) -> tuple[str, tuple[MailRoute, DomainReputation, int]]:
            started = time.perf_counter()
            route = await resolver.route(domain)
            rep = await reputation.of(mx_ip(route))
            return domain, (route, rep, round((time.perf_counter() - started) * 1000))

        # what the caches already hold is answered without a task per domain (0 ms, as a
        # cached lookup measured before); only the rest is looked up
        facts: dict[str, tuple[MailRoute, DomainReputation, int]] = {}
        missing: list[str] = []
        for domain in domains:
            route = resolver.known(domain)
            rep = reputation.known(mx_ip(route)) if route is not None else None
            if route is not None and rep is not None:
                facts[domain] = (route, rep, 0)
            else:
                missing.append(domain)
        tasks = [loop.create_task(one(d), context=context) for d in missing]
        facts.update(await asyncio.gather(*tasks))
        return facts


def _domain_key(raw: object) -> str:
    """What follows the last ``@``, roughly normalised: enough to put a domain's addresses
    together (the real parse comes later)."""
    return str(raw).rpartition("@")[2].strip().lower() if raw is not None else ""


class _Run:
    """One call of ``verify_many``: its reading, its domain tasks and its output queue."""

    def __init__(self, engine: Engine, check_smtp: bool, lane: Lane) -> None:
        self.engine = engine
        self.lane = lane
        assert engine._interactive is not None
        self.interactive = engine._interactive
        self.bulk = lane.priority is Priority.BULK
        self.settings = engine.settings
        self.check_smtp = check_smtp
        assert engine._resolver is not None
        assert engine._context is not None
        self.resolver = engine._resolver
        self.context = engine._context
        assert engine._reputation is not None
        self.reputation = engine._reputation
        self.out: asyncio.Queue[_Output] = asyncio.Queue()
        read_ahead = self.settings.max_pending
        if lane.priority is Priority.BULK:
            read_ahead = min(read_ahead, self.settings.bulk_pending)
        self.room = asyncio.Semaphore(read_ahead)
        # Reading (parsing) addresses is the run's own CPU work: a bulk run hands the event loop
        # back more often, so an interactive request waits for less of it.
        self.yield_every = 4 if lane.priority is Priority.BULK else 32
        self.jobs: dict[str, _DomainJob] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.admitted = 0

    async def results(
        self, emails: Iterable[object] | AsyncIterable[object]
    ) -> AsyncGenerator[tuple[object, VerificationResult], None]:
        if self.lane.priority is Priority.BULK and isinstance(emails, list | tuple):
            # Read in portions, a domain's addresses must arrive together to share its sessions
            # (scattered, each portion would open the domain's sessions again).
            emails = sorted(emails, key=_domain_key)
        # The run's tasks (the reader, and the domain tasks it starts) carry its lane, which the
        # resolver and the pacer read where they take a slot.
        reader = asyncio.get_running_loop().create_task(
            self._read(emails), context=lane_context(self.lane)
        )
        # while an interactive run is in progress, bulk runs start nothing new (fairness.py)
        counted = contextlib.nullcontext() if self.bulk else self.interactive.running()
        with counted:
            try:
                while True:
                    item = await self.out.get()
                    if item is _End.DONE:
                        break
                    self.room.release()
                    yield item
                await reader  # re-raise a failure of the input iterator itself
            finally:
                for task in (reader, *self.tasks):
                    task.cancel()
                await asyncio.gather(reader, *self.tasks, return_exceptions=True)

    # -- reading ---------------------------------------------------------------------------------

    async def _read(self, emails: Iterable[object] | AsyncIterable[object]) -> None:
        try:
            if isinstance(emails, AsyncIterable):
                async for raw in emails:
                    await self._admit(raw)
            else:
                for raw in emails:
                    await self._admit(raw)
            while self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)
        finally:
            self.out.put_nowait(_End.DONE)

    async def _admit(self, raw: object) -> None:
        await self.room.acquire()
        if self.bulk:
            await self.interactive.bulk_turn()
        self.admitted += 1
        if self.admitted % self.yield_every == 0:
            # acquire() does not yield while there is room: let the domain tasks start their DNS
            # lookups while the rest of the input is read, instead of after all of it
            await asyncio.sleep(0)
        started = time.perf_counter()
        address = parse_address(raw)
        if address is None:
            text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
            self._emit(raw, text.strip(), Facts(syntax_valid=False), started=started)
            return
        item = _Item(raw, address, started)
        job = self.jobs.get(address.domain)
        if job is None or not job.active:
            job = self.jobs[address.domain] = _DomainJob(address.domain)
            task = asyncio.ensure_future(self._domain(job))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        job.add(item)

    # -- one domain ------------------------------------------------------------------------------

    async def _domain(self, job: _DomainJob) -> None:
        try:
            await asyncio.sleep(0)  # let the reader add more of this domain first
            if self.bulk:
                await self.interactive.bulk_turn()
            route = await self.resolver.route(job.domain)
            self.engine.learn_disposable_hosts(job.domain, route)
            reputation = await self._reputation_of(route)
            advice = _Advice(
                self.engine.suggester.domain(job.domain),
                provider_of([mx.name for mx in route.exchangers], job.domain),
            )

            def finish(address: Address, verdict: MailboxVerdict | None) -> None:
                for item in job.items.pop(address, ()):
                    self._emit_item(item, route, reputation, verdict, advice)

            if not (self.check_smtp and route.outcome.takes_mail):
                while job.addresses:
                    finish(job.addresses.popleft(), None)
                return
            # The prober takes addresses from the job's deque as it goes, including those that
            # arrive while its session is open.
            await DomainProber(self.context, job.domain, route, finish).run(job.addresses)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("verifying domain %s failed; its addresses are unknown", job.domain)
            facts = Facts(
                syntax_valid=True,
                dns=DnsOutcome.NOT_CHECKED,
                undetermined_reason=Reason.SMTP_UNREACHABLE,
            )
            for group in job.items.values():
                for item in group:
                    self._emit(
                        item.raw,
                        item.address.email,
                        facts,
                        started=item.started,
                        domain=item.address.domain_unicode,
                    )
            job.items.clear()
            job.addresses.clear()
        finally:
            job.active = False
            if self.jobs.get(job.domain) is job:
                del self.jobs[job.domain]

    async def _reputation_of(self, route: MailRoute) -> DomainReputation:
        if not route.exchangers:
            return DomainReputation()
        return await self.reputation.of(route.exchangers[0].addresses[0])

    # -- results ---------------------------------------------------------------------------------

    def _emit_item(
        self,
        item: _Item,
        route: MailRoute,
        reputation: DomainReputation,
        verdict: MailboxVerdict | None,
        advice: "_Advice",
    ) -> None:
        address = item.address
        lists = self.engine.lists
        dns_outcome = route.outcome
        undetermined = Reason.DNS_ERROR if dns_outcome is DnsOutcome.ERROR else None
        smtp_checked = verdict is not None
        mailbox = verdict.mailbox if verdict else MailboxOutcome.NOT_CHECKED
        catchall = verdict.is_catchall if verdict else None
        if verdict is not None:
            undetermined = verdict.reason
            if mailbox is MailboxOutcome.ACCEPTED and catchall is None:
                # accepted, but the domain's catch-all probe was never answered: a catch-all
                # domain is never reported valid, so this stays undetermined
                mailbox, undetermined = MailboxOutcome.UNDETERMINED, Reason.GREYLISTED
        facts = Facts(
            syntax_valid=True,
            dns=dns_outcome,
            smtp_checked=smtp_checked,
            mailbox=mailbox,
            undetermined_reason=undetermined,
            is_disposable=self.engine.is_disposable(address.domain, route),
            is_role=lists.is_role(address.local_part),
            is_free=lists.is_free(address.domain),
            is_catchall=catchall,
        )
        self._emit(
            item.raw,
            address.email,
            facts,
            started=item.started,
            domain=address.domain_unicode,
            mx_records=route.mx_records,
            reputation=reputation,
            suggestion=f"{address.local_part}@{advice.domain}" if advice.domain else None,
            mx_provider=advice.provider,
        )

    def _emit(
        self,
        raw: object,
        email: str,
        facts: Facts,
        *,
        started: float,
        domain: str = "",
        mx_records: Iterable[str] = (),
        reputation: DomainReputation | None = None,
        suggestion: str | None = None,
        mx_provider: str | None = None,
    ) -> None:
        result = VerificationResult.from_facts(
            email,
            facts,
            domain=domain,
            mx_records=mx_records,
            domain_reputation=reputation,
            response_time=round((time.perf_counter() - started) * 1000),
            suggestion=suggestion,
            mx_provider=mx_provider,
        )
        self.out.put_nowait((raw, result))

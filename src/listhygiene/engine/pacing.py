"""Politeness: how many SMTP sessions at once, overall and per mail host, and how often.

Mail hosts remember impatient clients (421, blocklists), so the engine never opens more than
``host_concurrency`` sessions to one address, nor more than ``host_rate`` new ones a second;
``concurrency`` caps the whole run. A session waits for its host's slot before it takes a slot of
the run, so a busy host never holds the run's slots hostage.

Both kinds of slot are :class:`~listhygiene.engine.fairness.FairSlots`: when several callers share
the engine (a service's keys), interactive sessions get a free slot before bulk ones and bulk
tenants take turns; a tenth of the run's slots is kept for interactive work. The per-host limits
hold whatever the lane: fairness only changes who goes next (docs/service.md, "Fairness").

Big providers (Google, Microsoft, Yahoo, ...: ``engine/providers.py``) judge a client by all its
sessions to any of their MX hosts, and answer a client that goes too fast with a rate ban
(Gmail's 421 4.7.28) for the whole provider. So the MX hosts of one provider share one more
budget, taken after the host's slot: each provider's own sessions at once and new sessions a
second (``engine/provider_limits.py``: the shipped defaults under ``provider_concurrency`` and
``provider_rate``, a ``provider_limits`` file over them; docs/engine.md, "Per-provider budgets
and proxies").

A host reached through a SOCKS proxy (``socks_proxy``, one per provider or one for all) sees the
proxy's address: the budgets of such a session, the host's and the provider's, are held per
proxy address (``host:port``), so two proxies of one provider have two budgets. A session without
a proxy keeps the budgets, and the keys in a shared store, it always had.

With ``shared_limits`` (a fleet of processes, docs/deploy.md) a session also takes a slot of the
same budgets in the shared host state, after this process's own: the fleet then holds no more
sessions to a host, or new sessions a second, than one process would. Each process counts the
processes sharing the store (at its first session, then every ten seconds). When the store is
lost, this process says so once and goes on alone with its share of each budget over the
processes last counted (at least one session at once); when it was lost before the first count,
one session at a time to each host and provider, at half their rate.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from listhygiene.engine.fairness import FairSlots, Lane, current_lane
from listhygiene.engine.host_state import HostState, HostStateError, Lease, budgets_for
from listhygiene.engine.proxies import proxy_address
from listhygiene.engine.settings import EngineSettings

log = logging.getLogger(__name__)

#: How often a process counts the processes sharing its store (seconds).
_COUNT_SECONDS = 10.0

__all__ = ["Pacer"]


class _TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.updated: float | None = None
        self._lock = asyncio.Lock()

    async def take(self) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            while True:
                now = loop.time()
                if self.updated is not None:
                    self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


def _share(concurrency: int, rate: float, members: int | None) -> tuple[int, float]:
    """A process's share of a fleet budget when the store is lost: its part of the sessions
    at once (at least one) and of the rate, over the ``members`` last counted; one session at
    half the rate when they were never counted (the store was lost before the first)."""
    if not members:
        return 1, rate / 2
    return max(1, concurrency // members), rate / members


class _Budget:
    """Sessions at once and new sessions a second, of one mail host or one provider."""

    def __init__(self, concurrency: int, rate: float) -> None:
        self.slots = FairSlots(concurrency)
        self.bucket = _TokenBucket(rate, concurrency)
        self.active = 0


class Pacer:
    """Hands out SMTP session slots: per host first, then per provider, then for the run."""

    def __init__(self, settings: EngineSettings, shared: HostState | None = None) -> None:
        self.settings = settings
        #: The fleet's host state (``shared_limits``), None for this process alone.
        self.shared = shared
        self._alone = False  # the shared store was lost: the most careful local budget
        #: Processes sharing the store when last counted (None: not yet joined).
        self._members: int | None = None
        self._counted: float | None = None
        # a tenth of the run's sessions (at least one, when there are two) kept for interactive
        # work, which would otherwise wait for a bulk session to end
        reserve = max(1, settings.concurrency // 10) if settings.concurrency > 1 else 0
        self._run = FairSlots(settings.concurrency, bulk_limit=settings.concurrency - reserve)
        #: Each big provider's (sessions at once, new sessions a second); read once.
        self._provider_limits = settings.provider_budgets()
        # budgets by (host address or provider, proxy address: None without a proxy)
        self._hosts: dict[tuple[str, str | None], _Budget] = {}
        self._providers: dict[tuple[str, str | None], _Budget] = {}
        self.active = 0
        self.max_active = 0
        #: Sessions opened, and the most open at once to one host address / one provider.
        self.sessions = 0
        self.max_one_host = 0
        self.max_one_provider = 0

    def via(self, provider: str | None) -> str | None:
        """The proxy address the sessions to a host of ``provider`` go through (None: a host of
        no big provider), as their budgets are keyed; None without a proxy."""
        url = self.settings.proxy_for(provider)
        return None if url is None else proxy_address(url)

    def _host(self, address: str, via: str | None) -> _Budget:
        return self._budget(self._hosts, (address, via), "host")

    def _provider(self, name: str, via: str | None) -> _Budget:
        return self._budget(self._providers, (name, via), name)

    def _budget(
        self, budgets: dict[tuple[str, str | None], _Budget], key: tuple[str, str | None], kind: str
    ) -> _Budget:
        budget = budgets.get(key)
        if budget is None:
            limits = self._limits()
            budget = budgets[key] = _Budget(*limits.get(kind, limits["provider"]))
        return budget

    def _limits(self) -> dict[str, tuple[int, float]]:
        """``"host"``, ``"provider"`` (a provider of no budget of its own) and each provider's
        name -> (sessions at once, new sessions a second)."""
        settings = self.settings
        limits = {
            "host": (settings.host_concurrency, settings.host_rate),
            "provider": (settings.provider_concurrency, settings.provider_rate),
            **self._provider_limits,
        }
        if self._alone:
            limits = {k: _share(c, rate, self._members) for k, (c, rate) in limits.items()}
        return limits

    async def _shared_slot(
        self, address: str, provider: str | None, via: str | None
    ) -> Lease | None:
        """A slot of the fleet's budgets; None when there is no fleet, or it was lost."""
        if self.shared is None or self._alone:
            return None
        try:
            await self._count_members(self.shared)
            return await self.shared.acquire(budgets_for(address, provider, self._limits(), via))
        except HostStateError as exc:
            self._go_alone(exc)
            return None

    async def _count_members(self, shared: HostState) -> None:
        """Join the fleet at the first session, and count its processes again every
        ``_COUNT_SECONDS``: the share this process would fall back to (:func:`_share`)."""
        now = asyncio.get_running_loop().time()
        if self._counted is not None and now - self._counted < _COUNT_SECONDS:
            return
        self._counted = now
        joined = self._members is not None
        self._members = await (shared.members() if joined else shared.join())

    async def _shared_release(self, lease: Lease) -> None:
        if self.shared is not None and not self._alone:
            with contextlib.suppress(HostStateError):  # the lease expires by itself
                await self.shared.release(lease)

    def _go_alone(self, exc: HostStateError) -> None:
        """The shared store is lost: say so once, and hold the most careful budget alone."""
        if self._alone:
            return  # another session found it lost at the same time
        self._alone = True
        members = self._members
        log.error(
            "%s; going on without the fleet's budget: %s",
            exc,
            f"this process's share of it, one of the {members} processes last counted"
            if members
            else "one session at a time to each mail host and provider, at half their rate",
        )
        limits = self._limits()
        kinds = [*(("host", b) for b in self._hosts.values()), *self._provider_kinds()]
        for kind, budget in kinds:
            concurrency, rate = limits.get(kind, limits["provider"])
            budget.slots.shrink(min(budget.slots.slots, concurrency))
            budget.bucket.rate = min(budget.bucket.rate, rate)

    def _provider_kinds(self) -> list[tuple[str, _Budget]]:
        return [(name, budget) for (name, _), budget in self._providers.items()]

    def fewer_sessions(
        self, address: str, provider: str | None = None, *, slower: bool = False
    ) -> None:
        """The host said too many connections: one session fewer at once to it, or to its
        provider when it has one, than were open when it said so, from now on. ``slower`` (a
        ban) halves both the sessions at once and the new sessions a second. Through a proxy,
        the budget of that proxy's address."""
        via = self.via(provider)
        budget = self._host(address, via) if provider is None else self._provider(provider, via)
        held = min(budget.slots.slots, budget.active)
        budget.slots.shrink(held // 2 if slower else held - 1)
        if slower:
            budget.bucket.rate /= 2

    @contextlib.asynccontextmanager
    async def session(self, address: str, provider: str | None = None) -> AsyncIterator[None]:
        """A slot for one session to ``address``, and to ``provider``'s budget when the host
        belongs to a big provider (None: a host of its own); through the proxy of the host's
        provider, the budgets of that proxy's address."""
        lane = current_lane()
        via = self.via(provider)
        while True:
            stack = contextlib.AsyncExitStack()
            try:
                taken = await self._take(stack, address, provider, via, lane)
            except BaseException:
                await stack.aclose()
                raise
            if taken:
                break
            # the fleet's store was lost while this waited: again, under the careful budget
            await stack.aclose()
        host = self._host(address, via)
        budget = self._provider(provider, via) if provider else None
        self.active += 1
        self.sessions += 1
        self.max_active = max(self.max_active, self.active)
        host.active += 1
        self.max_one_host = max(self.max_one_host, host.active)
        if budget is not None:
            budget.active += 1
            self.max_one_provider = max(self.max_one_provider, budget.active)
        try:
            yield
        finally:
            self.active -= 1
            host.active -= 1
            if budget is not None:
                budget.active -= 1
            await stack.aclose()

    async def _take(
        self,
        stack: contextlib.AsyncExitStack,
        address: str,
        provider: str | None,
        via: str | None,
        lane: Lane,
    ) -> bool:
        """The host's slot, its provider's, the fleet's (``shared_limits``), the run's, in
        ``stack``; False when the fleet's store was found lost meanwhile."""
        host = self._host(address, via)
        await stack.enter_async_context(host.slots.hold(lane))
        await host.bucket.take()
        if provider is not None:
            budget = self._provider(provider, via)
            await stack.enter_async_context(budget.slots.hold(lane))
            await budget.bucket.take()
        alone = self._alone
        lease = await self._shared_slot(address, provider, via)
        if lease is not None:
            stack.push_async_callback(self._shared_release, lease)
        elif self._alone and not alone:
            return False
        await stack.enter_async_context(self._run.hold(lane))
        return True

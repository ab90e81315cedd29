"""What the engine learns of a mail host, and how a fleet shares it (PRODUCT.md, "Fleet").

:class:`HostLimits` is what one host has told us about itself (its recipient cap, its error
limits, how long it holds a refusal): the prober lowers and raises it as replies come
(docs/engine.md, "Hosts that defend themselves"). With ``shared_limits``, :class:`FleetMemory`
keeps those facts and the providers' bans in the fleet's host state
(``engine/host_state.py``): a worker reads what the others learnt before its sessions to a
host, and writes what it learnt after, so the fleet trips a host's limit once, not once a worker.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from listhygiene.engine.host_state import HostState, HostStateError

__all__ = ["FACT_SECONDS", "FleetMemory", "HostLimits"]

log = logging.getLogger(__name__)

#: How long a learnt fact about a host lives in the fleet's store: a run's memory.
FACT_SECONDS = 3600.0
#: How often a worker reads a host's facts again before a session (seconds).
_SYNC_SECONDS = 5.0


@dataclass
class HostLimits:
    """What a mail host has told us about itself during this run."""

    rcpt_cap: int
    #: Refused commands a session may collect before it ends: under the host's error limits.
    error_budget: int
    one_transaction: bool = False
    #: The longest a reply was held on purpose (an error sleep, a tarpit): such a host gets
    #: side sessions, which wait out its held replies side by side.
    error_sleep: float = 0.0
    #: Whether the host has answered a batch of RCPT yet: its first batch is small, so that a
    #: host holding its refusals shows it before a long batch is queued behind them.
    answered: bool = False

    def saw_slow_reply(self, fast_refusals: int | None, held: float, most: float) -> None:
        """A reply came ``held`` seconds late; ``fast_refusals``: for the session's first such
        reply, the refusals its session had been given without delay before it.

        Slow only past some quick refusals is Postfix's soft error limit, which holds every
        reply once a session has made that many: later sessions end one refusal before it. Slow
        from the first refusal is a tarpit (Exchange): fewer errors a session would not help,
        only a longer wait for each reply."""
        self.error_sleep = min(most, max(self.error_sleep, held))
        if fast_refusals:
            self.error_budget = max(1, min(self.error_budget, fast_refusals - 1))

    def saw_error_limit(self, errors: int) -> None:
        """The host ended a session after ``errors`` refusals: stay one below."""
        self.error_budget = max(1, min(self.error_budget, errors - 1))

    def facts(self) -> dict[str, Any]:
        """What a fleet shares of it."""
        return {
            "rcpt_cap": self.rcpt_cap,
            "error_budget": self.error_budget,
            "one_transaction": self.one_transaction,
            "error_sleep": round(self.error_sleep, 3),
            "answered": self.answered,
        }

    def merge(self, facts: Mapping[str, Any]) -> None:
        """Take what another worker learnt: the lower limits, the longer holds."""
        with contextlib.suppress(TypeError, ValueError):
            if "rcpt_cap" in facts:
                self.rcpt_cap = max(1, min(self.rcpt_cap, int(facts["rcpt_cap"])))
            if "error_budget" in facts:
                self.error_budget = max(1, min(self.error_budget, int(facts["error_budget"])))
            self.one_transaction = self.one_transaction or bool(facts.get("one_transaction"))
            self.error_sleep = max(self.error_sleep, float(facts.get("error_sleep", 0.0)))
            self.answered = self.answered or bool(facts.get("answered"))


class FleetMemory:
    """A worker's reads and writes of the fleet's facts about hosts and providers; with no
    shared store it does nothing. A store that fails is left alone for the rest of the run (the
    pacing says so, ``engine/pacing.py``): what was learnt stays this worker's."""

    def __init__(self, shared: HostState | None) -> None:
        self.shared = shared
        self._synced: dict[str, float] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lost = False

    @property
    def on(self) -> bool:
        return self.shared is not None and not self._lost

    async def read_host(
        self, ip: str, limits: HostLimits, provider: str | None, bans: dict[str, float]
    ) -> None:
        """Before a session to ``ip``: what the fleet learnt of it, and its provider's ban."""
        now = asyncio.get_running_loop().time()
        if not self.on or now - self._synced.get(ip, -_SYNC_SECONDS) < _SYNC_SECONDS:
            return
        self._synced[ip] = now
        assert self.shared is not None
        try:
            facts = await self.shared.facts(f"host:{ip}")
            limits.merge(facts)
            self._ban(ip, facts, bans, now)
            if provider is not None:
                self._ban(provider, await self.shared.facts(f"provider:{provider}"), bans, now)
        except HostStateError:
            self._lost = True

    @staticmethod
    def _ban(name: str, facts: Mapping[str, Any], bans: dict[str, float], now: float) -> None:
        """A ban the fleet heard of, as a loop time in ``bans`` (the store keeps wall time)."""
        until = facts.get("banned_until")
        if isinstance(until, int | float) and until > time.time():
            bans[name] = max(bans.get(name, 0.0), now + until - time.time())

    async def write_host(self, ip: str, limits: HostLimits) -> None:
        """After a session to ``ip``: what was learnt of it, if anything changed."""
        if not self.on:
            return
        facts = limits.facts()
        if self._written.get(ip) == facts:
            return
        self._written[ip] = facts
        assert self.shared is not None
        try:
            for name, value in facts.items():
                await self.shared.learn(f"host:{ip}", name, value, FACT_SECONDS)
        except HostStateError:
            self._lost = True

    def write_ban(self, ip: str, provider: str | None, seconds: float) -> None:
        """The provider of ``ip`` (or the host, without one) banned us for ``seconds``: tell the
        fleet, without waiting."""
        if not self.on or seconds <= 0:
            return
        assert self.shared is not None
        shared = self.shared
        key = f"provider:{provider}" if provider else f"host:{ip}"

        async def write() -> None:
            with contextlib.suppress(HostStateError):
                await shared.learn(key, "banned_until", time.time() + seconds, seconds)

        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

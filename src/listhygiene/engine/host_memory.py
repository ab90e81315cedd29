"""What the engine learns of a mail host, and how a fleet shares it (PRODUCT.md, "Fleet").

:class:`HostLimits` is what one host has told us about itself (its recipient cap, its error
limits, how long it holds a refusal): the prober lowers and raises it as replies come
(docs/engine.md, "Hosts that defend themselves"). With ``shared_limits``, :class:`FleetMemory`
keeps those facts and the providers' bans in the fleet's host state
(``engine/host_state.py``): a worker reads what the others learnt before its sessions to a
host, and writes what it learnt after, so the fleet trips a host's limit once, not once a worker.

Two more facts go the same way (PRODUCT.md: "greylisting retry times, a domain's catch-all
answer"):

- **A host's greylisting** (``retry.HostGreylisting``: the shortest wait after which one of its
  refused triplets passed, the longest after which one was still refused), under ``host:<ip>``
  as ``greylist_passed`` and ``greylist_refused``. A worker reads them when it decides when to
  retry (as one process consults its own memory then) and writes them, merged with the store's,
  after a session that changed them: the fleet sends a greylisting host no more early retries
  than one process would. A triplet's own pass is not shared: the host keys it by the client's
  address, sender and recipient, which are each worker's own.
- **A domain's catch-all answer** (``domain:<domain>``: ``catch_all`` true or false, and
  ``catch_all_host``, the host that gave it), read before the domain's catch-all probe, which is
  then not sent. Only an answer is shared: a probe refused for now (greylisted, rate limited), or
  refused for a reason that says nothing of the mailbox (blocked), leaves nothing in the store,
  and the next worker probes for itself. Two workers probing at once both write the same answer.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from listhygiene.engine.host_state import HostState, HostStateError
from listhygiene.engine.retry import HostGreylisting
from listhygiene.engine.trace import active

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
        self._greylisting_written: dict[str, dict[str, Any]] = {}
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
            await self.shared.learn_many(f"host:{ip}", facts, FACT_SECONDS)
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

        self._spawn(write())

    async def read_greylisting(self, ip: str, greylisting: dict[str, HostGreylisting]) -> None:
        """Before deciding when to retry a refusal of ``ip``: what the fleet's triplets showed of
        its greylisting, into ``greylisting`` (host address -> what this worker knows)."""
        if not self.on:
            return
        assert self.shared is not None
        try:
            facts = await self.shared.facts(f"host:{ip}")
        except HostStateError:
            self._lost = True
            return
        if "greylist_passed" in facts or "greylist_refused" in facts:
            greylisting.setdefault(ip, HostGreylisting()).merge(facts)

    async def write_greylisting(self, ip: str, greylisting: HostGreylisting | None) -> None:
        """After a session to ``ip``: what its greylisting showed, if that changed; merged with
        the store's first, so that a worker that had not read it yet does not undo it."""
        if not self.on or greylisting is None:
            return
        facts = greylisting.facts()
        if not facts or self._greylisting_written.get(ip) == facts:
            return
        assert self.shared is not None
        key = f"host:{ip}"
        try:
            greylisting.merge(await self.shared.facts(key))
            facts = greylisting.facts()
            await self.shared.learn_many(key, facts, FACT_SECONDS)
        except HostStateError:
            self._lost = True
            return
        self._greylisting_written[ip] = facts

    async def read_catch_all(self, domain: str) -> bool | None:
        """Before ``domain``'s catch-all probe: the fleet's answer, if a worker got one."""
        if not self.on:
            return None
        assert self.shared is not None
        try:
            facts = await self.shared.facts(f"domain:{domain}")
        except HostStateError:
            self._lost = True
            return None
        answer = facts.get("catch_all")
        if not isinstance(answer, bool):
            return None
        trace = active()
        if trace is not None:
            said = "accepts any local part" if answer else "refuses an unknown local part"
            host = facts.get("catch_all_host")
            trace.add(
                "note",
                f"catch-all: {domain} {said}, as another worker's probe"
                + (f" to {host}" if isinstance(host, str) else "")
                + " found (shared store): no probe sent",
            )
        return answer

    def write_catch_all(self, domain: str, answer: bool | None, ip: str) -> None:
        """``domain``'s catch-all probe got an answer from ``ip``: tell the fleet, without
        waiting (:meth:`settle` waits). ``None`` (no answer) is never shared."""
        if not self.on or answer is None:
            return
        assert self.shared is not None
        shared = self.shared
        key = f"domain:{domain}"

        async def write() -> None:
            try:  # the host first: a reader that finds the answer finds its host
                await shared.learn_many(
                    key, {"catch_all_host": ip, "catch_all": answer}, FACT_SECONDS
                )
            except HostStateError:
                self._lost = True

        self._spawn(write())

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(write)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait for the writes under way (before the store is closed)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

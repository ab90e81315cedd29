"""Politeness: how many SMTP sessions at once, overall and per mail host, and how often.

Mail hosts remember impatient clients (421, blocklists), so the engine never opens more than
``host_concurrency`` sessions to one address, nor more than ``host_rate`` new ones a second;
``concurrency`` caps the whole run. A session waits for its host's slot before it takes a slot of
the run, so a busy host never holds the run's slots hostage.

Both kinds of slot are :class:`~listhygiene.engine.fairness.FairSlots`: when several callers share
the engine (a service's keys), interactive sessions get a free slot before bulk ones and bulk
tenants take turns; a tenth of the run's slots is kept for interactive work. The per-host limits
hold whatever the lane: fairness only changes who goes next (docs/service.md, "Fairness").
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator

from listhygiene.engine.fairness import FairSlots, current_lane
from listhygiene.engine.settings import EngineSettings

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


class _Host:
    def __init__(self, settings: EngineSettings) -> None:
        self.slots = FairSlots(settings.host_concurrency)
        self.bucket = _TokenBucket(settings.host_rate, settings.host_concurrency)


class Pacer:
    """Hands out SMTP session slots: per host first, then for the run."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        # a tenth of the run's sessions (at least one, when there are two) kept for interactive
        # work, which would otherwise wait for a bulk session to end
        reserve = max(1, settings.concurrency // 10) if settings.concurrency > 1 else 0
        self._run = FairSlots(settings.concurrency, bulk_limit=settings.concurrency - reserve)
        self._hosts: dict[str, _Host] = {}
        self.active = 0
        self.max_active = 0

    @contextlib.asynccontextmanager
    async def session(self, address: str) -> AsyncIterator[None]:
        host = self._hosts.get(address)
        if host is None:
            host = self._hosts[address] = _Host(self.settings)
        lane = current_lane()
        async with host.slots.hold(lane):
            await host.bucket.take()
            async with self._run.hold(lane):
                self.active += 1
                self.max_active = max(self.max_active, self.active)
                try:
                    yield
                finally:
                    self.active -= 1

"""Sharing one engine fairly between callers: interactive requests first, bulk tenants in turn.

A service runs every key's work on one engine, so its DNS query slots and SMTP session slots are
shared. With first-come-first-served semaphores, a bulk job that admits thousands of addresses
queues thousands of lookups in front of another key's single verification (seconds instead of
milliseconds). :class:`FairSlots` hands out slots by *lane* instead: waiters of the interactive
class always go before bulk waiters, and within a class the tenants (API keys) take turns, one
slot each, so one tenant's backlog never holds up another's. A share of the slots can be kept for
interactive work (``bulk_limit``), so an interactive request does not even wait for a long bulk
SMTP session to end. See docs/service.md, "Fairness".

The lane of the running code is a context variable, set by ``Engine.verify_each(priority=...,
tenant=...)`` for the run's tasks: the resolver and the pacer read it where they take a slot.
"""

import asyncio
import contextlib
import contextvars
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "FairSlots",
    "InteractiveActivity",
    "Lane",
    "Priority",
    "current_lane",
    "lane_context",
]


class Priority(StrEnum):
    """The class of a piece of work: interactive (a client is waiting) before bulk (a job)."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


@dataclass(frozen=True, slots=True)
class Lane:
    """Who the work is for: its class and its tenant (an API key; ``""`` for a lone caller)."""

    priority: Priority = Priority.INTERACTIVE
    tenant: str = ""


_ALONE = Lane()
_LANE: contextvars.ContextVar[Lane | None] = contextvars.ContextVar(
    "listhygiene_lane", default=None
)


def current_lane() -> Lane:
    """The lane of the running task (interactive, no tenant, unless a run set one)."""
    return _LANE.get() or _ALONE


def lane_context(lane: Lane) -> contextvars.Context:
    """A copy of the current context in which :func:`current_lane` is ``lane`` (for tasks)."""
    context = contextvars.copy_context()
    context.run(_LANE.set, lane)
    return context


class FairSlots:
    """A semaphore of ``slots`` that serves waiters by lane, not by arrival.

    Order of service when a slot frees: the interactive class first, then bulk; within a class,
    the tenants with waiters in turn (round robin), each tenant's own waiters in arrival order.
    Bulk work holds at most ``bulk_limit`` slots at once (default: all of them); the rest are
    kept for interactive work.
    """

    def __init__(self, slots: int, *, bulk_limit: int | None = None) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.bulk_limit = slots if bulk_limit is None else max(1, min(slots, bulk_limit))
        self._free = slots
        self._bulk_held = 0
        self._waiting: dict[Priority, OrderedDict[str, deque[asyncio.Future[None]]]] = {
            Priority.INTERACTIVE: OrderedDict(),
            Priority.BULK: OrderedDict(),
        }

    @property
    def free(self) -> int:
        return self._free

    def waiting(self, priority: Priority | None = None) -> int:
        """How many acquirers wait (of one class, or of both)."""
        classes = [priority] if priority is not None else list(self._waiting)
        return sum(len(q) for c in classes for q in self._waiting[c].values())

    @contextlib.asynccontextmanager
    async def hold(self, lane: Lane | None = None) -> AsyncIterator[None]:
        """Hold a slot for ``lane`` (the current lane by default) while the block runs."""
        lane = current_lane() if lane is None else lane
        await self.acquire(lane)
        try:
            yield
        finally:
            self.release(lane)

    async def acquire(self, lane: Lane) -> None:
        if self._can_take(lane.priority) and not self._ahead_of(lane.priority):
            self._take(lane.priority)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tenants = self._waiting[lane.priority]
        tenants.setdefault(lane.tenant, deque()).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(lane)  # granted as it was cancelled: pass the slot on
            else:
                self._forget(lane, future)
            raise

    def shrink(self, slots: int) -> None:
        """Hold at most ``slots`` (at least one) from now on: a host said it takes fewer
        sessions at once than we thought. Slots held now are given back as they end."""
        slots = max(1, slots)
        if slots < self.slots:
            self._free -= self.slots - slots
            self.slots = slots
            self.bulk_limit = min(self.bulk_limit, slots)

    def release(self, lane: Lane) -> None:
        self._free += 1
        if lane.priority is Priority.BULK:
            self._bulk_held -= 1
        self._grant()

    # -- inside ----------------------------------------------------------------------------------

    def _can_take(self, priority: Priority) -> bool:
        if self._free < 1:
            return False
        return priority is Priority.INTERACTIVE or self._bulk_held < self.bulk_limit

    def _ahead_of(self, priority: Priority) -> bool:
        """Whether someone waits who must be served before a newcomer of ``priority``."""
        if self._waiting[Priority.INTERACTIVE]:
            return True
        return priority is Priority.BULK and bool(self._waiting[Priority.BULK])

    def _take(self, priority: Priority) -> None:
        self._free -= 1
        if priority is Priority.BULK:
            self._bulk_held += 1

    def _grant(self) -> None:
        for priority in (Priority.INTERACTIVE, Priority.BULK):
            tenants = self._waiting[priority]
            while tenants and self._can_take(priority):
                tenant, queue = next(iter(tenants.items()))
                future = queue.popleft()
                if queue:
                    tenants.move_to_end(tenant)  # its next waiter after the other tenants'
                else:
                    del tenants[tenant]
                if future.done():  # cancelled while waiting, not yet forgotten
                    continue
                self._take(priority)
                future.set_result(None)
            if tenants:  # interactive waiters left (no slot free): bulk waits too
                return

    def _forget(self, lane: Lane, future: asyncio.Future[None]) -> None:
        tenants = self._waiting[lane.priority]
        queue = tenants.get(lane.tenant)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(future)
        if not queue:
            del tenants[lane.tenant]


class InteractiveActivity:
    """Interactive runs in progress; bulk work holds back while there are any, for a while.

    Slots decide who goes next at a DNS or SMTP queue, but a bulk job's own CPU work (reading
    addresses, handling answers, building results) shares the event loop with every request, and
    asyncio runs ready tasks in turn. So while a client waits, a bulk run starts nothing new:
    each new piece of bulk work waits until no interactive run is in progress, or ``max_hold``
    seconds. After a hold that ran out, bulk work goes unhindered for ``max_hold`` seconds: under
    a steady stream of requests a job gets at least half the time, and is never stopped.
    """

    def __init__(self, max_hold: float = 0.05) -> None:
        self.max_hold = max_hold
        self.active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open_until = 0.0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Count an interactive run while the block runs."""
        self.active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.active -= 1
            if not self.active:
                self._idle.set()

    async def bulk_turn(self) -> None:
        """Return when no interactive run is in progress (or the hold has run out)."""
        if not self.active:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._open_until:
            return
        try:
            await asyncio.wait_for(self._idle.wait(), self.max_hold)
        except TimeoutError:
            self._open_until = max(self._open_until, loop.time() + self.max_hold)

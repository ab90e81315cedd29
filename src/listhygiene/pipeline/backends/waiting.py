"""The one wait loop: every job of every backend and interface is waited for here.

It polls with a growing interval, or, given a webhook receiver's event store, watches for the
jobs' completion events and still reads each status once they arrive (docs/backends.md, "One
wait loop").
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from listhygiene.vocabulary import JobStatus, is_terminal

if TYPE_CHECKING:
    from listhygiene.clients.events import EventStore

__all__ = ["WaitTimeout", "wait_until_done"]

log = logging.getLogger(__name__)


class _HasStatus(Protocol):
    @property
    def status(self) -> Any: ...


State = TypeVar("State", bound=_HasStatus)


class WaitTimeout(TimeoutError):
    """The deadline of :func:`wait_until_done` passed; ``states`` holds what was last read."""

    def __init__(self, message: str, states: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.states = dict(states)


async def wait_until_done(
    job_ids: Sequence[str],
    status: Callable[[str], Awaitable[State]],
    *,
    events: "EventStore | None" = None,
    event_names: Callable[[str], Iterable[str]] | None = None,
    poll_seconds: float = 2.0,
    max_poll_seconds: float = 30.0,
    event_timeout: float = 300.0,
    deadline: float | None = None,
) -> dict[str, State]:
    """Wait until every job has ended, or one has failed: the one wait loop of the pipeline's
    remote backends, the Airflow trigger and whatever else waits on jobs (docs/backends.md).

    ``status(job_id)`` reads a job's state (anything with a ``status``); jobs are read again
    until each is completed, at intervals from ``poll_seconds`` growing to ``max_poll_seconds``.
    With a webhook event store, a running job whose end event (``event_names(job_id)``) has not
    arrived is waited on there instead, up to ``event_timeout`` seconds before its status is read
    all the same (a lost delivery only delays the wait); once its event is in, it is polled.
    Returns the last state of each job read. ``deadline`` is wall-clock time (epoch seconds),
    since a wait may resume in another process; past it, :class:`WaitTimeout`.
    """
    states: dict[str, State] = {}
    delay = poll_seconds
    while True:
        for job_id in job_ids:
            if job_id in states and is_terminal(str(states[job_id].status)):
                continue
            states[job_id] = await status(job_id)
            if states[job_id].status == JobStatus.FAILED:
                return states
        running = [j for j in job_ids if not is_terminal(str(states[j].status))]
        if not running:
            return states
        left = None if deadline is None else deadline - time.time()
        if left is not None and left <= 0:
            raise WaitTimeout(f"job(s) {', '.join(running)} still running at the deadline", states)
        unheard: list[str] = []
        if events is not None and event_names is not None:
            unheard = [
                j
                for j in running
                if await asyncio.to_thread(events.find, j, tuple(event_names(j))) is None
            ]
        if unheard and events is not None and event_names is not None:
            timeout = event_timeout if left is None else min(event_timeout, left)
            if not await _first_event(events, unheard, event_names, timeout):
                log.info("no webhook event for job(s) %s yet: reading their status", unheard)
        else:
            await asyncio.sleep(delay if left is None else min(delay, left))
            delay = min(max_poll_seconds, delay * 1.5)


async def _first_event(
    events: "EventStore",
    job_ids: Sequence[str],
    event_names: Callable[[str], Iterable[str]],
    timeout: float,  # noqa: ASYNC109 - a bound of this wait, passed on to EventStore.wait
) -> bool:
    """Wait until one of the jobs' end events is in the store; False after ``timeout``."""
    waits = [
        asyncio.ensure_future(events.wait(j, tuple(event_names(j)), timeout=timeout))
        for j in job_ids
    ]
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return any(not w.cancelled() and w.exception() is None for w in done)
    finally:
        for waiting in waits:
            waiting.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

"""The trigger: waits, asynchronously in the triggerer, for remote verification jobs to end.

It polls each job's status through the hook (the async clients), or, given a webhook event store
(``listhygiene receive-webhooks`` fills it), watches the store for the jobs' completion events
and reads a status only when one arrives (or every ``poll_interval`` seconds all the same, so a
lost delivery only delays the run). Polls start 2 s apart and grow to ``poll_interval``. Its
deadline is wall-clock time (epoch seconds): another triggerer process may resume it. It
yields exactly one event:

* ``{"status": "success", "jobs": [...states...]}`` when every job completed;
* ``{"status": "error", "message": ..., "jobs": [...]}`` when one failed, or a check raised;
* ``{"status": "timeout", "message": ..., "jobs": [...]}`` when the deadline passed.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from listhygiene_airflow.hooks.verification import COMPLETED, FAILED, JobState, ListHygieneHook

__all__ = ["VerificationJobTrigger"]


class VerificationJobTrigger(BaseTrigger):
    """Wait for ``jobs`` (``JobRef.as_dict()`` dicts) of the connection ``listhygiene_conn_id``."""

    def __init__(
        self,
        *,
        listhygiene_conn_id: str,
        jobs: Sequence[dict[str, Any]],
        deadline: float,
        poll_interval: float = 30.0,
        events_path: str | None = None,
    ) -> None:
        super().__init__()
        self.listhygiene_conn_id = listhygiene_conn_id
        self.jobs = [dict(job) for job in jobs]
        self.deadline = float(deadline)
        self.poll_interval = float(poll_interval)
        self.events_path = events_path

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "listhygiene_conn_id": self.listhygiene_conn_id,
                "jobs": self.jobs,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "events_path": self.events_path,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = ListHygieneHook(self.listhygiene_conn_id)
        states: dict[str, JobState] = {}
        try:
            await hook.aload_connection()
            store = self._store(hook)
            # a short first wait, then longer ones up to poll_interval (jobs often end quickly)
            delay = min(2.0, self.poll_interval)
            while True:
                for job in self.jobs:
                    if job["job_id"] in states and states[job["job_id"]].is_terminal:
                        continue
                    state = await hook.job_status(job)
                    states[job["job_id"]] = state
                    if state.status == FAILED:
                        yield self._event(
                            "error", f"job {state.job_id} failed ({state.error})", states
                        )
                        return
                if all(s.status == COMPLETED for s in states.values()):
                    yield self._event("success", f"{len(states)} job(s) completed", states)
                    return
                left = self.deadline - time.time()
                if left <= 0:
                    waiting = [j for j, s in states.items() if not s.is_terminal]
                    yield self._event(
                        "timeout",
                        f"job(s) {', '.join(waiting)} still running at the deadline",
                        states,
                    )
                    return
                await self._pause(store, hook, states, min(left, delay))
                delay = min(self.poll_interval, delay * 1.5)
        except Exception as exc:  # one event, always: the operator turns it into a failure
            self.log.exception("checking the jobs failed")
            yield self._event("error", f"{type(exc).__name__}: {exc}", states)

    def _store(self, hook: ListHygieneHook) -> Any:
        path = self.events_path or hook.events_path
        if path is None:
            return None
        from listhygiene.clients import EventStore

        return EventStore(path)

    async def _pause(
        self, store: Any, hook: ListHygieneHook, states: dict[str, JobState], seconds: float
    ) -> None:
        """Sleep, or with an event store, until a running job's end event arrives."""
        if store is None:
            await asyncio.sleep(seconds)
            return
        # A job whose event is already in the store but whose status is not yet terminal (a
        # service that announces before its status catches up) is polled, not waited on again:
        # the store would answer at once, every time.
        running = [
            j
            for j in self.jobs
            if not states[j["job_id"]].is_terminal
            and store.find(j["job_id"], hook.job_events(j)) is None
        ]
        if not running:
            await asyncio.sleep(seconds)
            return
        waits = [
            asyncio.ensure_future(store.wait(j["job_id"], hook.job_events(j), timeout=seconds))
            for j in running
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    def _event(self, status: str, message: str, states: dict[str, JobState]) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "message": message,
                "jobs": [s.as_dict() for s in states.values()],
            }
        )

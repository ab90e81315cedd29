"""The trigger: waits, asynchronously in the triggerer, for remote verification jobs to end.

It polls each job's status through the hook (the async clients), or, given a webhook event store
(``listhygiene receive-webhooks`` fills it), watches the store for the jobs' completion events
and reads a status only when one arrives (or every ``poll_interval`` seconds all the same, so a
lost delivery only delays the run). Polls start 2 s apart and grow to ``poll_interval``. Its
deadline is wall-clock time (epoch seconds): another triggerer process may resume it.

Its first check waits until ``not_before`` (epoch seconds; the operator and the sensor set it
:attr:`VerificationJobTrigger.first_check_after` seconds after deferring): a trigger that fired
at once, before the scheduler had handled the deferred try's exit, made Airflow fail that try.
It yields exactly one event (:func:`outcome` builds the first two, for the operator's own check
too):

* ``{"status": "success", "jobs": [...states...]}`` when every job completed;
* ``{"status": "error", "message": ..., "jobs": [...]}`` when one failed, or a check raised;
* ``{"status": "timeout", "message": ..., "jobs": [...]}`` when the deadline passed.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from listhygiene_airflow.hooks.verification import COMPLETED, FAILED, JobState, ListHygieneHook

__all__ = ["VerificationJobTrigger", "outcome"]


def outcome(states: Sequence[JobState]) -> dict[str, Any] | None:
    """The event that ends the wait for jobs in ``states``, or None while one still runs."""
    jobs = [s.as_dict() for s in states]
    for state in states:
        if state.status == FAILED:
            message = f"job {state.job_id} failed ({state.error})"
            return {"status": "error", "message": message, "jobs": jobs}
    if all(s.status == COMPLETED for s in states):
        return {"status": "success", "message": f"{len(states)} job(s) completed", "jobs": jobs}
    return None


class VerificationJobTrigger(BaseTrigger):
    """Wait for ``jobs`` (``JobRef.as_dict()`` dicts) of the connection ``listhygiene_conn_id``."""

    #: Seconds from the deferral to the first status check. The scheduler must have handled the
    #: deferred try's exit before the task is resumed: when the trigger fired first, Airflow
    #: 3.3.2 took that exit for a task killed externally and failed the try (seen 6 s after the
    #: deferral on a loaded two-core LocalExecutor).
    first_check_after: ClassVar[float] = 15.0

    def __init__(
        self,
        *,
        listhygiene_conn_id: str,
        jobs: Sequence[dict[str, Any]],
        deadline: float,
        poll_interval: float = 30.0,
        events_path: str | None = None,
        not_before: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's are not annotated
        self.listhygiene_conn_id = listhygiene_conn_id
        self.jobs = [dict(job) for job in jobs]
        self.deadline = float(deadline)
        self.poll_interval = float(poll_interval)
        self.events_path = events_path
        self.not_before = None if not_before is None else float(not_before)

    @classmethod
    def first_check(cls) -> float:
        """``not_before`` for a trigger deferred to now."""
        return time.time() + cls.first_check_after

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "listhygiene_conn_id": self.listhygiene_conn_id,
                "jobs": self.jobs,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "events_path": self.events_path,
                "not_before": self.not_before,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from listhygiene.pipeline import WaitTimeout, wait_until_done

        hook = ListHygieneHook(self.listhygiene_conn_id)
        jobs = {job["job_id"]: job for job in self.jobs}
        states: dict[str, JobState] = {}

        async def read(job_id: str) -> JobState:
            states[job_id] = await hook.job_status(jobs[job_id])
            return states[job_id]

        try:
            await hook.aload_connection()
            store = self._store(hook)
            if self.not_before is not None and self.not_before > time.time():
                await asyncio.sleep(self.not_before - time.time())
            # the core's one wait loop (docs/backends.md): a short first wait, then longer ones
            # up to poll_interval (jobs often end quickly), or the webhook events of the jobs
            await wait_until_done(
                list(jobs),
                read,
                events=store,
                event_names=lambda job_id: hook.job_events(jobs[job_id]),
                poll_seconds=min(2.0, self.poll_interval),
                max_poll_seconds=self.poll_interval,
                event_timeout=self.poll_interval,
                deadline=self.deadline,
            )
        except WaitTimeout as exc:
            yield self._event("timeout", str(exc), states)
            return
        except Exception as exc:  # one event, always: the operator turns it into a failure
            self.log.exception("checking the jobs failed")
            yield self._event("error", f"{type(exc).__name__}: {exc}", states)
            return
        ended = outcome(list(states.values()))
        yield (
            TriggerEvent(ended)  # type: ignore[no-untyped-call]
            if ended is not None
            else self._event("error", "the wait ended with jobs still running", states)
        )

    def _store(self, hook: ListHygieneHook) -> Any:
        path = self.events_path or hook.events_path
        if path is None:
            return None
        from listhygiene.clients import EventStore

        return EventStore(path)

    def _event(self, status: str, message: str, states: dict[str, JobState]) -> TriggerEvent:
        return TriggerEvent(  # type: ignore[no-untyped-call]
            {
                "status": status,
                "message": message,
                "jobs": [s.as_dict() for s in states.values()],
            }
        )

"""The sensor: waits for a verification job that already exists (submitted by another task, the
CLI, or another system) on the service of a ``listhygiene`` connection.

``mode="poke"`` holds a worker slot between checks, ``mode="reschedule"`` frees it between checks,
``deferrable=True`` hands the waiting to :class:`VerificationJobTrigger` (the operator's own).
A job that ends failed fails the task.
"""

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, conf
from airflow.sdk.exceptions import AirflowException

from listhygiene_airflow.hooks.verification import COMPLETED, FAILED, ListHygieneHook
from listhygiene_airflow.triggers.verification import VerificationJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["VerificationJobSensor"]


class VerificationJobSensor(BaseSensorOperator):
    """Succeed when the job ``job_id`` has completed; fail when it failed.

    :param job_id: the job's id (form A's file job ``task_id``, form B's bulk ``job_id``).
        Templated.
    :param listhygiene_conn_id: the ``listhygiene`` connection of the job's service.
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: Sequence[str] = ("job_id",)

    def __init__(
        self,
        *,
        job_id: str,
        listhygiene_conn_id: str = ListHygieneHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.listhygiene_conn_id = listhygiene_conn_id
        self.deferrable = deferrable

    @property
    def hook(self) -> ListHygieneHook:
        return ListHygieneHook(self.listhygiene_conn_id)

    def _job(self) -> dict[str, Any]:
        return self.hook.job_ref(self.job_id).as_dict()

    def poke(self, context: "Context") -> bool:
        state = self.hook.job_status_sync(self._job())
        self.log.info("job %s is %s", self.job_id, state.status)
        if state.status == FAILED:
            raise AirflowException(f"job {self.job_id} failed ({state.error})")
        return state.status == COMPLETED

    def execute(self, context: "Context") -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=VerificationJobTrigger(
                listhygiene_conn_id=self.listhygiene_conn_id,
                jobs=[self._job()],
                deadline=time.time() + float(self.timeout),
                poll_interval=float(self.poke_interval),
                not_before=VerificationJobTrigger.first_check(),
            ),
            method_name="execute_complete",
        )
        return None  # pragma: no cover - defer() raises

    def execute_complete(self, context: "Context", event: Mapping[str, Any] | None = None) -> None:
        event = dict(event or {})
        if event.get("status") != "success":
            raise AirflowException(f"job {self.job_id}: {event.get('message')}")
        self.log.info("job %s completed", self.job_id)

"""The protocol every backend speaks: submit distinct addresses as a job, stream its results.

A job has an id and a :class:`JobRef` that the pipeline records before it waits, so a remote
service's job can be picked up again after a crash without submitting, and paying for, the same
addresses twice (docs/backends.md). Every result table has :data:`KEY` (the address as
submitted) and the columns of ``listhygiene.results.arrow_schema(internal=True)``.
"""

from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Collection,
    Iterable,
    Mapping,
)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from listhygiene.errors import BackendError, InsufficientCreditsError
from listhygiene.results import KEY, results_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KEY", "Backend", "InsufficientCredits", "JobFailed", "JobRef", "results_table"]


@dataclass(frozen=True)
class JobRef:
    """A submitted job: enough to find it again, even from another process."""

    backend: str
    job_id: str
    size: int
    check_smtp: bool
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "job_id": self.job_id,
            "size": self.size,
            "check_smtp": self.check_smtp,
            "data": dict(self.data),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobRef":
        return cls(
            data["backend"],
            data["job_id"],
            int(data["size"]),
            bool(data["check_smtp"]),
            dict(data.get("data", {})),
        )


class InsufficientCredits(InsufficientCreditsError):
    """The backend's balance does not cover the run: raised before anything is submitted (the
    same meaning as a service's answer, so one ``except InsufficientCreditsError`` catches both)."""

    def __init__(self, needed: int, balance: int, where: str) -> None:
        super().__init__(
            f"the run needs up to {needed:,} credits (one per distinct address to verify) and "
            f"{where} has {balance:,}: add {needed - balance:,} credits or verify fewer addresses; "
            "nothing was submitted"
        )
        self.needed = needed
        self.balance = balance


class JobFailed(BackendError):
    """A submitted job ended failed: the run stops, and a rerun submits its addresses again."""


class Backend(ABC):
    """A verifier the pipeline can hand jobs to."""

    name: ClassVar[str]
    #: Jobs outlive this process (a remote service), so a resumed run asks for their results.
    resumable: ClassVar[bool] = False
    #: The most addresses one job may hold (None: no limit).
    max_job_size: ClassVar[int | None] = None

    @abstractmethod
    async def submit(self, addresses: "pa.Array", *, check_smtp: bool) -> JobRef:
        """Start verifying ``addresses`` (distinct, non-empty strings)."""

    @abstractmethod
    def results(self, job: JobRef) -> AsyncIterator["pa.Table"]:
        """The job's results as they become available; ends when the job is complete."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    async def ensure_credits(self, needed: int) -> None:  # noqa: B027 - optional hook
        """Raise, before anything is submitted, when ``needed`` verifications cannot be paid."""

    async def balance(self) -> int | None:
        """The credits the backend can still spend (a remote key's balance); None when it
        charges none (the local engine)."""
        return None

    def fingerprint(self) -> Mapping[str, Any]:
        """The settings that change verdicts: a run resumes only when they are the same."""
        return {}

    @property
    def default_check_smtp(self) -> bool:
        """Whether to probe mailboxes when the caller does not say."""
        return True

    @property
    def health(self) -> Mapping[str, Any] | None:
        """The backend's view of the run's health (the local engine's port-25 signal)."""
        return None

    @property
    def politeness(self) -> Mapping[str, int] | None:
        """What this process's SMTP sessions cost the mail hosts so far (the summary's
        ``politeness``: ``sessions``, ``max_sessions_one_host``, ``limits_met``, ``bans``);
        None when the backend cannot know (a remote service's sessions are its own), which the
        summary writes as zeros."""
        return None

    @property
    def disposable_host_sightings(self) -> Collection[tuple[str, str]]:
        """(mail host, listed disposable domain) pairs the backend saw, for the verdict store
        to keep (docs/engine.md, "Lists"); a remote service keeps its own."""
        return ()

    def add_disposable_host_sightings(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Pairs earlier runs saw, from the verdict store: a new throwaway domain on a host
        they showed to be a disposable service's is disposable from the start. A remote
        backend has nothing to learn them: the service decides."""
        return

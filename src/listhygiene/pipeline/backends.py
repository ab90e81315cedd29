"""Backends: what the pipeline verifies addresses with.

The pipeline speaks one small protocol: *submit* a list of distinct addresses as a job, then
stream the job's *results* as Arrow tables. A job has an id and a :class:`JobRef` that the
pipeline records before it waits, so a remote service's job (form A or form B) can be picked up
again after a crash without submitting, and paying for, the same addresses twice. The local
engine is the first backend; its jobs live in this process (``resumable`` is false), so a resumed
run simply submits what is still missing.

Every result table has :data:`KEY` (the address as submitted) and the columns of
``listhygiene.results.arrow_schema(internal=True)``.
"""

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from listhygiene.engine import Engine, EngineSettings
from listhygiene.errors import BackendError, ConfigurationError, InsufficientCreditsError
from listhygiene.results import VerificationResult, arrow_schema
from listhygiene.vocabulary import BACKEND_KINDS, JobStatus, is_terminal

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.clients import ClientSettings
    from listhygiene.clients.events import EventStore

__all__ = [
    "KEY",
    "Backend",
    "InsufficientCredits",
    "JobFailed",
    "JobRef",
    "LocalBackend",
    "WaitTimeout",
    "make_backend",
    "results_table",
    "wait_until_done",
]

log = logging.getLogger(__name__)

#: The column of result tables that holds the address as it was submitted.
KEY = "_address"


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


def results_table(pairs: Iterable[tuple[str, VerificationResult]]) -> "pa.Table":
    """(submitted address, result) pairs as a result table."""
    import pyarrow as pa

    keys: list[str] = []
    rows: list[dict[str, Any]] = []
    for key, result in pairs:
        keys.append(key)
        rows.append(result.to_row(internal=True))
    table = pa.Table.from_pylist(rows, schema=arrow_schema(internal=True))
    return table.add_column(0, KEY, pa.array(keys, pa.string()))


class LocalBackend(Backend):
    """The self-hosted engine. Without SMTP, whole columns are verified vectorised."""

    name = "local"

    def __init__(
        self,
        settings: EngineSettings | None = None,
        *,
        flush_every: int = 500,
        flush_seconds: float = 2.0,
    ) -> None:
        self.engine = Engine(settings)
        self._jobs: dict[str, pa.Array] = {}
        self.flush_every = flush_every
        self.flush_seconds = flush_seconds

    async def aclose(self) -> None:
        await self.engine.aclose()

    async def submit(self, addresses: "pa.Array", *, check_smtp: bool) -> JobRef:
        job = JobRef(self.name, uuid.uuid4().hex, len(addresses), check_smtp)
        self._jobs[job.job_id] = addresses
        return job

    async def results(self, job: JobRef) -> AsyncIterator["pa.Table"]:
        addresses = self._jobs.pop(job.job_id, None)
        if addresses is None:
            raise LookupError(f"local job {job.job_id} is not in this process")
        if not job.check_smtp:
            async for table in self._without_smtp(addresses):
                yield table
            return
        pending: list[tuple[str, VerificationResult]] = []
        last = time.monotonic()
        async for key, result in self.engine.verify_each(addresses.to_pylist(), check_smtp=True):
            pending.append((str(key), result))
            if len(pending) >= self.flush_every or time.monotonic() - last >= self.flush_seconds:
                yield results_table(pending)
                pending, last = [], time.monotonic()
        if pending:
            yield results_table(pending)

    async def _without_smtp(self, addresses: "pa.Array") -> AsyncIterator["pa.Table"]:
        from listhygiene.engine.bulk import verify_column_without_smtp

        step = 200_000
        for start in range(0, len(addresses), step):
            chunk = addresses.slice(start, step)
            table = await verify_column_without_smtp(self.engine, chunk)
            yield table.add_column(0, KEY, chunk)
            await asyncio.sleep(0)

    @property
    def health(self) -> Mapping[str, Any] | None:
        return self.engine.health.as_dict()

    @property
    def politeness(self) -> Mapping[str, int] | None:
        return self.engine.politeness

    @property
    def disposable_host_sightings(self) -> Collection[tuple[str, str]]:
        return self.engine.disposable_host_sightings

    def add_disposable_host_sightings(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.engine.add_disposable_host_sightings(pairs)

    #: Settings that change a verdict (not the pace): a run resumes only when they are equal.
    _VERDICT_SETTINGS = (
        "dns_server",
        "smtp_port",
        "helo",
        "mail_from",
        "allow_private_mx",
        "dnsbl_zones",
        "starttls",
        "socks_proxy",
    )

    def fingerprint(self) -> Mapping[str, Any]:
        settings = self.engine.settings
        return {name: getattr(settings, name) for name in self._VERDICT_SETTINGS}

    @property
    def default_check_smtp(self) -> bool:
        return self.engine.settings.check_smtp


def make_backend(
    kind: "str | Backend" = "local",
    *,
    settings: EngineSettings | None = None,
    engine_overrides: Mapping[str, Any] | None = None,
    client_settings: "ClientSettings | None" = None,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_header: str | None = None,
    events: "EventStore | str | None" = None,
    **options: Any,
) -> Backend:
    """The one place a backend is built from its kind, for the pipeline, the CLI, Airflow and
    Dagster alike (docs/backends.md).

    ``local`` takes the engine's ``settings`` (``LISTHYGIENE_*`` when none) with
    ``engine_overrides`` over them. ``form-a`` / ``form-b`` take ``client_settings``, or
    ``base_url`` and ``api_key`` (and form A's ``api_key_header``); ``events`` is a webhook
    receiver's event store (or its path); other ``options`` go to the remote backend's
    constructor (``poll_seconds``, ``file_threshold``, ``webhook_url``...). A ready
    :class:`Backend` is returned as it is. Anything that cannot work raises
    :class:`~listhygiene.errors.ConfigurationError`.
    """
    if isinstance(kind, Backend):
        return kind
    if kind == "local":
        overrides = dict(engine_overrides or {})
        if settings is None:
            return LocalBackend(EngineSettings(**overrides))
        return LocalBackend(settings.model_copy(update=overrides) if overrides else settings)
    if kind not in BACKEND_KINDS:
        known = ", ".join(BACKEND_KINDS)
        raise ConfigurationError(f"unknown backend {kind!r} (known: {known})")
    from listhygiene.clients import DEFAULT_API_KEY_HEADER, ClientSettings
    from listhygiene.pipeline.remote import FormABackend, FormBBackend

    if client_settings is None:
        if not base_url or not api_key:
            raise ConfigurationError(f"a {kind} backend needs a base URL and an API key")
        client_settings = ClientSettings(
            base_url=base_url,
            api_key=api_key,
            api_key_header=api_key_header or DEFAULT_API_KEY_HEADER,
        )
    if isinstance(events, str):
        from listhygiene.clients.events import EventStore

        events = EventStore(events)
    cls = FormABackend if kind == "form-a" else FormBBackend
    return cls(client_settings, events=events, **options)


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

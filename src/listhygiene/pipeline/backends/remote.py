"""Backends on a remote verification service, in form A or form B (``listhygiene.clients``).

Both are *resumable*: a job's id is recorded in the run's work folder as soon as the service
accepts it, so a run killed while a job runs finds the job again and reads its results instead
of submitting (and paying for) the same addresses twice. Submissions are never retried blindly
(see ``listhygiene.clients._core``); the one window left is between the service accepting a job
and the answer reaching us, which no idempotency key of the spec's two forms can close.

Form A: up to ``file_threshold`` addresses (or without SMTP, which file jobs cannot skip) go
through ``/verify/bulk`` in batches of 50, several at once; larger lists become one file job per
100,000 addresses (a CSV ``id,email`` uploaded to ``/verify/file``), whose result file is read
back row by row. A synchronous batch is bounded in time (the service's deadline, the client's
time-out), so with SMTP the addresses it had no time for (``unknown`` / ``smtp_timeout``, free)
or whose answer was lost (a client time-out: perhaps charged, never sent again) go, with every
batch not yet sent, into one file job at the end (docs/backends.md, "Slow batches"). Form B: bulk
jobs of at most 10,000 addresses, results read page by page.

A job is waited for by polling its status with a growing interval, or, with an
:class:`~listhygiene.clients.events.EventStore` fed by the webhook receiver, by watching the
store for the job's completion event (the status is still read once the event arrives, and at
``webhook_fallback`` intervals if none comes, so a lost delivery only delays the run).
"""

import asyncio
import csv
import io
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from listhygiene.clients import (
    AsyncFormAClient,
    AsyncFormBClient,
    ClientConnectionError,
    ClientSettings,
    read_results_csv,
)
from listhygiene.clients._exceptions import reached_server
from listhygiene.errors import ServiceError
from listhygiene.pipeline.backends.base import Backend, InsufficientCredits, JobFailed, JobRef
from listhygiene.pipeline.backends.waiting import wait_until_done
from listhygiene.result_file import RESULT_COLUMNS, unescape_formula
from listhygiene.results import VerificationResult, results_table
from listhygiene.statuses import Facts, MailboxOutcome, Reason, Status
from listhygiene.vocabulary import JOB_EVENTS, JobStatus

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.clients.events import EventStore

__all__ = ["FormABackend", "FormBBackend"]

log = logging.getLogger(__name__)

_BULK_SIZE = 50
#: Form A lists with SMTP longer than this go as a file job: one round of the batches in flight.
FILE_THRESHOLD = 200
#: A gateway's answers (a proxy that gave up waiting, or lost the service's answer): the request
#: may have been verified and charged behind it.
_GATEWAY_STATUSES = frozenset({502, 504})


class _Remote(Backend):
    """What both forms share: the client, credits, waiting, and the in-process submissions."""

    resumable: ClassVar[bool] = True
    #: The completion and failure events of the form's jobs.
    _EVENTS: ClassVar[tuple[str, str]]

    def __init__(
        self,
        settings: ClientSettings,
        *,
        events: "EventStore | None" = None,
        poll_seconds: float = 2.0,
        max_poll_seconds: float = 30.0,
        webhook_fallback: float = 300.0,
    ) -> None:
        self.settings = settings
        self.events = events
        self.poll_seconds = poll_seconds
        self.max_poll_seconds = max_poll_seconds
        self.webhook_fallback = webhook_fallback
        # What this process submitted: job id -> the addresses, in order.
        self._submitted: dict[str, list[str]] = {}

    @property
    def politeness(self) -> Mapping[str, int] | None:
        """None: the service opens the SMTP sessions, and does not say what they cost the mail
        hosts (the summary's ``politeness`` is then all zeros; docs/pipeline.md, "Politeness")."""
        return None

    def fingerprint(self) -> Mapping[str, Any]:
        # The service and the key's identity change verdicts and who pays; the key itself is a
        # secret and stays out of the work folder.
        return {"base_url": self.settings.base_url.rstrip("/")}

    async def balance(self) -> int:
        """The key's credits available (the form's ``/credits``)."""
        raise NotImplementedError

    async def ensure_credits(self, needed: int) -> None:
        balance = await self.balance()
        if balance < needed:
            raise InsufficientCredits(needed, balance, f"the key on {self.settings.base_url}")

    async def _wait(self, job_id: str, status: Any) -> Any:
        """Wait until ``status()`` gives a terminal job; return it (the one wait loop,
        :func:`~listhygiene.pipeline.backends.wait_until_done`)."""

        async def read(_: str) -> Any:
            return await status()

        states = await wait_until_done(
            [job_id],
            read,
            events=self.events,
            event_names=lambda _: self._EVENTS,
            poll_seconds=self.poll_seconds,
            max_poll_seconds=self.max_poll_seconds,
            event_timeout=self.webhook_fallback,
        )
        return states[job_id]

    @staticmethod
    def _failed(job: Any, job_ref: JobRef) -> JobFailed:
        error = getattr(job, "error", None)
        detail = f"{error.code}: {error.message}" if error is not None else "no reason given"
        return JobFailed(f"remote job {job_ref.job_id} failed ({detail})")


class FormABackend(_Remote):
    """A form A service: ``/verify/bulk`` for small lists, file jobs for large ones.

    With SMTP, lists longer than ``file_threshold`` are sent as a file job at once; shorter ones
    go in synchronous batches until one comes back cut by the service's deadline (``unknown`` /
    ``smtp_timeout``) or unanswered in the client's time-out: then no new batch is sent, and the
    cut, unanswered and unsent addresses are verified in one file job (docs/backends.md).
    ``uncertain_credits`` counts the addresses of batches whose answer was lost: the service may
    have charged them (the run's summary reports it as ``credits.uncertain``).
    """

    name = "form-a"
    max_job_size = 100_000
    _EVENTS = JOB_EVENTS["a"]

    def __init__(
        self,
        settings: ClientSettings,
        *,
        file_threshold: int = FILE_THRESHOLD,
        bulk_concurrency: int = 4,
        **options: Any,
    ) -> None:
        super().__init__(settings, **options)
        self.client = AsyncFormAClient(settings)
        self.file_threshold = file_threshold
        self.bulk_concurrency = bulk_concurrency
        #: Addresses in batches sent whose answer never came: perhaps charged (an upper bound).
        self.uncertain_credits = 0

    async def balance(self) -> int:
        return (await self.client.credits()).credits_balance

    async def submit(self, addresses: "pa.Array", *, check_smtp: bool) -> JobRef:
        emails = [str(a) for a in addresses.to_pylist()]
        if len(emails) <= self.file_threshold or not check_smtp:
            # Synchronous calls: nothing to find again after a crash; what was saved is kept
            # and the rest is submitted again.
            job_id = f"bulk-{uuid.uuid4().hex}"
            self._submitted[job_id] = emails
            return JobRef(self.name, job_id, len(emails), check_smtp, {"mode": "bulk"})
        return await self._submit_file(emails)

    async def _submit_file(self, emails: list[str]) -> JobRef:
        accepted = await self.client.submit_file(_upload(emails), file_name="listhygiene.csv")
        log.info("form A file job %s accepted (%d addresses)", accepted.task_id, len(emails))
        self._submitted[accepted.task_id] = emails
        return JobRef(self.name, accepted.task_id, len(emails), True, {"mode": "file"})

    async def results(self, job: JobRef) -> AsyncIterator[Any]:
        """Result tables; a :class:`JobRef` among them is a file job this backend submitted on
        its own (the slow addresses of a bulk run), for the run to record before it is waited
        for, so that a rerun reads it instead of paying for its addresses again."""
        emails = self._submitted.pop(job.job_id, None)
        if job.data.get("mode") == "bulk":
            if emails is None:
                return  # submitted by a run that died: its missing addresses go again
            async for item in self._bulk(emails, job.check_smtp):
                yield item
            return
        yield await self._file(job, emails)

    async def _file(self, job: JobRef, emails: list[str] | None) -> "pa.Table":
        done = await self._wait(job.job_id, lambda: self.client.file_job(job.job_id))
        if done.status != JobStatus.COMPLETED:
            raise self._failed(done, job)
        data = await self.client.file_results(job.job_id)
        return _file_results(data, emails, charged=done.credits_used)

    async def _bulk(self, emails: list[str], check_smtp: bool) -> AsyncIterator[Any]:
        batches = [emails[i : i + _BULK_SIZE] for i in range(0, len(emails), _BULK_SIZE)]
        gate = asyncio.Semaphore(self.bulk_concurrency)
        # With SMTP, the addresses to verify in a file job at the end: cut by the service's
        # deadline, lost with a timed-out batch, or in a batch not sent once either happened.
        later: list[str] = []
        slow = False  # a batch was cut or lost: send no more batches

        async def one(batch: list[str]) -> tuple[list[str], Any]:
            nonlocal slow
            async with gate:
                if slow:
                    return batch, None
                answer: Any
                try:
                    answer = await self.client.verify_bulk(batch, check_smtp=check_smtp)
                except ClientConnectionError as exc:
                    cause = exc.__cause__
                    if not isinstance(cause, Exception) or not reached_server(cause):
                        raise  # never reached the service (and retried): it is unreachable
                    answer = exc
                except ServiceError as exc:
                    if exc.status not in _GATEWAY_STATUSES:
                        raise
                    answer = exc
                # decided before the gate lets the next batch go
                if check_smtp and (
                    isinstance(answer, Exception) or any(_cut(r) for r in answer.results)
                ):
                    slow = True
                return batch, answer

        tasks = [asyncio.ensure_future(one(batch)) for batch in batches]
        try:
            for finished in asyncio.as_completed(tasks):
                batch, answer = await finished
                if answer is None:
                    later.extend(batch)
                    continue
                if isinstance(answer, (ClientConnectionError, ServiceError)):
                    self.uncertain_credits += len(batch)
                    log.warning(
                        "form A /verify/bulk: no answer to a batch of %d addresses (%s); the "
                        "service may have charged up to %d credits for it, and it is not sent "
                        "again: %s",
                        len(batch),
                        answer,
                        len(batch),
                        "its addresses go into a file job"
                        if check_smtp
                        else "its addresses are unknown (smtp_timeout), free",
                    )
                    if check_smtp:
                        later.extend(batch)
                    else:
                        yield results_table((e, _out_of_time(e)) for e in batch)
                    continue
                pairs = list(zip(batch, answer.results, strict=True))
                if check_smtp:
                    cut = [email for email, result in pairs if _cut(result)]
                    if cut:
                        later.extend(cut)
                        pairs = [(e, r) for e, r in pairs if not _cut(r)]
                if pairs:
                    yield results_table(pairs)
        finally:
            for task in tasks:
                task.cancel()
        if self.uncertain_credits:
            log.warning(
                "up to %d credits may have been spent on form A batches whose answers were lost",
                self.uncertain_credits,
            )
        if later:
            log.info(
                "form A: %d addresses were not verified in time by /verify/bulk; verifying them "
                "in a file job",
                len(later),
            )
            job = await self._submit_file(later)
            yield job  # recorded by the run before it is waited for
            self._submitted.pop(job.job_id, None)
            yield await self._file(job, later)

    async def aclose(self) -> None:
        await self.client.aclose()


def _cut(result: VerificationResult) -> bool:
    """A result a synchronous batch gives an address it had no time for (a deadline, or a mail
    host slower than the service's step time-out: the two look the same): unknown, free."""
    return result.status is Status.UNKNOWN and result.reason is Reason.SMTP_TIMEOUT


def _out_of_time(email: str) -> VerificationResult:
    """The result of an address whose ``/verify/bulk`` answer was lost, without SMTP: what our
    service answers for an address it had no time for (unknown, ``smtp_timeout``, free, with the
    flags that need no network), which ``--retry-unknown-after`` verifies again."""
    from listhygiene.engine.lists import is_disposable, is_free, is_role
    from listhygiene.engine.syntax import parse_address

    parsed = parse_address(email)
    if parsed is None:
        return VerificationResult.from_facts(email, Facts(syntax_valid=False))
    facts = Facts(
        syntax_valid=True,
        smtp_checked=False,
        mailbox=MailboxOutcome.NOT_CHECKED,
        undetermined_reason=Reason.SMTP_TIMEOUT,
        is_disposable=is_disposable(parsed.domain),
        is_role=is_role(parsed.local_part),
        is_free=is_free(parsed.domain),
    )
    return VerificationResult.from_facts(parsed.email, facts, domain=parsed.domain_unicode)


class FormBBackend(_Remote):
    """A form B service: bulk jobs of at most 10,000 addresses, results read page by page."""

    name = "form-b"
    max_job_size = 10_000
    _EVENTS = JOB_EVENTS["b"]

    def __init__(
        self, settings: ClientSettings, *, webhook_url: str | None = None, **options: Any
    ) -> None:
        super().__init__(settings, **options)
        self.client = AsyncFormBClient(settings)
        self.webhook_url = webhook_url

    async def balance(self) -> int:
        return (await self.client.credits()).available

    async def submit(self, addresses: "pa.Array", *, check_smtp: bool) -> JobRef:
        emails = [str(a) for a in addresses.to_pylist()]
        job = await self.client.submit_bulk(
            emails, smtp_check=check_smtp, webhook_url=self.webhook_url
        )
        log.info("form B bulk job %s accepted (%d addresses)", job.job_id, len(emails))
        self._submitted[job.job_id] = emails
        return JobRef(self.name, job.job_id, len(emails), check_smtp)

    async def results(self, job: JobRef) -> AsyncIterator["pa.Table"]:
        emails = self._submitted.pop(job.job_id, None)
        done = await self._wait(job.job_id, lambda: self.client.bulk_job(job.job_id))
        if done.status != JobStatus.COMPLETED:
            raise self._failed(done, job)
        page: list[tuple[str, VerificationResult]] = []
        position = 0
        async for result in self.client.iter_bulk_results(job.job_id):
            # Items come one per submitted address, in order: this process knows what it sent;
            # a resumed run has only the addresses the service echoes.
            key = emails[position] if emails is not None else result.email
            page.append((key, result))
            position += 1
            if len(page) >= 1_000:
                yield results_table(page)
                page = []
        if page:
            yield results_table(page)

    async def aclose(self) -> None:
        await self.client.aclose()


def _upload(emails: Sequence[str]) -> bytes:
    """The CSV of a form A file job: ``id`` (the position) and ``email``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "email"])
    writer.writerows(enumerate(emails))
    return out.getvalue().encode()


def _file_results(
    data: bytes, emails: list[str] | None, *, charged: int | None = None
) -> "pa.Table":
    """A form A result file as a result table, each row matched to its address by ``id``.

    The file carries form A's verdict columns only (status, score, reason and the flags); the
    rest of the shared result (domain, DNS and mailbox facts) is inferred from them as
    :meth:`VerificationResult.from_form_a` does. It has no credits column either: the credits
    the job charged (``charged``, from its status) are spread over its rows, so that the run's
    summary, which adds up its rows, reports what the service took.
    """
    frame = read_results_csv(data)
    rows = frame.to_dict("records")
    credits = _spread(charged, [str(row.get("status")) != "unknown" for row in rows])
    pairs: list[tuple[str, VerificationResult]] = []
    for row, used in zip(rows, credits, strict=True):
        email = (
            emails[int(row["id"])] if emails is not None else unescape_formula(str(row["email"]))
        )
        domain = email.rsplit("@", 1)[-1] if "@" in email else ""
        fields = {
            "email": email,
            "domain": domain,
            **{k: row[k] for k in RESULT_COLUMNS if k in row},
            "credits_used": used,
        }
        pairs.append((email, VerificationResult.from_form_a(fields)))
    return results_table(pairs)


def _spread(charged: int | None, billable: Sequence[bool]) -> list[int]:
    """One credit per billable row (form A's rule: an unknown result is free), unless the job
    says it charged another number: then that number, billable rows first, so the total is the
    job's own."""
    credits = [1 if b else 0 for b in billable]
    if charged is None or charged == sum(credits) or not credits:
        return credits
    order = sorted(range(len(credits)), key=lambda i: not billable[i])
    credits = [0] * len(credits)
    for i in order[: max(0, charged)]:
        credits[i] = 1
    if charged > len(credits):
        credits[order[0]] += charged - len(credits)
    return credits

"""Clients of a form A service: ``LISTHYGIENE-API-KEY`` (or the service's own header name),
results in the envelope, file-upload jobs."""

from collections.abc import Iterable

from listhygiene.clients._api import form_a
from listhygiene.clients._files import FileInput
from listhygiene.clients._send import AsyncBase, SyncBase
from listhygiene.clients.models import (
    BatchResult,
    FileJob,
    FileJobAccepted,
    FormACredits,
    Webhook,
)
from listhygiene.results import VerificationResult

__all__ = ["AsyncFormAClient", "FormAClient"]


class FormAClient(SyncBase):
    """A blocking client of a form A service (``base_url`` ends in ``/v1``).

    Example::

        with FormAClient(ClientSettings(base_url=url, api_key=key)) as client:
            result = client.verify_single("jane@example.com")
    """

    _form = "a"

    def verify_single(self, email: str, *, check_smtp: bool = True) -> VerificationResult:
        """Verify one address (an invalid one is a result, not an error)."""
        return self._send(form_a.verify_single(email, check_smtp=check_smtp))

    def verify_bulk(self, emails: Iterable[str], *, check_smtp: bool = True) -> BatchResult:
        """Verify up to 50 addresses in one synchronous call.

        The call is sent again only if it never reached the service; once sent, a lost answer
        (:class:`ClientTimeoutError` on a read time-out) is raised, never retried: the service
        may have verified and charged the batch. ``FormABackend`` verifies such a batch in a
        file job instead (docs/backends.md, "Slow batches")."""
        return self._send(form_a.verify_bulk(emails, check_smtp=check_smtp))

    def submit_file(
        self, file: FileInput, *, file_name: str | None = None, email_column: str | None = None
    ) -> FileJobAccepted:
        """Upload a .csv, .xlsx, .xls or .txt file as a job; never sent twice (see ``_core``)."""
        return self._send(form_a.submit_file(file, file_name=file_name, email_column=email_column))

    def file_job(self, job_id: str) -> FileJob:
        return self._send(form_a.file_job(job_id))

    def wait_for_file_job(
        self, job_id: str, *, interval: float = 2.0, timeout: float | None = None
    ) -> FileJob:
        """Poll until the job completes or fails; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else self._clock() + timeout
        while not (job := self.file_job(job_id)).is_terminal:
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"file job {job_id} is still {job.status} after {timeout} s")
            self._sleep(interval)
        return job

    def file_results(
        self,
        job_id: str,
        *,
        valid: bool | None = None,
        invalid: bool | None = None,
        catchall: bool | None = None,
        role: bool | None = None,
        unknown: bool | None = None,
    ) -> bytes:
        """The result CSV of a completed job; flags set true keep only those statuses (see
        :func:`read_results_csv` for a DataFrame)."""
        filters = {
            "valid": valid,
            "invalid": invalid,
            "catchall": catchall,
            "role": role,
            "unknown": unknown,
        }
        return self._send(form_a.file_results(job_id, filters))

    def credits(self) -> FormACredits:
        return self._send(form_a.credits())

    def create_webhook(self, url: str, events: Iterable[str]) -> Webhook:
        """Register ``url`` for ``file.completed`` / ``file.failed``; keep the returned
        ``secret``: it is shown only now."""
        return self._send(form_a.create_webhook(url, events))

    def list_webhooks(self) -> tuple[Webhook, ...]:
        return self._send(form_a.list_webhooks())

    def delete_webhook(self, webhook_id: str) -> None:
        self._send(form_a.delete_webhook(webhook_id))


class AsyncFormAClient(AsyncBase):
    """The asyncio twin of :class:`FormAClient`."""

    _form = "a"

    async def verify_single(self, email: str, *, check_smtp: bool = True) -> VerificationResult:
        return await self._send(form_a.verify_single(email, check_smtp=check_smtp))

    async def verify_bulk(self, emails: Iterable[str], *, check_smtp: bool = True) -> BatchResult:
        return await self._send(form_a.verify_bulk(emails, check_smtp=check_smtp))

    async def submit_file(
        self, file: FileInput, *, file_name: str | None = None, email_column: str | None = None
    ) -> FileJobAccepted:
        call = form_a.submit_file(file, file_name=file_name, email_column=email_column)
        return await self._send(call)

    async def file_job(self, job_id: str) -> FileJob:
        return await self._send(form_a.file_job(job_id))

    async def wait_for_file_job(
        self,
        job_id: str,
        *,
        interval: float = 2.0,
        timeout: float | None = None,  # noqa: ASYNC109 - the same signature as the sync twin
    ) -> FileJob:
        deadline = None if timeout is None else self._clock() + timeout
        while not (job := await self.file_job(job_id)).is_terminal:
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"file job {job_id} is still {job.status} after {timeout} s")
            await self._sleep(interval)
        return job

    async def file_results(
        self,
        job_id: str,
        *,
        valid: bool | None = None,
        invalid: bool | None = None,
        catchall: bool | None = None,
        role: bool | None = None,
        unknown: bool | None = None,
    ) -> bytes:
        filters = {
            "valid": valid,
            "invalid": invalid,
            "catchall": catchall,
            "role": role,
            "unknown": unknown,
        }
        return await self._send(form_a.file_results(job_id, filters))

    async def credits(self) -> FormACredits:
        return await self._send(form_a.credits())

    async def create_webhook(self, url: str, events: Iterable[str]) -> Webhook:
        return await self._send(form_a.create_webhook(url, events))

    async def list_webhooks(self) -> tuple[Webhook, ...]:
        return await self._send(form_a.list_webhooks())

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._send(form_a.delete_webhook(webhook_id))

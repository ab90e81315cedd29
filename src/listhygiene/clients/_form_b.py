"""Clients of a form B service: bearer token, bare JSON, bulk jobs read in pages."""

from collections.abc import AsyncIterator, Iterable, Iterator

from listhygiene.clients._api import MAX_PAGE, form_b
from listhygiene.clients._send import AsyncBase, SyncBase
from listhygiene.clients.models import BulkJob, FormBCredits, ResultsPage, Webhook
from listhygiene.results import VerificationResult

__all__ = ["AsyncFormBClient", "FormBClient"]


class FormBClient(SyncBase):
    """A blocking client of a form B service (``base_url`` ends in ``/v1``).

    Example::

        with FormBClient(ClientSettings(base_url=url, api_key=key, plan="starter")) as client:
            job = client.submit_bulk(addresses)
            client.wait_for_bulk_job(job.job_id)
            results = list(client.iter_bulk_results(job.job_id))
    """

    _form = "b"

    def verify(
        self, email: str, *, smtp_check: bool = True, timeout: int | None = None
    ) -> VerificationResult:
        """Verify one address; ``timeout`` in milliseconds (1 to 30,000; the service's default
        is 5,000). A syntactically invalid address is 400 ``INVALID_EMAIL``."""
        return self._send(form_b.verify(email, smtp_check=smtp_check, timeout=timeout))

    def submit_bulk(
        self, emails: Iterable[str], *, smtp_check: bool = True, webhook_url: str | None = None
    ) -> BulkJob:
        """Submit up to 10,000 addresses as a job; never sent twice (see ``_core``)."""
        return self._send(
            form_b.submit_bulk(emails, smtp_check=smtp_check, webhook_url=webhook_url)
        )

    def bulk_job(self, job_id: str) -> BulkJob:
        return self._send(form_b.bulk_job(job_id))

    def wait_for_bulk_job(
        self, job_id: str, *, interval: float = 2.0, timeout: float | None = None
    ) -> BulkJob:
        """Poll until the job completes or fails; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else self._clock() + timeout
        while not (job := self.bulk_job(job_id)).is_terminal:
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"bulk job {job_id} is still {job.status} after {timeout} s")
            self._sleep(interval)
        return job

    def bulk_results(
        self, job_id: str, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> ResultsPage:
        """One page of a completed job's results (``status``: valid, invalid, unknown)."""
        return self._send(form_b.bulk_results(job_id, status=status, limit=limit, offset=offset))

    def iter_bulk_results(
        self, job_id: str, *, status: str | None = None, page_size: int = MAX_PAGE
    ) -> Iterator[VerificationResult]:
        """Every result of a completed job, page after page, in submission order."""
        offset: int | None = 0
        while offset is not None:
            page = self.bulk_results(job_id, status=status, limit=page_size, offset=offset)
            yield from page.results
            offset = page.next_offset

    def credits(self) -> FormBCredits:
        return self._send(form_b.credits())

    def create_webhook(self, url: str, events: Iterable[str], secret: str) -> Webhook:
        """Register ``url`` for events, signed with ``secret`` (the service does not echo it)."""
        return self._send(form_b.create_webhook(url, events, secret))

    def list_webhooks(self) -> tuple[Webhook, ...]:
        return self._send(form_b.list_webhooks())

    def delete_webhook(self, webhook_id: str) -> None:
        self._send(form_b.delete_webhook(webhook_id))

    def cancel_bulk_job(self, job_id: str) -> None:
        """Cancel a job where the service offers it (not in form B's spec: a service without
        it answers 404 or 405, raised as the form's error)."""
        self._send(form_b.cancel_bulk_job(job_id))


class AsyncFormBClient(AsyncBase):
    """The asyncio twin of :class:`FormBClient`."""

    _form = "b"

    async def verify(
        self,
        email: str,
        *,
        smtp_check: bool = True,
        timeout: int | None = None,  # noqa: ASYNC109 - the service's own time-out, in ms
    ) -> VerificationResult:
        return await self._send(form_b.verify(email, smtp_check=smtp_check, timeout=timeout))

    async def submit_bulk(
        self, emails: Iterable[str], *, smtp_check: bool = True, webhook_url: str | None = None
    ) -> BulkJob:
        call = form_b.submit_bulk(emails, smtp_check=smtp_check, webhook_url=webhook_url)
        return await self._send(call)

    async def bulk_job(self, job_id: str) -> BulkJob:
        return await self._send(form_b.bulk_job(job_id))

    async def wait_for_bulk_job(
        self,
        job_id: str,
        *,
        interval: float = 2.0,
        timeout: float | None = None,  # noqa: ASYNC109 - the same signature as the sync twin
    ) -> BulkJob:
        deadline = None if timeout is None else self._clock() + timeout
        while not (job := await self.bulk_job(job_id)).is_terminal:
            if deadline is not None and self._clock() >= deadline:
                raise TimeoutError(f"bulk job {job_id} is still {job.status} after {timeout} s")
            await self._sleep(interval)
        return job

    async def bulk_results(
        self, job_id: str, *, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> ResultsPage:
        call = form_b.bulk_results(job_id, status=status, limit=limit, offset=offset)
        return await self._send(call)

    async def iter_bulk_results(
        self, job_id: str, *, status: str | None = None, page_size: int = MAX_PAGE
    ) -> AsyncIterator[VerificationResult]:
        offset: int | None = 0
        while offset is not None:
            page = await self.bulk_results(job_id, status=status, limit=page_size, offset=offset)
            for result in page.results:
                yield result
            offset = page.next_offset

    async def credits(self) -> FormBCredits:
        return await self._send(form_b.credits())

    async def create_webhook(self, url: str, events: Iterable[str], secret: str) -> Webhook:
        return await self._send(form_b.create_webhook(url, events, secret))

    async def list_webhooks(self) -> tuple[Webhook, ...]:
        return await self._send(form_b.list_webhooks())

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._send(form_b.delete_webhook(webhook_id))

    async def cancel_bulk_job(self, job_id: str) -> None:
        await self._send(form_b.cancel_bulk_job(job_id))

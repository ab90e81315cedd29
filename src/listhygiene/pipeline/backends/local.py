"""The local engine as a backend: jobs that live in this process.

Its jobs are not resumable (``resumable`` is false): a resumed run simply submits what is still
missing. Results are handed over in tables of ``flush_every`` results or every ``flush_seconds``,
so the run saves them as they come (docs/pipeline.md, "How a run is built").
"""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from listhygiene.engine import Engine, EngineSettings
from listhygiene.pipeline.backends.base import Backend, JobRef
from listhygiene.results import KEY, VerificationResult, results_table

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LocalBackend"]


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

"""A job taken over by a sibling slot of the same worker (its claim went stale while its store
calls stalled, as they do while the worker retries a database that is away): the first slot
loses the claim like any other worker and stops, instead of running the job alongside the new
holder (docs/service.md, Faults)."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from listhygiene.results import VerificationResult
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import create_bulk_job, get_job, pending_addresses
from listhygiene.service.store.models import Job, utcnow
from listhygiene.service.worker import JobWorker

EMAILS = [f"person{i}@example.test" for i in range(5)]


def _valid(email: str) -> VerificationResult:
    return VerificationResult(email=email, status="valid", score=0.9, credits_used=1)


class GatedEngine:
    """Stands in for the engine. Its first run (the first slot) gives one result, then waits for
    ``release``; once released it gives the next and records that the worker came back for more
    (so that result's save went through). Its second run (the slot that took over) gives its
    last address, then waits until cancelled."""

    def __init__(self) -> None:
        self.runs = 0
        self.release = asyncio.Event()
        self.first_went_on = asyncio.Event()
        self.second_started = asyncio.Event()

    async def verify_each(
        self, emails: Any, *, check_smtp: bool | None = None, **lane: Any
    ) -> AsyncIterator[tuple[str, VerificationResult]]:
        emails = list(emails)
        self.runs += 1
        if self.runs == 1:
            yield emails[0], _valid(emails[0])
            await self.release.wait()
            yield emails[1], _valid(emails[1])
            self.first_went_on.set()
            for email in emails[2:]:
                yield email, _valid(email)
            return
        self.second_started.set()
        yield emails[-1], _valid(emails[-1])
        await asyncio.Event().wait()


async def _until(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


@pytest.mark.timeout(60)
async def test_a_slot_whose_job_a_sibling_took_over_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="listhygiene.service.worker")
    with Store(f"sqlite:///{tmp_path / 'slots.db'}") as store:
        _key, row = store.create_key("slots", 10)
        job = create_bulk_job(store, row.id, EMAILS, check_smtp=False)
        engine = GatedEngine()
        # Heartbeats every second; results saved one by one.
        worker = JobWorker(store, engine, slots=2, stale_after=4, poll_seconds=0.05, batch_size=1)
        await worker.start()
        try:
            await _until(lambda: EMAILS[0] not in pending_addresses(store, job.id), "nothing saved")
            first = get_job(store, row.id, job.id)
            assert first is not None
            assert first.claimed_by is not None
            # The first slot's claim goes stale (as when its heartbeats fail); the idle sibling
            # takes the job over. Again if a heartbeat refreshed the claim first.
            while not engine.second_started.is_set():
                with store.transaction() as conn:
                    conn.execute(
                        update(Job)
                        .where(Job.id == job.id)
                        .values(heartbeat_at=utcnow() - timedelta(hours=1))
                    )
                await asyncio.sleep(0.3)
            engine.release.set()
            await _until(
                lambda: (
                    engine.first_went_on.is_set()
                    or any("taken over" in r.getMessage() for r in caplog.records)
                ),
                "the first slot neither stopped nor went on",
            )
            assert not engine.first_went_on.is_set(), "the first slot ran on beside the second"
            second = get_job(store, row.id, job.id)
            assert second is not None
            assert second.claimed_by != first.claimed_by  # each slot claims under its own name
        finally:
            await worker.stop()

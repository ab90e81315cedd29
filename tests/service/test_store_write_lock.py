"""The store's writes and SQLite's write lock (issue 15 item 6; docs/service.md, "Fairness").

On SQLite every writing transaction of every process queues on one lock (``db/engine.py``), the
server's admissions included, so the job runner's writes take their turn like the others and hold
it as briefly as they can: nothing that needs no database is done inside, a poll that finds
nothing takes no turn, and the worker's saves run in the runner's writer thread while its event
loop waits (no GIL handed back and forth with the lock held). Nothing here asserts a duration.
"""

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from listhygiene.db import engine as db_engine
from listhygiene.results import VerificationResult
from listhygiene.service import worker as worker_module
from listhygiene.service.store import Store
from listhygiene.service.store import webhooks as webhook_store
from listhygiene.service.store.jobs import (
    claim_job,
    create_bulk_job,
    get_job,
    heartbeat,
    release_job,
    save_results,
)
from listhygiene.service.worker import JobWorker

EMAILS = [f"person{i}@example.test" for i in range(6)]


def _valid(email: str) -> VerificationResult:
    return VerificationResult(email=email, status="valid", score=0.9, credits_used=1)


def _callers(folder: Path) -> list[str]:
    """The callers of this process's write transactions, from the lock trace."""
    trace = folder / f"{os.getpid()}.txt"
    if not trace.exists():
        return []
    return [line.split()[3] for line in trace.read_text().splitlines()]


def test_every_write_of_jobs_and_webhooks_takes_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heartbeats, releases and the webhook store's writes queue for the write lock (one trace
    line each); before, they wrote in plain transactions and met other writers in SQLite's busy
    handler."""
    folder = tmp_path / "trace"
    folder.mkdir()
    monkeypatch.setenv(db_engine.LOCK_TRACE_VARIABLE, str(folder))
    with Store(f"sqlite:///{tmp_path / 'turns.db'}") as store:
        _key, row = store.create_key("turns", 10)
        job = create_bulk_job(store, row.id, EMAILS[:1], check_smtp=False)
        assert claim_job(store, "w1") is not None
        before = len(_callers(folder))
        assert heartbeat(store, job.id, "w1")
        release_job(store, job.id, "w1")
        webhook_store.create(store, row.id, "b", "https://hooks.example.com/", ["e"], "s")
        delivery = webhook_store.enqueue(
            store, url="https://hooks.example.com/", event="e", payload="{}", secret=None
        )
        webhook_store.mark_failed(store, delivery, None, "refused")
        webhook_store.mark_delivered(store, delivery)
    assert _callers(folder)[before:] == [
        "heartbeat",
        "release_job",
        "create",
        "enqueue",
        "mark_failed",
        "mark_delivered",
    ]


@pytest.mark.timeout(60)
def test_an_empty_outbox_poll_takes_no_write_lock(tmp_path: Path) -> None:
    """The outbox is polled twice a second and is mostly empty: a poll that finds nothing due
    only reads, so it neither waits for another process's write nor holds theirs behind it."""
    path = tmp_path / "outbox.db"
    # no busy timeout: a poll that asked for the write lock would fail at once
    with Store(f"sqlite:///{path}", connect_args={"timeout": 0}) as store:
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process writing
            assert webhook_store.due(store, datetime.now(UTC), 10) == []
        finally:
            other.execute("ROLLBACK")
            other.close()
        delivery = webhook_store.enqueue(
            store, url="https://hooks.example.com/", event="e", payload="{}", secret=None
        )
        (claimed,) = webhook_store.due(store, datetime.now(UTC), 10)
        assert claimed.id == delivery
        assert webhook_store.due(store, datetime.now(UTC), 10) == []  # leased


def test_results_are_serialised_before_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save serialises its results before its write transaction: the lock is held for the
    statements only."""
    held: list[int] = []
    dump = VerificationResult.model_dump_json
    with Store(f"sqlite:///{tmp_path / 'save.db'}") as store:
        lock = db_engine._write_lock(store.engine)

        def recording(self: VerificationResult, **kwargs: Any) -> str:
            held.append(lock._depth)
            return dump(self, **kwargs)

        monkeypatch.setattr(VerificationResult, "model_dump_json", recording)
        _key, row = store.create_key("save", 10)
        job = create_bulk_job(store, row.id, [*EMAILS, EMAILS[0]], check_smtp=False)
        assert save_results(store, job.id, [(e, _valid(e)) for e in EMAILS]) == len(EMAILS)
        saved = get_job(store, row.id, job.id)
    assert held == [0] * len(EMAILS)
    assert saved is not None
    # form B counts submitted rows (a duplicate counted twice), by its status (unknown here)
    assert (saved.processed, saved.unknown, saved.credits_used) == (7, 7, 6)


class _Engine:
    """Stands in for the engine: every address valid, the loop given back between them."""

    async def verify_each(
        self, emails: Any, *, check_smtp: bool | None = None, **lane: Any
    ) -> AsyncIterator[tuple[str, VerificationResult]]:
        for email in emails:
            await asyncio.sleep(0)
            yield email, _valid(email)


async def _job_through_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save_seconds: float, batch_size: int
) -> list[tuple[str, int, int]]:
    """A 6-address job run by a worker with a store writer, each save taking ``save_seconds``
    in it while a task ticks on the loop; per save: its thread, the ticks before and after."""
    saves: list[tuple[str, int, int]] = []
    ticks = 0
    real_save = worker_module.save_prepared

    def save(*args: Any, **kwargs: Any) -> int:
        seen = ticks
        time.sleep(save_seconds)  # a loop still running ticks meanwhile
        saves.append((threading.current_thread().name, seen, ticks))
        return real_save(*args, **kwargs)

    monkeypatch.setattr(worker_module, "save_prepared", save)

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    writer = ThreadPoolExecutor(1, thread_name_prefix="test-store-writer")
    with Store(f"sqlite:///{tmp_path / 'writer.db'}") as store:
        _key, row = store.create_key("writer", 10)
        job = create_bulk_job(store, row.id, EMAILS, check_smtp=False)
        worker = JobWorker(
            store, _Engine(), poll_seconds=0.05, batch_size=batch_size, store_writer=writer
        )
        ticker = asyncio.create_task(tick())
        await worker.start()
        try:
            deadline = time.monotonic() + 30
            while (done := get_job(store, row.id, job.id)) is None or done.status != "completed":
                assert time.monotonic() < deadline, "the job did not complete"
                await asyncio.sleep(0.02)
        finally:
            await worker.stop()
            ticker.cancel()
            writer.shutdown()
    assert done.processed == len(EMAILS)
    return saves


@pytest.mark.timeout(60)
async def test_the_worker_saves_in_its_store_writer_while_its_loop_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a store writer (the job runner's, at the server's CPU priority), the worker's saves
    on SQLite run in it, and the event loop runs nothing else meanwhile: no other task's turn
    comes while a save holds the write lock."""
    saves = await _job_through_the_writer(tmp_path, monkeypatch, 0.05, batch_size=2)
    assert len(saves) >= 3
    for thread, seen, after in saves:
        assert thread.startswith("test-store-writer")
        assert seen == after


@pytest.mark.timeout(60)
async def test_a_long_wait_for_the_lock_lets_the_loop_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that waits longer than ``LOOP_PAUSE`` (another process holding the write lock)
    stops the runner's loop for that pause only: the job's other tasks (its DNS and SMTP, with
    their time limits) run on while the writer waits."""
    saves = await _job_through_the_writer(
        tmp_path, monkeypatch, worker_module.LOOP_PAUSE * 4, batch_size=3
    )
    assert saves
    for thread, seen, after in saves:
        assert thread.startswith("test-store-writer")
        assert after > seen  # the loop ran during the wait

"""The store on SQLite and on PostgreSQL: migrations, hashed keys, credits, rate windows.

Concurrency is tested for real: threads sharing a store, and separate processes sharing a
database, since that is how ``listhygiene serve`` runs with several workers.
"""

import hashlib
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select, text, update

from listhygiene.service.store import (
    PLANS,
    Store,
    current_revision,
    form_a_limit,
    form_b_limits,
    hash_key,
    head,
    make_engine,
    upgrade,
)
from listhygiene.service.store.migrate import VERSION_TABLE
from listhygiene.service.store.models import ApiKey, Base, new_id

TABLES = {
    "api_keys",
    "jobs",
    "job_rows",
    "job_results",
    "webhooks",
    "webhook_outbox",
    "rate_windows",
}


def run_processes(code: str, *args: str, count: int = 2) -> list[str]:
    """Run ``code`` in ``count`` Python processes that start their work at the same moment.

    ``code`` sees ``args`` as ``sys.argv[1:]`` and ``start`` (a wall-clock time to wait for);
    returns each process's stdout, after asserting that all succeeded.
    """
    start = time.time() + 2.0  # after every process has imported SQLAlchemy and Alembic
    prelude = f"import sys, time\nstart = {start!r}\n"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", prelude + code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        outputs.append(out)
    return outputs


def all_cells(url: str) -> list[str]:
    """Every value of every row of every table, as text."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            cells = []
            for table in inspect(conn).get_table_names():
                for row in conn.execute(text(f"SELECT * FROM {table}")):
                    cells.extend(str(value) for value in row)
            return cells
    finally:
        engine.dispose()


# -- migrations ---------------------------------------------------------------------------------


def test_upgrade_brings_an_empty_database_to_head_and_is_idempotent(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    upgrade(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            assert current_revision(conn) == head()
            assert set(inspect(conn).get_table_names()) >= TABLES
            assert conn.execute(text(f"SELECT count(*) FROM {VERSION_TABLE}")).scalar() == 1
    finally:
        engine.dispose()
    with Store(empty_db_url) as store:  # and once more, as a server starting does
        assert store.create_key("after", 1)[1].credits_balance == 1


def test_migrations_create_exactly_the_models(empty_db_url: str) -> None:
    upgrade(empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_two_processes_upgrading_at_once_both_succeed(empty_db_url: str) -> None:
    code = (
        "from listhygiene.service.store import upgrade\n"
        "time.sleep(max(0.0, start - time.time()))\n"
        "upgrade(sys.argv[1])\n"
    )
    run_processes(code, empty_db_url)
    engine = make_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            assert current_revision(conn) == head()
            assert set(inspect(conn).get_table_names()) >= TABLES
            assert conn.execute(text(f"SELECT count(*) FROM {VERSION_TABLE}")).scalar() == 1
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'wal.db'}") as store, store.transaction() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


# -- keys ---------------------------------------------------------------------------------------


def test_keys_are_stored_hashed(empty_db_url: str) -> None:
    # A database of its own: opening and closing a SQLite file by other means (read_bytes below)
    # drops the POSIX locks every connection of this process holds on it, which would break the
    # module's shared store.
    db_url = empty_db_url
    with Store(db_url) as store:
        key, row = store.create_key("hashed", 5)
        assert key.startswith("lh_")
        assert len(key) == 3 + 43
        assert row.key_prefix == key[:8]
        secret = key[3:]
        cells = all_cells(db_url)
        assert not [cell for cell in cells if secret in cell]
        assert hashlib.sha256(key.encode()).hexdigest() in cells
        assert hash_key(key) in cells
        if db_url.startswith("sqlite"):  # not in the file or its journal either
            path = Path(db_url.removeprefix("sqlite:///"))
            for file in path.parent.glob(path.name + "*"):
                assert secret.encode() not in file.read_bytes()


def test_authenticate_finds_the_right_key_only(store: Store) -> None:
    key, row = store.create_key("auth", 1, plan="starter")
    other_key, other = store.create_key("other", 1)
    assert store.authenticate(key) == row
    assert store.authenticate(other_key) == other
    assert row.plan == "starter"
    assert other.plan == "professional"
    for wrong in (key[:-1], key + "x", key.upper(), "lh_", "", None, "not-a-key"):
        assert store.authenticate(wrong) is None
    with store.transaction() as conn:
        conn.execute(update(ApiKey).where(ApiKey.id == row.id).values(active=False))
    assert store.authenticate(key) is None
    assert store.get_key(row.id) is not None


def test_create_key_checks_its_arguments(store: Store) -> None:
    with pytest.raises(ValueError, match="plan"):
        store.create_key("x", 1, plan="gold")
    with pytest.raises(ValueError, match="negative"):
        store.create_key("x", -1)
    with pytest.raises(ValueError, match="rate limits"):
        store.create_key("x", 1, limits={"per_fortnight": 3})


def test_keys_carry_custom_rate_limits(store: Store) -> None:
    _, plain = store.create_key("plain", 1, plan="free")
    _, custom = store.create_key(
        "custom", 1, plan="enterprise", limits={"a_single_per_minute": 5, "b_per_hour": 7}
    )
    assert form_a_limit(plain, "single").limit == 6_000
    assert form_a_limit(plain, "other").bucket == "a:other:minute"
    assert [limit.limit for limit in form_b_limits(plain)] == [100, 1_000]
    assert form_a_limit(custom, "single").limit == 5
    assert form_a_limit(custom, "bulk").limit == 1_500
    hour, day = form_b_limits(custom)
    assert (hour.bucket, hour.limit, hour.window_seconds) == ("b:hour", 7, 3_600)
    assert (day.bucket, day.window_seconds) == ("b:day", 86_400)


def test_timestamps_are_utc(store: Store) -> None:
    before = datetime.now(UTC)
    _, row = store.create_key("time", 1)
    assert row.created_at.tzinfo is UTC
    assert before - timedelta(seconds=5) <= row.created_at <= datetime.now(UTC)


def test_ids_sort_by_creation_time() -> None:
    first = new_id()
    time.sleep(0.002)
    second = new_id()
    assert len(first) == 26
    assert first < second


# -- credits ------------------------------------------------------------------------------------


def test_credits_reserve_refund_and_top_up(store: Store) -> None:
    _, row = store.create_key("credits", 10)
    assert store.reserve_credits(row.id, 4)
    assert not store.reserve_credits(row.id, 7)  # all or nothing
    credits = store.credits(row.id)
    assert (credits.balance, credits.consumed, credits.added) == (6, 4, 10)
    store.refund_credits(row.id, 1)  # one result came back unknown
    assert store.reserve_credits(row.id, 7)
    assert store.reserve_credits(row.id, 0)
    assert not store.reserve_credits(row.id, 1)
    store.add_credits(row.id, 5)
    credits = store.credits(row.id)
    assert (credits.balance, credits.consumed, credits.added) == (5, 10, 15)
    assert credits.updated_at >= row.updated_at


def test_credit_mistakes_are_refused(store: Store) -> None:
    _, row = store.create_key("mistakes", 3)
    assert store.reserve_credits(row.id, 2)
    with pytest.raises(LookupError):
        store.refund_credits(row.id, 3)  # more than was consumed
    with pytest.raises(ValueError, match="negative"):
        store.reserve_credits(row.id, -1)
    with pytest.raises(ValueError, match="negative"):
        store.add_credits(row.id, -1)
    assert not store.reserve_credits("no-such-key", 1)
    with pytest.raises(LookupError):
        store.credits("no-such-key")
    with pytest.raises(LookupError):
        store.add_credits("no-such-key", 1)
    assert store.credits(row.id).balance == 1


def test_a_reservation_rolls_back_with_the_callers_transaction(store: Store) -> None:
    _, row = store.create_key("rollback", 5)

    def create_job_but_fail() -> None:
        with store.transaction(write=True) as conn:
            assert store.reserve_credits(row.id, 5, conn=conn)
            raise RuntimeError("the job could not be created")

    with pytest.raises(RuntimeError):
        create_job_but_fail()
    assert store.credits(row.id).balance == 5
    with store.transaction(write=True) as conn:
        assert store.reserve_credits(row.id, 5, conn=conn)
    assert store.credits(row.id).balance == 0


def test_concurrent_reservations_never_overdraw(store: Store) -> None:
    _, row = store.create_key("race", 10)
    barrier = threading.Barrier(20)
    outcomes: list[bool] = []

    def reserve() -> None:
        barrier.wait()
        outcomes.append(store.reserve_credits(row.id, 1))

    threads = [threading.Thread(target=reserve) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count(True) == 10
    credits = store.credits(row.id)
    assert (credits.balance, credits.consumed) == (0, 10)


def test_reservations_from_two_processes_never_overdraw(store: Store, db_url: str) -> None:
    _, row = store.create_key("race across processes", 10)
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from listhygiene.service.store import Store\n"
        "store = Store(sys.argv[1], migrate=False)\n"
        "time.sleep(max(0.0, start - time.time()))\n"
        "with ThreadPoolExecutor(8) as pool:\n"
        "    won = sum(pool.map(lambda _: store.reserve_credits(sys.argv[2], 1), range(15)))\n"
        "print(won)\n"
    )
    won = [int(out) for out in run_processes(code, db_url, row.id)]
    assert sum(won) == 10
    credits = store.credits(row.id)
    assert (credits.balance, credits.consumed) == (0, 10)


# -- rate windows -------------------------------------------------------------------------------


def test_a_fixed_window_allows_its_limit_then_refuses(store: Store) -> None:
    _, row = store.create_key("rate", 0)
    now = 1_700_000_000  # 20 s into a minute window
    start = now - now % 60
    hits = [store.rate_window_hit(row.id, "a:single:minute", 60, 3, now=now) for _ in range(5)]
    assert [hit.allowed for hit in hits] == [True, True, True, False, False]
    assert [hit.remaining for hit in hits] == [2, 1, 0, 0, 0]
    assert {hit.reset for hit in hits} == {start + 60}
    # The last second of the window still counts in it; the next second opens a new one.
    assert not store.rate_window_hit(row.id, "a:single:minute", 60, 3, now=start + 59.9).allowed
    fresh = store.rate_window_hit(row.id, "a:single:minute", 60, 3, now=start + 60)
    assert fresh == (True, 2, start + 120)
    # Buckets and keys count apart.
    assert store.rate_window_hit(row.id, "a:bulk:minute", 60, 3, now=now).remaining == 2
    _, other = store.create_key("rate other", 0)
    assert store.rate_window_hit(other.id, "a:single:minute", 60, 3, now=now).allowed
    # A zero limit refuses without counting.
    assert store.rate_window_hit(row.id, "b:hour", 3600, 0, now=now) == (False, 0, 1_700_002_800)


def test_refused_requests_do_not_count(store: Store) -> None:
    _, row = store.create_key("refused", 0)
    for _ in range(5):
        store.rate_window_hit(row.id, "b:hour", 3600, 2, now=7200)
    with store.transaction() as conn:
        count = conn.execute(
            text("SELECT count FROM rate_windows WHERE api_key_id = :id"), {"id": row.id}
        )
        assert count.scalar_one() == 2
    # A limit raised within the window lets more through at once.
    assert store.rate_window_hit(row.id, "b:hour", 3600, 4, now=7200) == (True, 1, 10800)


def _window_counts(store: Store, key_id: str) -> dict[str, int]:
    with store.transaction() as conn:
        rows = conn.execute(
            text("SELECT bucket, count FROM rate_windows WHERE api_key_id = :id"), {"id": key_id}
        )
        return {str(bucket): int(count) for bucket, count in rows}


def test_a_request_refused_by_the_day_does_not_count_in_the_hour(store: Store) -> None:
    """Form B counts a request in its hourly, then its daily window: one the day refuses must
    not stay counted in the hour (docs/service.md, "a refused request does not count")."""
    key, row = store.create_key("daily", 0, limits={"b_per_hour": 100, "b_per_day": 3})
    first = store.admit(key, form_b_limits)[1]
    assert [hit.allowed for hit in first] == [True, True]
    # then four at once (one batch, as the service coalesces them): two fit in the day
    batch = store.admit_many([(key, form_b_limits)] * 4)
    assert [[hit.allowed for hit in hits] for _, hits in batch] == [
        [True, True],
        [True, True],
        [True, False],
        [True, False],
    ]
    assert _window_counts(store, row.id) == {"b:hour": 3, "b:day": 3}
    # the refused ones see the hour as the admitted ones left it
    assert [hits[0].remaining for _, hits in batch] == [98, 97, 97, 97]
    alone = store.admit(key, form_b_limits)[1]
    assert [hit.allowed for hit in alone] == [True, False]
    assert alone[0].remaining == 97
    assert _window_counts(store, row.id) == {"b:hour": 3, "b:day": 3}


def test_rate_windows_hold_across_two_stores(db_url: str) -> None:
    with Store(db_url) as first, Store(db_url) as second:
        _, row = first.create_key("two stores", 0)
        stores = [first, second] * 3
        hits = [s.rate_window_hit(row.id, "b:day", 86_400, 4, now=86_400 * 3) for s in stores]
    assert [hit.allowed for hit in hits] == [True, True, True, True, False, False]


def test_concurrent_hits_never_exceed_the_limit(store: Store) -> None:
    _, row = store.create_key("rate race", 0)
    barrier = threading.Barrier(20)
    allowed: list[bool] = []

    def hit() -> None:
        barrier.wait()
        allowed.append(store.rate_window_hit(row.id, "a:file:minute", 60, 7, now=600).allowed)

    threads = [threading.Thread(target=hit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert allowed.count(True) == 7


def test_the_schema_holds_jobs_rows_results_and_webhooks(empty_db_url: str) -> None:
    """A smoke test of the tables the service builds on: they take what they will hold.

    On a database of its own: the checks read whole tables.
    """
    with Store(empty_db_url) as store:
        _check_schema(store)


def _check_schema(store: Store) -> None:
    from listhygiene.results import VerificationResult
    from listhygiene.service.store.models import Job, JobResult, JobRow, Webhook, WebhookOutbox
    from listhygiene.statuses import Status

    _, row = store.create_key("schema", 10)
    result = VerificationResult(email="a@example.com", status=Status.VALID, score=0.95)
    job_id = new_id()
    with store.transaction(write=True) as conn:
        conn.execute(
            Job.__table__.insert().values(
                id=job_id, api_key_id=row.id, form="a", kind="file", columns=["name", "email"]
            )
        )
        conn.execute(
            JobRow.__table__.insert(),
            [
                {
                    "job_id": job_id,
                    "position": 1,
                    "email": " A@Example.com ",
                    "address": "a@example.com",
                    "row": {"name": "Ann", "zeta": "1", "alpha": "2"},
                },
                {"job_id": job_id, "position": 2, "email": "N/A", "address": None, "row": None},
            ],
        )
        conn.execute(
            JobResult.__table__.insert().values(
                job_id=job_id,
                address="a@example.com",
                status=result.status.value,
                status_b=result.form_b_status()[0].value,
                result=result.model_dump_json(),
            )
        )
        webhook_id = new_id()
        conn.execute(
            Webhook.__table__.insert().values(
                id=webhook_id,
                api_key_id=row.id,
                form="a",
                url="https://x.test/h",
                events=["file.completed"],
                secret="s",
            )
        )
        conn.execute(
            WebhookOutbox.__table__.insert().values(
                webhook_id=webhook_id,
                url="https://x.test/h",
                event="file.completed",
                payload=json.dumps({"event": "file.completed"}),
                secret="s",
            )
        )
    with store.transaction() as conn:
        job = conn.execute(select(Job).where(Job.id == job_id)).mappings().one()
        assert (job["status"], job["check_smtp"], job["processed"]) == ("pending", True, 0)
        assert job["columns"] == ["name", "email"]
        cells = (
            conn.execute(
                select(JobRow.row).where(JobRow.job_id == job_id).order_by(JobRow.position)
            )
            .scalars()
            .all()
        )
        assert list(cells[0]) == ["name", "zeta", "alpha"]  # the row's own column order
        assert cells[1] is None
        stored = conn.execute(select(JobResult.result)).scalar_one()
        assert VerificationResult.model_validate_json(stored) == result
        outbox = conn.execute(select(WebhookOutbox)).mappings().one()
        assert outbox["id"] >= 1
        assert outbox["delivered_at"] is None
        assert outbox["attempts"] == 0
        assert conn.execute(select(func.count()).select_from(Webhook)).scalar() == 1


def test_plans_are_the_specs() -> None:
    assert PLANS == ("free", "starter", "professional", "enterprise")

"""The verdict store on a real SQLite file and a real PostgreSQL server: what it keeps, what it
gives back, what is fresh, and that concurrent writers never lose the newer verdict."""

import logging
import multiprocessing
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from listhygiene.results import (
    KEY,
    DomainReputation,
    VerificationResult,
    arrow_schema,
    results_table,
)
from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome, Reason
from listhygiene.verdicts import (
    DEFAULT_MAX_AGE,
    PEPPER_VARIABLE,
    Freshness,
    VerdictStore,
    VerdictStoreError,
    parse_duration,
    parse_max_age,
)

DAY = 86400.0


def result(
    address: str, mailbox: MailboxOutcome, *, smtp: bool = True, **facts: object
) -> VerificationResult:
    domain = address.split("@")[1]
    return VerificationResult.from_facts(
        address,
        Facts(
            syntax_valid=True,
            dns=DnsOutcome.MX,
            smtp_checked=smtp,
            mailbox=mailbox if smtp else MailboxOutcome.NOT_CHECKED,
            **facts,  # type: ignore[arg-type]
        ),
        domain=domain,
        mx_records=[f"mx1.{domain}", f"mx2.{domain}"],
        domain_reputation=DomainReputation(mx_ip="192.0.2.1", checked=True),
        response_time=42,
    )


def table(*pairs: tuple[str, VerificationResult]) -> pa.Table:
    return results_table(pairs)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    return request.getfixturevalue("new_pg_database")()


@pytest.fixture
def store(url: str) -> Iterator[VerdictStore]:
    with VerdictStore(url) as opened:
        yield opened


def test_a_domain_keeps_its_mail_provider_when_a_later_result_does_not_know_it(
    store: VerdictStore,
) -> None:
    # issue 28: a reused verdict gives mx_provider; a remote backend's results carry none, and
    # must not erase the one a local verification found; a newer provider replaces it
    def with_provider(address: str, provider: str | None) -> VerificationResult:
        plain = result(address, MailboxOutcome.ACCEPTED)
        return plain.model_copy(update={"mx_provider": provider})

    def provider_of(address: str) -> object:
        (row,) = store.fetch(pa.array([address])).to_pylist()
        return row["mx_provider"]

    store.save(
        table(("a@acme.com", with_provider("a@acme.com", "google"))),
        backend="local",
        checked_at=1000.0,
    )
    assert provider_of("a@acme.com") == "google"
    store.save(
        table(("b@acme.com", with_provider("b@acme.com", None))),
        backend="form-b",
        checked_at=2000.0,
    )
    assert provider_of("a@acme.com") == provider_of("b@acme.com") == "google"
    store.save(
        table(("c@acme.com", with_provider("c@acme.com", "microsoft"))),
        backend="local",
        checked_at=3000.0,
    )
    assert provider_of("a@acme.com") == "microsoft"


def test_a_saved_verdict_comes_back_whole(store: VerdictStore) -> None:
    saved = table(
        ("alice@example.com", result("alice@example.com", MailboxOutcome.ACCEPTED)),
        ("info@example.com", result("info@example.com", MailboxOutcome.ACCEPTED, is_role=True)),
        ("gone@example.com", result("gone@example.com", MailboxOutcome.NOT_FOUND)),
    )
    assert store.save(saved, backend="local", checked_at=1000.0) == 3
    found = store.fetch(pa.array(["gone@example.com", "alice@example.com", "new@example.com"]))
    assert sorted(found.column(KEY).to_pylist()) == ["alice@example.com", "gone@example.com"]
    by_key = {r[KEY]: r for r in found.to_pylist()}
    for row in saved.to_pylist():
        if row[KEY] not in by_key:
            continue
        back = by_key[row[KEY]]
        assert {k: back[k] for k in [KEY, *arrow_schema(internal=True).names]} == row
        assert back["checked_at"] == 1000.0


def test_unknown_is_never_kept(store: VerdictStore) -> None:
    grey = result(
        "grey@example.com", MailboxOutcome.UNDETERMINED, undetermined_reason=Reason.GREYLISTED
    )
    assert grey.status.value == "unknown"
    assert store.save(table(("grey@example.com", grey)), backend="local") == 0
    assert store.fetch(pa.array(["grey@example.com"])).num_rows == 0


def test_freshness_per_status_and_depth(store: VerdictStore) -> None:
    now = 100 * DAY
    store.save(
        table(
            ("old-valid@example.com", result("old-valid@example.com", MailboxOutcome.ACCEPTED)),
            ("full@example.com", result("full@example.com", MailboxOutcome.FULL)),
            ("gone@example.com", result("gone@example.com", MailboxOutcome.NOT_FOUND)),
        ),
        backend="local",
        checked_at=now - 40 * DAY,
    )
    store.save(
        table(
            (
                "dns-only@example.com",
                result("dns-only@example.com", MailboxOutcome.ACCEPTED, smtp=False),
            )
        ),
        backend="local",
        checked_at=now - DAY,
    )
    found = store.fetch(
        pa.array(
            [
                "old-valid@example.com",
                "full@example.com",
                "gone@example.com",
                "dns-only@example.com",
            ]
        )
    )
    keys = found.column(KEY).to_pylist()

    def reusable(freshness: Freshness, *, smtp: bool) -> set[str]:
        mask = freshness.reusable(found, check_smtp=smtp, now=now).to_pylist()
        return {k for k, ok in zip(keys, mask, strict=True) if ok}

    defaults = Freshness.of(None)
    # 40 days: valid (30 d) and risky (7 d) are stale, invalid (90 d) is not; a DNS-only verdict
    # never stands in for an SMTP check, but an SMTP verdict serves a DNS-only run
    assert reusable(defaults, smtp=True) == {"gone@example.com"}
    assert reusable(defaults, smtp=False) == {"gone@example.com", "dns-only@example.com"}
    assert reusable(Freshness.of("60d,risky=1d"), smtp=True) == {
        "old-valid@example.com",
        "gone@example.com",
    }
    assert reusable(Freshness.of({"invalid": DAY}), smtp=False) == {"dns-only@example.com"}
    assert reusable(Freshness.of(0), smtp=False) == set()


def test_max_age_parsing() -> None:
    assert parse_duration("12h") == 12 * 3600
    assert parse_duration("2w") == 14 * DAY
    assert parse_max_age("30d") == dict.fromkeys(set(DEFAULT_MAX_AGE) - {"unknown"}, 30 * DAY)
    mixed = parse_max_age("risky=2d, 30d")  # order does not matter: the status wins
    assert (mixed["risky"], mixed["valid"]) == (2 * DAY, 30 * DAY)
    for bad in ("soon", "unknown=1d", "valid=", "excellent=3d", ""):
        with pytest.raises(ValueError, match=r"\S"):
            parse_max_age(bad)
    assert Freshness.of("365d").limit("unknown") == 0


def test_a_newer_verdict_is_never_replaced_by_an_older_one(store: VerdictStore) -> None:
    address = "bob@example.com"
    store.save(
        table((address, result(address, MailboxOutcome.ACCEPTED))),
        backend="local",
        checked_at=2000.0,
    )
    store.save(
        table((address, result(address, MailboxOutcome.NOT_FOUND))),
        backend="late",
        checked_at=1000.0,
    )
    (row,) = store.fetch(pa.array([address])).to_pylist()
    assert (row["status"], row["checked_at"]) == ("valid", 2000.0)
    store.save(
        table((address, result(address, MailboxOutcome.NOT_FOUND))),
        backend="form-b",
        checked_at=3000.0,
    )
    (row,) = store.fetch(pa.array([address])).to_pylist()
    assert (row["status"], row["reason"], row["checked_at"]) == (
        "invalid",
        "mailbox_not_found",
        3000.0,
    )


def test_addresses_never_reach_the_database(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.sqlite"
    with VerdictStore(f"sqlite:///{path}") as store:
        store.save(
            table(
                (
                    "very.private.person@example.com",
                    result("very.private.person@example.com", MailboxOutcome.ACCEPTED),
                )
            ),
            backend="local",
        )
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # the file and its WAL
    assert b"very.private.person" not in raw
    assert b"example.com" in raw  # the domain is kept (mail hosts are per domain)


def test_forget_and_prune(store: VerdictStore) -> None:
    store.save(
        table(
            ("alice@example.com", result("alice@example.com", MailboxOutcome.ACCEPTED)),
            ("bob@example.com", result("bob@example.com", MailboxOutcome.ACCEPTED)),
        ),
        backend="local",
        checked_at=time.time() - 200 * DAY,
    )
    store.save(
        table(("carol@example.com", result("carol@example.com", MailboxOutcome.ACCEPTED))),
        backend="local",
    )
    assert (
        store.forget([" Alice@Example.COM", "mailto:nobody@example.com"]) == 1
    )  # read as the pipeline does
    assert store.stats()["verdicts"] == 2
    assert store.prune(90 * DAY) == 1  # bob, 200 days old
    stats = store.stats()
    assert (stats["verdicts"], stats["by_status"]) == (1, {"valid": 1})
    assert store.fetch(pa.array(["carol@example.com"])).num_rows == 1


def test_the_hashing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'keyed.sqlite'}"
    address = "alice@example.com"
    monkeypatch.setenv(PEPPER_VARIABLE, "a long secret")
    with VerdictStore(url) as first:
        first.save(table((address, result(address, MailboxOutcome.ACCEPTED))), backend="local")
    with VerdictStore(url) as second:  # another process with the same key
        assert second.fetch(pa.array([address])).num_rows == 1
    monkeypatch.setenv(PEPPER_VARIABLE, "another secret")
    with pytest.raises(VerdictStoreError, match=PEPPER_VARIABLE):
        VerdictStore(url)
    monkeypatch.delenv(PEPPER_VARIABLE)
    with pytest.raises(VerdictStoreError, match=PEPPER_VARIABLE):
        VerdictStore(url)
    # without a pepper, a store makes its own key, and every process sharing it uses it
    own = f"sqlite:///{tmp_path / 'own.sqlite'}"
    with VerdictStore(own) as first:
        first.save(table((address, result(address, MailboxOutcome.ACCEPTED))), backend="local")
    with VerdictStore(own) as second:
        assert second.fetch(pa.array([address])).num_rows == 1


def _write(url: str, offset: int, start: float, count: int) -> None:
    """One writer process: ``count`` addresses, half shared with the other writer, each saved
    in its own transaction with a time of its own."""
    with VerdictStore(url) as store:
        for i in range(count):
            address = f"user{(offset + i) % (2 * count)}@example.com"
            outcome = MailboxOutcome.ACCEPTED if offset == 0 else MailboxOutcome.NOT_FOUND
            store.save(
                table((address, result(address, outcome))),
                backend=f"w{offset}",
                checked_at=start + i,
            )


@pytest.mark.timeout(120)
def test_two_processes_on_one_postgresql_store_lose_no_verdict(
    new_pg_database: Callable[[], str],
) -> None:
    url = new_pg_database()
    VerdictStore(url).close()  # migrated once before the race (the race is the writes)
    count = 60
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_write, args=(url, offset, 1000.0 * (1 + n), count))
        for n, offset in enumerate((0, count // 2))
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(90)
        assert writer.exitcode == 0
    addresses = [f"user{i}@example.com" for i in range(2 * count)]
    with VerdictStore(url) as store:
        rows = {r[KEY]: r for r in store.fetch(pa.array(addresses)).to_pylist()}
    written = {f"user{i}@example.com" for i in range(count + count // 2)}
    assert set(rows) == written  # every address either writer saved
    for i in range(count // 2, count):  # both wrote these; the second writer's times are later
        assert rows[f"user{i}@example.com"]["status"] == "invalid", i  # the second writer's


def test_the_code_tables_cover_every_value_and_only_grow() -> None:
    from listhygiene.statuses import DnsOutcome, MailboxOutcome, Status
    from listhygiene.verdicts import codes

    # codes are written to databases: a value may be added at the end, never moved
    assert codes.STATUSES[:7] == (
        "valid",
        "invalid",
        "unknown",
        "risky",
        "disposable",
        "catchall",
        "role",
    )
    assert set(codes.STATUSES) == {s.value for s in Status}
    assert set(codes.REASONS) == {r.value for r in Reason}
    assert set(codes.DNS) == {d.value for d in DnsOutcome}
    assert set(codes.MAILBOX) == {m.value for m in MailboxOutcome}
    assert codes.REASONS[:3] == ("invalid_syntax", "no_mail_server", "disposable_domain")


# -- issue 16: a first fill as cheap as the store can make it, and still correct ----------------


def mixed(count: int, *, prefix: str = "user", gone: bool = False) -> pa.Table:
    """``count`` results over five domains, statuses mixed (``gone``: every mailbox deleted)."""
    outcomes = [MailboxOutcome.ACCEPTED, MailboxOutcome.NOT_FOUND, MailboxOutcome.FULL]
    pairs = []
    for i in range(count):
        address = f"{prefix}{i}@domain{i % 5}.test"
        outcome = MailboxOutcome.NOT_FOUND if gone else outcomes[i % len(outcomes)]
        pairs.append((address, result(address, outcome, is_role=i % 7 == 0)))
    return table(*pairs)


def stored_rows(store: VerdictStore) -> list[tuple[object, ...]]:
    """Every stored verdict as the database holds it, by key (without the previous status and
    the save that wrote it)."""
    import sqlalchemy as sa

    from listhygiene.verdicts.schema import verdicts

    columns = [c for c in verdicts.c if not c.name.startswith("previous_") and c.name != "revision"]
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(*columns).order_by(verdicts.c.key))]


def test_sqlite_connections_get_the_stores_pragmas(tmp_path: Path) -> None:
    from listhygiene.verdicts.store import SQLITE_CACHE_KIB

    with (
        VerdictStore(f"sqlite:///{tmp_path / 'verdicts.sqlite'}") as store,
        store.engine.connect() as conn,
    ):
        assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -SQLITE_CACHE_KIB
        assert conn.exec_driver_sql("PRAGMA temp_store").scalar() == 2  # MEMORY
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"  # the engine's


def test_a_first_fill_and_a_refill_keep_the_same_verdicts(
    url: str, new_pg_database: Callable[[], str], tmp_path: Path
) -> None:
    results = mixed(300)
    with VerdictStore(url, pepper="shared") as first:
        assert first.save(results, backend="local", checked_at=2000.0) == 300
        filled = stored_rows(first)
    other = (
        f"sqlite:///{tmp_path / 'other.sqlite'}" if url.startswith("sqlite") else new_pg_database()
    )
    with VerdictStore(other, pepper="shared") as refilled:
        refilled.save(mixed(300, gone=True), backend="older", checked_at=1000.0)
        assert refilled.save(results, backend="local", checked_at=2000.0) == 300
        assert stored_rows(refilled) == filled
        back = refilled.fetch(results.column(KEY))
        assert back.num_rows == 300
        assert sorted(back.column(KEY).to_pylist()) == sorted(results.column(KEY).to_pylist())
        import sqlalchemy as sa

        from listhygiene.verdicts.schema import verdicts

        with refilled.engine.connect() as conn:
            previous = conn.execute(
                sa.select(verdicts.c.previous_status, verdicts.c.previous_checked_at).distinct()
            ).all()
        assert previous == [(1, 1000.0)]  # "invalid", the verdict the refill replaced


def test_one_address_twice_in_one_save_is_kept_once(store: VerdictStore) -> None:
    address = "twice@example.com"
    saved = table(
        (address, result(address, MailboxOutcome.ACCEPTED)),
        (address, result(address, MailboxOutcome.ACCEPTED)),
    )
    assert store.save(saved, backend="local", checked_at=1000.0) == 2
    assert store.stats()["verdicts"] == 1
    assert store.fetch(pa.array([address])).num_rows == 1


def test_lookups_in_several_statements_and_an_empty_store(
    store: VerdictStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import listhygiene.verdicts.store as module

    asked = pa.array(["nobody@example.com", None, "", "user3@domain3.test"])
    empty = store.fetch(asked)
    assert empty.num_rows == 0
    monkeypatch.setattr(module, "LOOKUP_BATCH", 7)
    results = mixed(40)
    store.save(results, backend="local", checked_at=1000.0)
    found = store.fetch(pa.concat_arrays([results.column(KEY).combine_chunks(), asked]))
    assert found.schema == empty.schema
    assert found.num_rows == 40
    by_key = {r[KEY]: r for r in found.to_pylist()}
    for row in results.to_pylist():
        back = by_key[row[KEY]]
        assert {k: back[k] for k in row} == row


def test_the_key_is_the_documented_keyed_hash(tmp_path: Path) -> None:
    import hashlib

    with VerdictStore(f"sqlite:///{tmp_path / 'v.sqlite'}", pepper="a long secret") as store:
        key = hashlib.sha256(b"a long secret").digest()
        expected = hashlib.blake2b("jürgen@example.com".encode(), key=key, digest_size=16)
        assert store.hashes(["jürgen@example.com"]) == [expected.hexdigest()]


def _save_many(url: str, checked_at: float, gone: bool) -> None:
    """One writer process: the same 1,200 addresses as the other writer, in four saves of 300,
    in the other order (``gone``: every mailbox deleted)."""
    results = mixed(1200, gone=gone)
    order = range(900, -1, -300) if gone else range(0, 1200, 300)
    with VerdictStore(url, pepper="shared") as store:
        for start in order:
            store.save(results.slice(start, 300), backend="w", checked_at=checked_at)


@pytest.mark.timeout(120)
def test_two_processes_saving_big_batches_at_once_keep_the_newer_verdicts(url: str) -> None:
    VerdictStore(url, pepper="shared").close()
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_save_many, args=(url, 2000.0, True)),  # newer
        context.Process(target=_save_many, args=(url, 1000.0, False)),  # older
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(100)
        assert writer.exitcode == 0
    with VerdictStore(url, pepper="shared") as store:
        found = store.fetch(mixed(1200).column(KEY))
    assert found.num_rows == 1200
    assert set(found.column("status").to_pylist()) == {"invalid"}  # the newer writer's
    assert set(found.column("checked_at").to_pylist()) == {2000.0}


def test_a_runs_writes_go_on_a_thread_and_their_errors_come_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from listhygiene.pipeline.verdict_memory import RunVerdicts, log

    # an earlier test in the same process may have configured logging (Airflow's
    # dictConfig disables existing loggers): the log must reach caplog whatever ran before
    for logger in (log, log.parent):
        monkeypatch.setattr(logger, "disabled", False)
        monkeypatch.setattr(logger, "propagate", True)
    caplog.set_level(logging.ERROR, logger=log.name)

    url = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    memory = RunVerdicts(VerdictStore(url), Freshness.of(None), fresh=False, owned=True)
    memory.save(mixed(30), backend="local")
    memory.save(mixed(30, prefix="other"), backend="local")
    memory.close()  # waits for the write in flight
    with VerdictStore(url) as store:
        assert store.stats()["verdicts"] == 60
    # a write that fails surfaces at the next write, at flush (the report), and at close a log
    broken = RunVerdicts(VerdictStore(url), Freshness.of(None), fresh=False, owned=True)
    with broken.store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE verdicts")
    broken.save(mixed(3), backend="local")  # returns: the write runs on the writer thread
    with pytest.raises(VerdictStoreError, match="no such table: verdicts"):
        broken.save(mixed(3, prefix="next"), backend="local")
    broken.save(mixed(3, prefix="again"), backend="local")
    with pytest.raises(VerdictStoreError, match="no such table: verdicts"):
        broken.flush()
    broken.save(mixed(3, prefix="last"), backend="local")
    broken.close()
    assert "keeping the last verdicts" in caplog.text


def test_disposable_host_sightings_are_kept_once(store: VerdictStore) -> None:
    assert store.disposable_host_sightings() == []
    pairs = [("mx.trash.example", "a.example"), ("mx.trash.example", "b.example")]
    assert store.keep_disposable_host_sightings(pairs + pairs[:1], seen_at=1.0) == 2
    store.keep_disposable_host_sightings(pairs[1:], seen_at=2.0)
    assert sorted(store.disposable_host_sightings()) == pairs

"""The column copy of a SQLite verdict store (``verdicts/column_copy.py``; issue 28): lookups
through it give what SQL gives, rows saved since it was made win, and a prune or forget retires
it. Every test runs on a real SQLite file."""

from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from listhygiene.results import KEY
from listhygiene.verdicts import VerdictStore
from listhygiene.verdicts.column_copy import ColumnCopy
from tests.verdicts.test_store import mixed


def by_key(found: pa.Table) -> dict[str, dict[str, object]]:
    return {row[KEY]: row for row in found.to_pylist()}


def copy_path(store: VerdictStore) -> Path:
    path = store._copy_path
    assert path is not None
    return path


def looked_up_in_sql(url: str, addresses: pa.Array) -> dict[str, dict[str, object]]:
    """What a store without a copy answers (a fresh instance, the copy's file moved away)."""
    with VerdictStore(url) as plain:
        path = copy_path(plain)
        moved = path.with_name("moved-away")
        if path.exists():
            path.replace(moved)
        try:
            assert plain._current_copy(plain.engine.connect()) is None
            return by_key(plain.fetch(addresses))
        finally:
            if moved.exists():
                moved.replace(path)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'verdicts.sqlite'}"


def test_a_lookup_through_the_copy_gives_what_sql_gives(url: str) -> None:
    first, later = mixed(300), mixed(120, prefix="later", gone=True)
    asked = pa.concat_arrays(
        [
            first.column(KEY).combine_chunks(),
            later.column(KEY).combine_chunks(),
            pa.array(["nobody@example.com", "", None]),
        ]
    )
    with VerdictStore(url) as store:
        store.save(first, backend="local", checked_at=1000.0)
        store.refresh_copy(expected=300)  # no copy yet, a store not bigger than the lookup
        assert copy_path(store).exists()
        # saved after the copy was made: found through the rows saved since
        store.save(later, backend="local", checked_at=2000.0)
        store.save(mixed(30, gone=True), backend="local", checked_at=3000.0)
        through_copy = store.fetch(asked)
        assert store._current_copy(store.engine.connect()) is not None
    assert through_copy.num_rows == 420
    expected = looked_up_in_sql(url, asked)
    assert by_key(through_copy) == expected
    # a newer verdict saved since the copy is the one given
    assert expected["user1@domain1.test"]["status"] == "invalid"


def test_a_run_brings_the_copy_up_to_date_after_its_saves(url: str) -> None:
    with VerdictStore(url) as store:
        store.save(mixed(50), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=50)
        made = ColumnCopy.open(copy_path(store))
        assert made is not None
        assert made.table.num_rows == 50
        store.save(mixed(20, prefix="new"), backend="local", checked_at=2000.0)
        store.refresh_copy()  # after a run's saves: merged, not made again
        merged = ColumnCopy.open(copy_path(store))
    assert merged is not None
    assert merged.table.num_rows == 70
    assert merged.generation == made.generation
    assert merged.revision == made.revision + 1
    hi = merged.hi
    assert (hi[1:] >= hi[:-1]).all()  # still in key order


def test_no_copy_is_made_for_a_lookup_much_smaller_than_the_store(url: str) -> None:
    with VerdictStore(url) as store:
        store.save(mixed(100), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=10)  # 100 > 4 x 10: looking 10 keys up in SQL is cheaper
        assert not copy_path(store).exists()
        store.refresh_copy()  # nor after a run's saves, without one
        assert not copy_path(store).exists()


@pytest.mark.parametrize("how", ["forget", "prune"])
def test_forget_and_prune_retire_the_copy(url: str, how: str) -> None:
    # the copy still holds what they deleted: its file goes (forget leaves nothing on disk),
    # and a copy of before, written back as another process might, is never used
    results = mixed(40)
    asked = results.column(KEY).combine_chunks()
    with VerdictStore(url) as store:
        store.save(results, backend="local", checked_at=1000.0)
        store.refresh_copy(expected=40)
        assert store.fetch(asked).num_rows == 40
        before = copy_path(store).read_bytes()
        if how == "forget":
            assert store.forget(["user3@domain3.test"]) == 1
        else:
            assert store.prune(older_than=60.0) == 40
        assert not copy_path(store).exists()
    with VerdictStore(url) as again:  # another process, a copy of before written back
        copy_path(again).write_bytes(before)
        found = by_key(again.fetch(asked))
        assert "user3@domain3.test" not in found
        assert len(found) == (39 if how == "forget" else 0)
        if how == "forget":
            again.refresh_copy(expected=39)  # made again, without the forgotten address
            remade = ColumnCopy.open(copy_path(again))
            assert remade is not None
            assert remade.table.num_rows == 39


def test_a_copy_of_another_store_at_the_same_path_is_not_used(url: str, tmp_path: Path) -> None:
    with VerdictStore(url) as store:
        store.save(mixed(30), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=30)
        kept = copy_path(store).read_bytes()
    (tmp_path / "verdicts.sqlite").unlink()
    with VerdictStore(url) as new:
        copy_path(new).write_bytes(kept)  # left over from the store that was deleted
        assert new.fetch(mixed(30).column(KEY).combine_chunks()).num_rows == 0
        new.save(mixed(5), backend="local", checked_at=1000.0)
        assert new.fetch(mixed(30).column(KEY).combine_chunks()).num_rows == 5


def test_verdicts_kept_before_revisions_are_in_the_copy(url: str) -> None:
    # rows of a store migrated to 0004 have revision 0, and no revision setting exists yet
    results = mixed(25)
    with VerdictStore(url) as store:
        store.save(results, backend="local", checked_at=1000.0)
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE verdicts SET revision = 0"))
            conn.execute(sa.text("DELETE FROM verdict_settings WHERE name = 'revision'"))
        store.refresh_copy(expected=25)
        made = ColumnCopy.open(copy_path(store))
        assert made is not None
        assert made.table.num_rows == 25
        assert store.fetch(results.column(KEY).combine_chunks()).num_rows == 25


def test_a_store_above_the_limit_has_no_copy(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import listhygiene.verdicts.store as module

    with VerdictStore(url) as store:
        store.save(mixed(30), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=30)
        assert copy_path(store).exists()
        monkeypatch.setattr(module, "COPY_LIMIT", 20)
        store.refresh_copy()
        assert not copy_path(store).exists()
        assert store.fetch(mixed(30).column(KEY).combine_chunks()).num_rows == 30


def test_a_broken_copy_is_not_used(url: str, caplog: pytest.LogCaptureFixture) -> None:
    results = mixed(30)
    with VerdictStore(url) as store:
        store.save(results, backend="local", checked_at=1000.0)
        copy_path(store).write_bytes(b"not an arrow file")
    with VerdictStore(url) as again:
        assert again.fetch(results.column(KEY).combine_chunks()).num_rows == 30
    assert "column copy" in caplog.text


def test_a_few_rows_saved_since_are_read_not_merged(url: str) -> None:
    # a night's new verdicts (here 5 % of the copy) are cheaper to read through the revision's
    # index than to merge: the copy stays as it was, and lookups still find them
    with VerdictStore(url) as store:
        store.save(mixed(100), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=100)
        made = ColumnCopy.open(copy_path(store))
        assert made is not None
        store.save(mixed(5, prefix="new"), backend="local", checked_at=2000.0)
        store.refresh_copy()
        kept = ColumnCopy.open(copy_path(store))
        assert kept is not None
        assert kept.revision == made.revision
        asked = pa.concat_arrays(
            [
                mixed(100).column(KEY).combine_chunks(),
                mixed(5, prefix="new").column(KEY).combine_chunks(),
            ]
        )
        assert store.fetch(asked).num_rows == 105


def test_a_runs_lookups_read_each_domain_once_until_a_save(url: str) -> None:
    # 100,000 addresses a lookup ask for the same domains: read once, asked again after a save
    results = mixed(50)
    asked = results.column(KEY).combine_chunks()
    queries: list[str] = []
    with VerdictStore(url) as store:
        store.save(results, backend="local", checked_at=1000.0)
        sa.event.listen(
            store.engine,
            "before_cursor_execute",
            lambda _c, _cur, statement, *_rest: queries.append(statement),
        )

        def domain_reads() -> int:
            return sum("FROM verdict_domains" in q for q in queries)

        assert store.fetch(asked.slice(0, 25)).num_rows == 25
        first = domain_reads()
        assert first >= 1
        again = store.fetch(asked.slice(25))
        assert again.num_rows == 25
        assert domain_reads() == first  # the same five domains: not read again
        assert again.column("domain").to_pylist() == [
            a.split("@")[1] for a in again.column(KEY).to_pylist()
        ]
        store.save(mixed(5, prefix="later"), backend="local", checked_at=2000.0)
        store.fetch(asked.slice(0, 5))
        assert domain_reads() > first


def test_a_copy_of_the_whole_store_is_written_a_part_at_a_time(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the table is stored in key order, so each part read goes to the file before the next is
    # read: making a copy holds one part, not the copy (~55 bytes a verdict of a 2,500,000
    # verdict store, twice over while it was sorted)
    import listhygiene.verdicts.store as store_module

    monkeypatch.setattr(store_module, "_ROWS_AT_ONCE", 40)
    sizes: list[int] = []
    parts = store_module.VerdictStore._compact_parts

    def watched(self: VerdictStore, *args: object, **kwargs: object) -> object:
        for part in parts(self, *args, **kwargs):  # type: ignore[arg-type]
            written = list(copy_path(self).parent.glob("*.columns.*.tmp"))
            sizes.append(written[0].stat().st_size if written else -1)
            yield part

    monkeypatch.setattr(store_module.VerdictStore, "_compact_parts", watched)
    asked = mixed(200).column(KEY).combine_chunks()
    with VerdictStore(url) as store:
        store.save(mixed(200), backend="local", checked_at=1000.0)
        store.refresh_copy(expected=200)
        made = ColumnCopy.open(copy_path(store))
        through_copy = by_key(store.fetch(asked))
    assert made is not None
    assert made.table.num_rows == 200
    assert len(sizes) == 5  # 40 rows a part
    assert sizes[1] < sizes[2] < sizes[3] < sizes[4]  # the file grew as the parts came
    assert through_copy == looked_up_in_sql(url, asked)


def test_parts_out_of_key_order_or_a_store_changed_meanwhile_write_no_copy(
    tmp_path: Path,
) -> None:
    keys = [hex_key(i) for i in range(30)]
    whole = ColumnCopy.from_rows(copy_columns(keys), revision=1, generation="g")
    first, second = whole.table.slice(0, 15), whole.table.slice(15)
    path = tmp_path / "verdicts.sqlite.columns"
    in_order = [ColumnCopy(first, 1, ""), ColumnCopy(second, 1, "")]
    with pytest.raises(ValueError, match="key order"):
        ColumnCopy.write_parts(
            path, reversed(in_order), revision=1, generation="g", unchanged=lambda: True
        )
    assert not path.exists()
    gone = ColumnCopy.write_parts(
        path, iter(in_order), revision=1, generation="g", unchanged=lambda: False
    )
    assert gone is None
    assert not path.exists()
    made = ColumnCopy.write_parts(
        path, iter(in_order), revision=1, generation="g", unchanged=lambda: True
    )
    assert made is not None
    assert made.table.equals(whole.table.replace_schema_metadata(None))
    assert list(tmp_path.iterdir()) == [path]  # no file of this process left behind


def hex_key(i: int) -> str:
    import hashlib

    return hashlib.blake2b(str(i).encode(), digest_size=16).hexdigest()


def copy_columns(keys: list[str]) -> dict[str, pa.Array]:
    """``from_rows``' columns for ``keys``, every verdict the same."""
    from listhygiene.verdicts.column_copy import _TYPES

    n = len(keys)
    return {
        "key": pa.array(keys, pa.string()),
        **{name: pa.array([1.0 if kind == "float64" else 1] * n) for name, kind in _TYPES.items()},
    }


def test_merging_the_rows_saved_since_gives_them_in_key_order_part_by_part() -> None:
    # the merged copy is written a part at a time (never held whole): every part in key order
    # and after the one before, a row saved since in place of the copy's own, at any boundary
    import numpy as np

    old_keys = sorted(hex_key(i) for i in range(100))
    old = ColumnCopy.from_rows(copy_columns(old_keys), revision=1, generation="g")
    replacing = old_keys[::7]  # 0, 7, 14, ...: each a part's first row with parts of 7
    fresh = [hex_key(i) for i in range(100, 130)]
    columns = copy_columns(replacing + fresh)
    columns["status"] = pa.array([2] * len(replacing + fresh))
    newer = ColumnCopy.from_rows(columns, revision=2, generation="")
    parts = list(old.merged_parts(newer, rows=7))
    assert len(parts) == 15
    keys = [(int(h), int(lo)) for part in parts for h, lo in zip(part.hi, part.lo, strict=True)]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys)) == 130
    merged = pa.concat_tables([part.table for part in parts])
    status = dict(zip(keys, merged.column("status").to_pylist(), strict=True))
    for key in replacing + fresh:
        raw = np.frombuffer(bytes.fromhex(key), dtype=">u8")
        assert status[(int(raw[0]), int(raw[1]))] == 2
    assert sum(s == 1 for s in status.values()) == 100 - len(replacing)
    assert all(part.revision == 2 and part.generation == "g" for part in parts)


def test_keys_are_matched_with_their_rows_in_the_copys_order() -> None:
    # a lookup takes its rows in the copy's order, whatever order the addresses came in; a
    # key the copy lacks is not matched, and a row saved since stands over the copy's own
    import numpy as np

    from listhygiene.verdicts.column_copy import digests_as_keys, look_up

    stored = sorted(hex_key(i) for i in range(50))
    copy = ColumnCopy.from_rows(copy_columns(stored), revision=1, generation="g")
    asked = [hex_key(i) for i in (40, 3, 77, 12, 29, 0)]  # 77 is not stored
    hi, lo = digests_as_keys(b"".join(bytes.fromhex(k) for k in asked))
    keys, rows = copy.matches(hi, lo)
    assert list(rows) == sorted(rows)
    assert sorted(asked[k] for k in keys) == sorted(k for k in asked if k != hex_key(77))
    assert [stored[r] for r in rows] == [asked[k] for k in keys]
    assert list(copy.find(hi, lo) >= 0) == [k != hex_key(77) for k in asked]

    columns = copy_columns([hex_key(12)])
    columns["status"] = pa.array([2])
    since = ColumnCopy.from_rows(columns, revision=2, generation="g")
    at, found = look_up(copy, since, hi, lo)
    status = dict(zip(np.asarray(at).tolist(), found["status"].to_pylist(), strict=True))
    assert status == {asked.index(k): 1 for k in asked if k not in (hex_key(77), hex_key(12))} | {
        asked.index(hex_key(12)): 2
    }

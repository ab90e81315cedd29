"""Keys hashed one batch ahead in a child process (``verdicts/hashing.py``): the same keys as the
store's own, the next batch sent before this one is given, and a child that fails costs
nothing but the time."""

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from listhygiene.verdicts import VerdictStore, hashing
from listhygiene.verdicts.hashing import AHEAD_MIN, DIGEST, digest_bytes, hashed_ahead

KEY = bytes(range(32))


def batches(count: int, size: int) -> list[pa.Array]:
    # sliced out of one array: a batch's offsets do not start at 0
    whole = pa.array([f"user{i}@domain{i % 97}.example" for i in range(count * size)])
    return [whole.slice(i * size, size) for i in range(count)]


def expected(batch: pa.Array) -> bytes:
    keyed = hashlib.blake2b(key=KEY, digest_size=DIGEST)
    return b"".join(_copy_update(keyed, address.encode()).digest() for address in batch.to_pylist())


def _copy_update(keyed: "hashlib.blake2b", data: bytes) -> "hashlib.blake2b":
    one = keyed.copy()
    one.update(data)
    return one


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[hashing._Child]:
    """The hashing children started, as they are."""
    started: list[hashing._Child] = []
    start = hashing._Child.__init__

    def recording(child: hashing._Child, key: bytes) -> None:
        start(child, key)
        started.append(child)

    monkeypatch.setattr(hashing._Child, "__init__", recording)
    return started


def test_the_childs_keys_are_the_stores_own(tmp_path: Path) -> None:
    with VerdictStore(f"sqlite:///{tmp_path / 'v.sqlite'}", pepper="pepper") as store:
        given = batches(3, AHEAD_MIN // 2)
        hexes = []
        for _, keys in hashed_ahead(store._key, given, total=AHEAD_MIN * 3 // 2):
            hexes += [keys[i : i + DIGEST].hex() for i in range(0, len(keys), DIGEST)]
        assert hexes == store.hashes(pa.concat_arrays(given).to_pylist())


def test_the_next_batch_is_sent_to_the_child_before_this_one_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[int] = []
    send = hashing._Child.send

    def recording(child: hashing._Child, batch: pa.Array) -> bool:
        sent.append(len(sent))
        return send(child, batch)

    monkeypatch.setattr(hashing._Child, "send", recording)
    given = batches(3, 1000)
    for index, (batch, keys) in enumerate(hashed_ahead(KEY, given, total=AHEAD_MIN)):
        assert batch is given[index]
        assert keys == expected(batch)
        # while the caller works on batch ``index``, batch ``index + 1`` is being hashed
        assert len(sent) == min(index + 2, len(given))


def test_a_small_run_hashes_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_child(*args: object) -> None:
        raise AssertionError("a child was started")

    monkeypatch.setattr(hashing._Child, "__init__", no_child)
    given = batches(2, 10)
    assert [k for _, k in hashed_ahead(KEY, given, total=AHEAD_MIN - 1)] == [
        expected(b) for b in given
    ]


def test_a_child_that_dies_leaves_the_keys_to_this_process(
    children: list[hashing._Child], caplog: pytest.LogCaptureFixture
) -> None:
    given = batches(4, 1000)
    found: Iterator[tuple[pa.Array, bytes]] = hashed_ahead(KEY, given, total=AHEAD_MIN)
    first_batch, first_keys = next(found)
    assert first_keys == expected(first_batch)
    (child,) = children
    assert child.process is not None
    os.kill(child.process.pid, signal.SIGKILL)
    child.process.wait()
    rest = list(found)
    assert [k for _, k in rest] == [expected(b) for b in given[1:]]
    assert "the hashing child failed" in caplog.text
    assert child.process.poll() is not None


def test_digest_bytes_are_the_stores_hashes(tmp_path: Path) -> None:
    with VerdictStore(f"sqlite:///{tmp_path / 'v.sqlite'}", pepper="pepper") as store:
        addresses = pa.array(["ana@acme.test", "ßtraße@ünï.test", "b@b.test"])
        keys = digest_bytes(store._keyed, addresses)
        hexes = [keys[i : i + DIGEST].hex() for i in range(0, len(keys), DIGEST)]
        assert hexes == store.hashes(addresses.to_pylist())


def test_a_store_gives_no_keys_while_empty_and_its_own_once_it_is_not(tmp_path: Path) -> None:
    from listhygiene.statuses import MailboxOutcome
    from tests.verdicts.test_store import result, table

    with VerdictStore(f"sqlite:///{tmp_path / 'v.sqlite'}", pepper="pepper") as store:
        given = batches(2, 5)
        # a first cleaning looks nothing up, so it hashes nothing
        assert [k for _, k in store.keyed_batches(given, total=10)] == [None, None]
        store.save(
            table(("a@acme.com", result("a@acme.com", MailboxOutcome.ACCEPTED))), backend="local"
        )
        keyed = list(store.keyed_batches(given, total=10))
        assert [b for b, _ in keyed] == given
        assert [k for _, k in keyed] == [
            digest_bytes(hashlib.blake2b(key=store._key, digest_size=DIGEST), b) for b in given
        ]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "sqlite with a column copy"])
def test_a_lookup_with_the_keys_finds_what_one_without_them_finds(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    from listhygiene.statuses import MailboxOutcome
    from tests.verdicts.test_store import result, table

    url = (
        request.getfixturevalue("new_pg_database")()
        if backend == "postgresql"
        else f"sqlite:///{tmp_path / 'v.sqlite'}"
    )
    with VerdictStore(url, pepper="pepper") as store:
        saved = [f"{name}@acme.com" for name in ("a", "b", "c")]
        store.save(
            table(*((a, result(a, MailboxOutcome.ACCEPTED)) for a in saved)), backend="local"
        )
        if backend.endswith("copy"):
            store.refresh_copy(expected=len(saved))
            assert store._current_copy(store.engine.connect()) is not None
        asked = pa.array(["c@acme.com", "nobody@acme.com", "a@acme.com"])
        keys = digest_bytes(store._keyed, asked)
        with_keys = store.fetch(asked, keys=keys).sort_by("_address").to_pylist()
        assert with_keys == store.fetch(asked).sort_by("_address").to_pylist()
        assert [row["_address"] for row in with_keys] == ["a@acme.com", "c@acme.com"]


def test_a_run_stopped_midway_leaves_no_child_behind(children: list[hashing._Child]) -> None:
    found = hashed_ahead(KEY, batches(4, 50_000), total=AHEAD_MIN)
    next(found)  # the second batch is in the child's hands, its answer unread
    found.close()
    (child,) = children
    assert child.process is not None
    assert child.process.poll() is not None


@pytest.mark.parametrize("executable", ["", None])
def test_without_a_python_to_start_the_keys_are_hashed_here(
    monkeypatch: pytest.MonkeyPatch, executable: str | None
) -> None:
    # what sys.executable is when Python cannot tell (an embedded interpreter)
    monkeypatch.setattr(hashing.sys, "executable", executable)
    given = batches(3, 100)
    assert [k for _, k in hashed_ahead(KEY, given, total=AHEAD_MIN)] == [expected(b) for b in given]


def test_ctrl_c_is_left_to_the_run(
    children: list[hashing._Child], caplog: pytest.LogCaptureFixture
) -> None:
    # a terminal's Ctrl-C reaches the whole process group: the run decides, the child goes on
    # until told (no traceback of its own on the user's terminal)
    given = batches(3, 1000)
    found = hashed_ahead(KEY, given, total=AHEAD_MIN)
    next(found)
    (child,) = children
    assert child.process is not None
    os.kill(child.process.pid, signal.SIGINT)
    assert [k for _, k in found] == [expected(b) for b in given[1:]]
    assert "the hashing child failed" not in caplog.text

"""read_ahead: every piece in order, whatever it is, reading's errors in their place, and a
thread that stops with its caller (the readers and the quality checks share it)."""

import threading
from collections.abc import Generator

import pytest

from listhygiene.pipeline.sources.batches import read_ahead


def test_every_piece_comes_through_in_order_none_and_falsy_ones_too() -> None:
    def pieces() -> Generator[object, None, None]:
        yield from (None, 0, "", [], "last")

    assert list(read_ahead(pieces())) == [None, 0, "", [], "last"]


def test_what_reading_raises_is_raised_after_the_pieces_before_it() -> None:
    def pieces() -> Generator[int, None, None]:
        yield 1
        yield 2
        raise ValueError("broken record")

    ahead = read_ahead(pieces())
    assert [next(ahead), next(ahead)] == [1, 2]
    with pytest.raises(ValueError, match="broken record"):
        next(ahead)


def test_a_caller_that_stops_early_stops_the_thread_and_closes_the_source() -> None:
    closed = threading.Event()

    def pieces() -> Generator[int, None, None]:
        try:
            n = 0
            while True:
                n += 1
                yield n
        finally:
            closed.set()

    ahead = read_ahead(pieces())
    assert next(ahead) == 1
    ahead.close()
    assert closed.is_set()
    assert not any(t.name == "listhygiene-read-ahead" for t in threading.enumerate())

"""The store's keys of many addresses, hashed one batch ahead in a child process.

A key is the keyed BLAKE2b of a normalised address (``store.py``). Python hashes ~2 million short
strings a second and holds the interpreter lock while it does: a nightly rerun of 680,000
addresses spent ~0.4 s of its main thread there, between lookups that could not start without
the keys. :func:`hashed_ahead` gives each batch with its keys, hashing the next batch in a child
process meanwhile, on the other core (docs/pipeline.md, "Nightly reruns").

The child is ``python -I -S`` running :data:`_CHILD`, the standard library only (it starts in
~20 ms): the hashing key reaches it through its stdin, never its command line or environment.
Each request is a batch's Arrow offsets and bytes, each answer 16 bytes per address. Should the
child fail, the batch is hashed here, as it would have been without one.
"""

import contextlib
import hashlib
import logging
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AHEAD_MIN", "DIGEST", "digest_bytes", "hashed_ahead"]

log = logging.getLogger(__name__)

#: Fewer addresses than this are hashed in this process: a child would save less than it costs.
AHEAD_MIN = 200_000
#: The digest size, bytes (128 bits: ``store.py``).
DIGEST = 16

_CHILD = r"""
import hashlib, signal, struct, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops us
read, write = sys.stdin.buffer.read, sys.stdout.buffer.write
def exactly(n):
    data = read(n)
    if len(data) != n:
        raise SystemExit(0)
    return data
size, digest = struct.unpack("<II", exactly(8))
keyed = hashlib.blake2b(key=exactly(size), digest_size=digest)
copy = keyed.copy
while True:
    count, length = struct.unpack("<II", exactly(8))
    offsets = memoryview(exactly(4 * (count + 1))).cast("i")
    data = exactly(length)
    out = bytearray()
    for i in range(count):
        one = copy()
        one.update(data[offsets[i]:offsets[i + 1]])
        out += one.digest()
    write(out)
    sys.stdout.buffer.flush()
"""


def digest_bytes(keyed: "hashlib.blake2b", addresses: "pa.Array") -> bytes:
    """The keys of ``addresses`` (Arrow strings, UTF-8: their bytes are hashed as they are),
    16 bytes each, end to end; ``keyed`` is the key's BLAKE2b state, copied per address."""
    import pyarrow as pa

    copy = keyed.copy
    out = bytearray()
    for encoded in addresses.cast(pa.binary()).to_pylist():
        one = copy()
        one.update(encoded)
        out += one.digest()
    return bytes(out)


def hashed_ahead(
    key: bytes, batches: Iterable["pa.Array"], *, total: int
) -> Iterator[tuple["pa.Array", bytes]]:
    """Each of ``batches`` (distinct, non-empty, non-null strings) with its keys (as
    :func:`digest_bytes`), the next batch hashed in a child process while the caller works on
    this one; in this process when ``total`` (the addresses of all the batches) is below
    :data:`AHEAD_MIN`."""
    keyed = hashlib.blake2b(key=key, digest_size=DIGEST)
    if total < AHEAD_MIN:
        for batch in batches:
            yield batch, digest_bytes(keyed, batch)
        return
    child = _Child(key)
    try:
        waiting: tuple[pa.Array, bool] | None = None  # sent to the child: answer not read
        for batch in batches:
            sent = child.send(batch)
            if waiting is not None:
                yield _answer(child, keyed, *waiting)
            waiting = (batch, sent)
        if waiting is not None:
            yield _answer(child, keyed, *waiting)
    finally:
        child.close()


def _answer(
    child: "_Child", keyed: "hashlib.blake2b", batch: "pa.Array", sent: bool
) -> tuple["pa.Array", bytes]:
    keys = child.receive(len(batch)) if sent else None
    return batch, keys if keys is not None else digest_bytes(keyed, batch)


class _Child:
    """The hashing process: requests written by a thread of their own (a batch is bigger than a
    pipe holds, and the child reads it only once done with the one before), answers read here
    in order. Once it fails, nothing more is sent to it."""

    def __init__(self, key: bytes) -> None:
        self.failed = False
        self._unread = 0  # batches sent whose answer was not read
        self.process: subprocess.Popen[bytes] | None = None
        if not sys.executable:  # an embedded interpreter: no Python to start
            self.failed = True
            return
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        except (OSError, ValueError) as exc:
            log.warning("hashing in this process: no child process (%s)", exc)
            self.failed = True
            return
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write, name="verdict-keys", daemon=True)
        self._writer.start()
        self._requests.put(struct.pack("<II", len(key), DIGEST) + key)

    def send(self, batch: "pa.Array") -> bool:
        """Queue ``batch`` for hashing; False when the child is gone (hash it here)."""
        import numpy as np
        import pyarrow as pa

        if self.failed:
            return False
        binary = batch.cast(pa.binary())
        offsets = np.frombuffer(binary.buffers()[1], np.int32)[
            binary.offset : binary.offset + len(binary) + 1
        ]
        start, end = int(offsets[0]), int(offsets[-1])
        values = binary.buffers()[2]  # None when every address is empty
        data = memoryview(values)[start:end] if values is not None else b""
        head = struct.pack("<II", len(binary), end - start)
        self._requests.put(head + (offsets - start).astype("<i4").tobytes() + bytes(data))
        self._unread += 1
        return True

    def receive(self, count: int) -> bytes | None:
        """The keys of the oldest batch sent, or None when the child failed."""
        if self.failed or self.process is None or self.process.stdout is None:
            return None
        self._unread -= 1
        answer = self.process.stdout.read(DIGEST * count)
        if len(answer) != DIGEST * count:
            self._fail("it stopped answering")
            return None
        return answer

    def close(self) -> None:
        if self.process is None:
            return
        self._requests.put(None)
        if self._unread:  # a run stopped midway: nobody reads the answers it is writing
            self.process.kill()
        self._writer.join(timeout=5)
        try:
            self.process.wait(timeout=5)  # it ends at the end of its input
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def _write(self) -> None:
        assert self.process is not None
        stdin = self.process.stdin
        assert stdin is not None
        while (request := self._requests.get()) is not None:
            if self.failed:
                continue
            try:
                stdin.write(request)
                stdin.flush()
            except OSError as exc:  # the child is gone: its batches are hashed here
                self._fail(str(exc))
        with contextlib.suppress(OSError):
            stdin.close()  # the child ends at the end of its input

    def _fail(self, why: str) -> None:
        if not self.failed:
            log.warning("hashing in this process: the hashing child failed (%s)", why)
        self.failed = True

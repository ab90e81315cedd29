"""Form A uploads read in a child process, with a memory and CPU cap, a few at a time.

Reading a workbook can cost far more memory than its 20 MiB (its reader holds every shared string),
and Python rarely gives memory back to the system. So the service never reads an upload itself:
a child process forked from a small forkserver (its imports preloaded) reads it within
``upload.UPLOAD_LIMITS``, under ``RLIMIT_AS`` (:data:`PARSE_MEMORY` beyond what it starts with)
and ``RLIMIT_CPU`` (:data:`PARSE_CPU_SECONDS`), and writes the rows to an Arrow IPC file in the
upload's temporary folder; the request then reads that file a batch at a time
(:class:`upload.StoredRows`). A file that exhausts the child's memory or CPU kills only the child,
and is answered 413 ``4130``; the child's memory goes back to the system when it exits.

The forkserver (and multiprocessing's resource tracker beside it) is started by the first upload
of a burst and stopped :data:`FORKSERVER_LINGER` seconds after the last one ended
(:class:`_Forkserver`): with its imports it holds more memory than any one upload costs, and a
server at rest does not hold it. So an upload's memory goes back when it is answered, the parse
child's and the forkserver's; an upload after a rest pays the forkserver's start (its imports)
again.

The server processes on one machine that share a store read at most :data:`MAX_PARSES` uploads at
once, and :data:`MAX_PARSES_PER_KEY` of one key, whatever ``--workers`` says; past either an
upload is answered 429 ``4290`` with ``Retry-After``. The slots are lock files (``flock``) in a
folder of the system's temporary directory named after the store (:class:`ParseSlots`): a
process holds a slot while it reads, and the kernel frees it when the process ends, however it
ends. Several machines on one PostgreSQL store each have their own (memory is per machine).
"""

import asyncio
import contextlib
import ctypes
import fcntl
import hashlib
import json
import multiprocessing
import os
import resource
import tempfile
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from multiprocessing import forkserver, resource_tracker
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from listhygiene.errors import FormABadRequest, FormAFileTooLarge, FormARateLimited
from listhygiene.service.upload import ParsedFile, ReceivedFile, StoredRows, parse_file

__all__ = [
    "FORKSERVER_LINGER",
    "MAX_PARSES",
    "MAX_PARSES_PER_KEY",
    "PARSE_CPU_SECONDS",
    "PARSE_MEMORY",
    "ParseSlots",
    "give_back_memory",
    "parse_in_child",
    "parse_slot",
]

#: Address space a parse may add to its child process.
PARSE_MEMORY = 1 << 30
#: CPU seconds a parse may take.
PARSE_CPU_SECONDS = 120
#: Uploads the server processes of one machine read at once, and of one key.
MAX_PARSES = 4
MAX_PARSES_PER_KEY = 1
#: Seconds a client is told to wait when the limits above are reached.
RETRY_AFTER = 5
#: Seconds the forkserver is kept after the last parse ended, for the next upload of a burst.
FORKSERVER_LINGER = 5.0


class ParseSlots:
    """The parse slots shared by every process that uses ``folder``: :data:`MAX_PARSES` in all
    and :data:`MAX_PARSES_PER_KEY` for each key, each a lock file taken with ``flock``."""

    def __init__(
        self, folder: Path, *, total: int = MAX_PARSES, per_key: int = MAX_PARSES_PER_KEY
    ) -> None:
        self.folder = folder
        self.total = total
        self.per_key = per_key

    @classmethod
    def for_store(cls, url: object) -> "ParseSlots":
        """The slots of the processes on this machine that use the store at ``url``."""
        digest = hashlib.sha256(str(url).encode()).hexdigest()[:16]
        return cls(Path(tempfile.gettempdir()) / f"listhygiene-uploads-{digest}")

    @contextlib.contextmanager
    def hold(self, key_id: str, file_name: str) -> Iterator[None]:
        """Hold one of the key's slots and one of the machine's, or answer 429 ``4290``."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = hashlib.sha256(key_id.encode()).hexdigest()[:24]
        own = self._take(f"key-{key}-{n}.lock" for n in range(self.per_key))
        if own is None:
            raise FormARateLimited(
                details=f"This key already has {self.per_key} upload being read; "
                f"send {file_name} again when it is done",
                retry_after=RETRY_AFTER,
            )
        try:
            slot = self._take(f"slot-{n}.lock" for n in range(self.total))
            if slot is None:
                raise FormARateLimited(
                    details=f"The service is reading {self.total} uploads; "
                    f"send {file_name} again soon",
                    retry_after=RETRY_AFTER,
                )
            try:
                yield
            finally:
                os.close(slot)
        finally:
            os.close(own)

    def _take(self, names: Iterable[str]) -> int | None:
        """The descriptor of the first of ``names`` whose lock was free (now held), or None.
        ``flock`` locks belong to an open file, so they exclude this process's other opens as
        much as other processes."""
        for name in names:
            descriptor = os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            return descriptor
        return None


@contextlib.asynccontextmanager
async def parse_slot(slots: ParseSlots, key_id: str, file_name: str) -> AsyncIterator[None]:
    """Hold one of ``slots`` for ``key_id`` while the upload is read, or answer 429 ``4290``."""
    with slots.hold(key_id, file_name):
        yield


async def parse_in_child(received: ReceivedFile) -> ParsedFile:
    """:func:`upload.parse_file` in a child process; its errors (400 ``4000``, 413 ``4130``) as
    the child found them, and 413 ``4130`` when the child ran out of memory or CPU."""
    with _FORKSERVER.held() as context:
        code = await _run_child(context, received)
    name = received.file_name
    answer = received.directory / "parsed.json"
    if not answer.exists():
        if code is not None and code < 0:
            raise FormAFileTooLarge(
                details=f"{name} needs more memory or time to read than an upload may use "
                f"({PARSE_MEMORY >> 20} MiB, {PARSE_CPU_SECONDS} s of CPU)"
            )
        raise FormABadRequest(details=f"{name} cannot be read as {received.kind}")
    result = json.loads(answer.read_text())
    if result["status"] == 413:
        raise FormAFileTooLarge(details=result["message"])
    if result["status"] != 200:
        raise FormABadRequest(details=result["message"])
    out = received.directory / "rows.arrow"
    return ParsedFile(result["columns"], result["email_column"], StoredRows(out, result["at"]))


async def _run_child(context: ForkServerContext, received: ReceivedFile) -> int | None:
    """Run :func:`_child` on ``received`` to its end; its exit code."""
    out = received.directory / "rows.arrow"
    answer = received.directory / "parsed.json"
    process = context.Process(target=_child, args=(received, out, answer), daemon=True)
    # The first start of a burst also starts the forkserver (it imports the readers): not on
    # the loop.
    await asyncio.to_thread(process.start)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def child_ended() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(process.sentinel, child_ended)
    try:
        await ended
    except BaseException:
        process.kill()
        raise
    finally:
        loop.remove_reader(process.sentinel)
        process.join(10)
        code = process.exitcode
        process.close()
    return code


def give_back_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps it otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _Forkserver:
    """multiprocessing's forkserver of this process, held while uploads are read and stopped
    :data:`FORKSERVER_LINGER` seconds after the last one ended, with the resource tracker that
    it starts (unless that ran before the first upload: then something else uses it).

    multiprocessing keeps one forkserver a process, started on demand and never stopped but at
    exit; its ``_stop_unlocked`` under its ``_lock`` (what its own tests use) stops it, and the
    next start starts it again. The stop holds that lock throughout, so a start meanwhile waits
    for it in its thread (``process.start`` runs in one), never on the event loop, which takes
    only :attr:`_lock`, and only briefly. Where those names are missing the forkserver is kept,
    as it was before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self._timer: threading.Timer | None = None
        self._context: ForkServerContext | None = None
        self._owns_tracker = False

    @contextlib.contextmanager
    def held(self) -> Iterator[ForkServerContext]:
        """The forkserver's context, not stopped until this and every other hold end."""
        with self._lock:
            self._held += 1
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._context is None:
                self._owns_tracker = getattr(resource_tracker._resource_tracker, "_fd", 0) is None
                self._context = multiprocessing.get_context("forkserver")
                self._context.set_forkserver_preload([__name__])
            context = self._context
        try:
            yield context
        finally:
            with self._lock:
                self._held -= 1
                if not self._held:
                    timer = threading.Timer(FORKSERVER_LINGER, self._retire)
                    timer.daemon = True
                    self._timer = timer
                    timer.start()

    def _retire(self) -> None:
        server = forkserver._forkserver
        starting: Any = getattr(server, "_lock", None)
        if starting is None:
            return
        with starting:
            with self._lock:
                if self._held or self._timer is not threading.current_thread():
                    return  # held again, or a newer timer's to stop it
                self._timer = None
            with contextlib.suppress(AttributeError, OSError):
                getattr(server, "_stop_unlocked")()  # noqa: B009 (multiprocessing's private API)
            if self._owns_tracker:
                with contextlib.suppress(AttributeError, OSError):
                    getattr(resource_tracker._resource_tracker, "_stop")()  # noqa: B009


_FORKSERVER = _Forkserver()


def _child(received: ReceivedFile, out: Path, answer: Path) -> None:
    _cap()
    result: dict[str, Any]
    try:
        parsed = parse_file(received, out)
        at = parsed.columns.index(parsed.email_column)
        result = {"status": 200, "columns": parsed.columns, "email_column": parsed.email_column}
        result["at"] = at
    except (FormABadRequest, FormAFileTooLarge) as exc:
        result = {"status": exc.status, "message": exc.details or exc.message}
    except MemoryError:
        result = {
            "status": 413,
            "message": f"{received.file_name} needs more than {PARSE_MEMORY >> 20} MiB "
            "of memory to read",
        }
    partial = answer.with_suffix(".partial")
    partial.write_text(json.dumps(result))
    partial.replace(answer)


def _cap() -> None:
    """Bound this process's address space and CPU time, and read with the system's allocator
    (pyarrow's own reserves address space it may never use)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    size = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            size = int(line.split()[1]) * 1024
    limit = size + PARSE_MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (PARSE_CPU_SECONDS, PARSE_CPU_SECONDS + 5))
    os.nice(5)

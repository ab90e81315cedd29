"""Form A uploads read in a child process, with a memory and CPU cap, a few at a time.

Reading a workbook can cost far more memory than its 20 MiB (openpyxl holds every shared string),
and Python rarely gives memory back to the system. So the service never reads an upload itself:
a child process forked from a small forkserver (its imports preloaded) reads it within
``upload.UPLOAD_LIMITS``, under ``RLIMIT_AS`` (:data:`PARSE_MEMORY` beyond what it starts with)
and ``RLIMIT_CPU`` (:data:`PARSE_CPU_SECONDS`), and writes the rows to an Arrow IPC file in the
upload's temporary folder; the request then reads that file a batch at a time
(:class:`upload.StoredRows`). A file that exhausts the child's memory or CPU kills only the child,
and is answered 413 ``4130``; the child's memory goes back to the system when it exits.

Each server process reads at most :data:`MAX_PARSES` uploads at once, and :data:`MAX_PARSES_PER_KEY`
of one key; past either an upload is answered 429 ``4290`` with ``Retry-After``.
"""

import asyncio
import contextlib
import ctypes
import json
import multiprocessing
import os
import resource
from collections.abc import AsyncIterator
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from listhygiene.errors import FormABadRequest, FormAFileTooLarge, FormARateLimited
from listhygiene.service.upload import ParsedFile, ReceivedFile, StoredRows, parse_file

__all__ = [
    "MAX_PARSES",
    "MAX_PARSES_PER_KEY",
    "PARSE_CPU_SECONDS",
    "PARSE_MEMORY",
    "give_back_memory",
    "parse_in_child",
    "parse_slot",
]

#: Address space a parse may add to its child process.
PARSE_MEMORY = 1 << 30
#: CPU seconds a parse may take.
PARSE_CPU_SECONDS = 120
#: Uploads one server process reads at once, and of one key.
MAX_PARSES = 4
MAX_PARSES_PER_KEY = 1
#: Seconds a client is told to wait when the limits above are reached.
RETRY_AFTER = 5

_running: dict[str, int] = {}
_context: ForkServerContext | None = None


@contextlib.asynccontextmanager
async def parse_slot(key_id: str, file_name: str) -> AsyncIterator[None]:
    """Hold one of the process's parse slots for ``key_id``, or answer 429 ``4290``."""
    if _running.get(key_id, 0) >= MAX_PARSES_PER_KEY:
        raise FormARateLimited(
            details=f"This key already has {MAX_PARSES_PER_KEY} upload being read; "
            f"send {file_name} again when it is done",
            retry_after=RETRY_AFTER,
        )
    if sum(_running.values()) >= MAX_PARSES:
        raise FormARateLimited(
            details=f"The service is reading {MAX_PARSES} uploads; send {file_name} again soon",
            retry_after=RETRY_AFTER,
        )
    _running[key_id] = _running.get(key_id, 0) + 1
    try:
        yield
    finally:
        _running[key_id] -= 1
        if not _running[key_id]:
            del _running[key_id]


async def parse_in_child(received: ReceivedFile) -> ParsedFile:
    """:func:`upload.parse_file` in a child process; its errors (400 ``4000``, 413 ``4130``) as
    the child found them, and 413 ``4130`` when the child ran out of memory or CPU."""
    out = received.directory / "rows.arrow"
    answer = received.directory / "parsed.json"
    process = _forkserver().Process(target=_child, args=(received, out, answer), daemon=True)
    # The first start also starts the forkserver (it imports the readers): not on the loop.
    await asyncio.to_thread(process.start)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    loop.add_reader(process.sentinel, lambda: ended.done() or ended.set_result(None))
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
    name = received.file_name
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
    return ParsedFile(result["columns"], result["email_column"], StoredRows(out, result["at"]))


def give_back_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps it otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _forkserver() -> ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        _context = context
    return _context


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

"""Blocking wrappers around the engine, for notebooks and scripts.

Jupyter already runs an event loop in the main thread, where ``asyncio.run`` is not allowed; so
the engine runs on its own loop in a worker thread whenever the caller's thread has a loop.
"""

import asyncio
import concurrent.futures
import enum
import queue
import threading
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any, TypeVar

from listhygiene.engine.engine import Engine
from listhygiene.engine.settings import EngineSettings
from listhygiene.results import VerificationResult

__all__ = ["verify", "verify_many"]

T = TypeVar("T")


class _End(enum.Enum):
    """The end of ``verify_many``'s queue: an enum member, so the queue's type can name it."""

    END = enum.auto()


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    if not _running_loop():
        return asyncio.run(coroutine)
    # holds the worker thread's value or exception; result() returns the one or raises the other
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def target() -> None:
        try:
            outcome.set_result(asyncio.run(coroutine))
        except BaseException as exc:
            outcome.set_exception(exc)

    thread = threading.Thread(target=target, name="listhygiene-verify")
    thread.start()
    thread.join()
    return outcome.result()


def _engine(settings: EngineSettings | None, overrides: dict[str, Any]) -> Engine:
    return Engine(settings, **overrides)


def verify(
    email: str,
    *,
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    **overrides: Any,
) -> VerificationResult:
    """Verify one address and return its result (settings as keyword arguments or the env)."""
    engine = _engine(settings, overrides)
    return _run(engine.verify(email, check_smtp=check_smtp))


def verify_many(
    emails: Iterable[object],
    *,
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    **overrides: Any,
) -> Iterator[VerificationResult]:
    """Verify many addresses; results stream back as they are final (in completion order).

    The engine runs on a worker thread; a bounded queue keeps memory flat when the caller reads
    slowly.
    """
    engine = _engine(settings, overrides)
    results: queue.Queue[VerificationResult | BaseException | _End] = queue.Queue(maxsize=1024)
    stop = threading.Event()

    async def produce() -> None:
        async for result in engine.verify_many(emails, check_smtp=check_smtp):
            while not stop.is_set():
                try:
                    results.put(result, timeout=0.1)
                    break
                except queue.Full:
                    await asyncio.sleep(0)
            if stop.is_set():
                return

    def target() -> None:
        try:
            asyncio.run(produce())
        except BaseException as exc:
            results.put(exc)
        finally:
            results.put(_End.END)

    thread = threading.Thread(target=target, name="listhygiene-verify-many", daemon=True)
    thread.start()
    try:
        while True:
            item = results.get()
            if item is _End.END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=30)

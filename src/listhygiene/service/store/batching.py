"""The store's per-request writes, coalesced: one transaction for all the requests waiting.

A loaded server admits (key lookup and rate-window counts), reserves credits and refunds them for
every request. One transaction each, in a thread of the pool, made every request pay a thread hop
and a commit, and on PostgreSQL every request of a key queued on the same rows (its
``api_keys`` row, its window rows) for the commit of the one before: 238 requests/s at most.

Here the requests of one event loop that arrive while a batch is in the database wait for the
next batch, which then carries all of them in one transaction (``Store.admit_many``,
``reserve_many``, ``refund_many``) in one thread hop. Nothing is counted or spent in memory: the
database still holds every count and every balance, each batch gives the answers the requests
would get one after the other in their order of arrival, and a batch is committed before any of
its requests is answered, so exactness across threads, processes and machines is the
database's, as before. An idle server sends each request's batch at once (no waiting for
company), so a lone request pays no extra latency.
"""

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Generic, TypeVar

from listhygiene.service.store.limits import Limit
from listhygiene.service.store.rows import ApiKeyRow, RateHit
from listhygiene.service.store.store import Store

__all__ = ["MAX_BATCH", "Coalescer", "StoreBatches"]

log = logging.getLogger(__name__)

#: Requests one batch carries at most.
MAX_BATCH = 256

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


class Coalescer(Generic[_Item, _Result]):
    """``await coalescer(item)``: ``run([item, ...])[i]``, with the items submitted while a batch
    runs carried together by the next one. One batch at a time, in ``executor``.

    ``abandoned(item, result)`` is called (on the loop) for an item whose caller stopped waiting
    (cancelled) after its batch had started: e.g. to give back credits reserved for a request
    that is gone. An item cancelled before its batch started is left out of it.
    """

    def __init__(
        self,
        run: Callable[[list[_Item]], Sequence[_Result]],
        executor: Executor,
        *,
        abandoned: Callable[[_Item, _Result], None] | None = None,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._run = run
        self._executor = executor
        self._abandoned = abandoned
        self._max_batch = max_batch
        self._waiting: list[tuple[_Item, asyncio.Future[_Result]]] = []
        self._busy = False
        #: Batches run and items carried (for tests and benchmarks).
        self.batches = 0
        self.items = 0

    def submit(self, item: _Item) -> "asyncio.Future[_Result]":
        """Queue ``item``; its future has the result once its batch is committed."""
        future: asyncio.Future[_Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if not self._busy:
            self._start()
        return future

    async def __call__(self, item: _Item) -> _Result:
        return await self.submit(item)

    def _start(self) -> None:
        batch = [(i, f) for i, f in self._waiting[: self._max_batch] if not f.cancelled()]
        del self._waiting[: self._max_batch]
        if not batch:
            self._busy = False
            if self._waiting:
                self._start()
            return
        self._busy = True
        self.batches += 1
        self.items += len(batch)
        loop = asyncio.get_running_loop()
        done = loop.run_in_executor(self._executor, self._run, [item for item, _ in batch])
        # A callback, not a task awaiting it: a cancelled waiter (or a loop shutting down) can
        # never lose the answers of a batch the database has committed.
        done.add_done_callback(lambda outcome: self._finish(batch, outcome))

    def _finish(
        self,
        batch: list[tuple[_Item, "asyncio.Future[_Result]"]],
        outcome: "asyncio.Future[Sequence[_Result]]",
    ) -> None:
        try:
            if outcome.cancelled():
                for _, future in batch:
                    future.cancel()
                return
            error = outcome.exception()
            if error is not None:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                return
            for (item, future), result in zip(batch, outcome.result(), strict=True):
                if not future.done():
                    future.set_result(result)
                elif self._abandoned is not None:
                    try:
                        self._abandoned(item, result)
                    except Exception:
                        log.exception("handling an abandoned %r", item)
        finally:
            self._busy = False
            if self._waiting:
                self._start()


class StoreBatches:
    """The coalesced per-request writes of one store on one event loop: ``admit``, ``reserve``
    and ``refund`` (the async twins of ``Store.admit``, ``reserve_credits`` and
    ``refund_credits``). Get it with :meth:`for_loop`."""

    def __init__(self, store: "Store") -> None:
        self.store = store
        # Three threads at most: one batch of each kind at a time.
        self._executor = ThreadPoolExecutor(3, thread_name_prefix="listhygiene-store")
        self._admit: Coalescer[
            tuple[str | None, Callable[[ApiKeyRow], Sequence[Limit]]],
            tuple[ApiKeyRow | None, list[RateHit]],
        ] = Coalescer(store.admit_many, self._executor)
        self._refund: Coalescer[tuple[str, int], bool] = Coalescer(
            store.refund_many, self._executor
        )
        self._reserve: Coalescer[tuple[str, int], bool] = Coalescer(
            store.reserve_many, self._executor, abandoned=self._give_back
        )

    @classmethod
    def for_loop(cls, store: "Store") -> "StoreBatches":
        """The batches of ``store`` on the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        stores = _BY_LOOP.setdefault(loop, {})
        batches = stores.get(id(store))
        if batches is None or batches.store is not store:
            batches = stores[id(store)] = cls(store)
        return batches

    async def admit(
        self, key: str | None, limits: "Callable[[ApiKeyRow], Sequence[Limit]]"
    ) -> "tuple[ApiKeyRow | None, list[RateHit]]":
        """:meth:`Store.admit`, coalesced."""
        if not key:
            return None, []
        return await self._admit((key, limits))

    async def reserve(self, key_id: str, amount: int) -> bool:
        """:meth:`Store.reserve_credits`, coalesced: True if the ``amount`` was taken."""
        if amount < 0:
            raise ValueError("a credit amount must not be negative")
        return await self._reserve((key_id, amount))

    async def refund(self, key_id: str, amount: int) -> None:
        """:meth:`Store.refund_credits`, coalesced."""
        if amount < 0:
            raise ValueError("a credit amount must not be negative")
        if amount and not await self._refund((key_id, amount)):
            raise LookupError(f"no key {key_id!r} with {amount} credits consumed to refund")

    def _give_back(self, item: tuple[str, int], reserved: bool) -> None:
        """Credits reserved for a request that stopped waiting go back."""
        key_id, amount = item
        if reserved and amount:
            future = self._refund.submit(item)

            def report(done: "asyncio.Future[bool]") -> None:
                if not done.cancelled() and done.exception() is not None:
                    log.error(
                        "refund of %d credits to %s failed: %s", amount, key_id, done.exception()
                    )

            future.add_done_callback(report)

    def close(self) -> None:
        self._executor.shutdown(wait=False)


_BY_LOOP: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, StoreBatches]]" = (
    weakref.WeakKeyDictionary()
)

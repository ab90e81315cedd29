"""The webhook outbox service: sends the store's due deliveries, retries them on a schedule.

Deliveries are queued in the store (``store/webhooks.py``) by :func:`.delivery.notify` or in the
transaction that closes a job (``service/events.py``); the :class:`Outbox` claims the due ones
(leased, so two processes never send one at once), checks each URL again, connects to the
address it checked, and records the answer (docs/service.md, "Webhooks"). ``listhygiene serve``
runs it in its job runner process (``service/runner.py``).
"""

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import httpx

from listhygiene.errors import first_line
from listhygiene.service.delivery import (
    DEFAULT_SCHEDULE,
    TIMEOUT,
    USER_AGENT,
    Resolver,
    UnsafeURL,
    check_url,
    pinned_request,
    sign,
)
from listhygiene.service.store import Store
from listhygiene.service.store import webhooks as webhook_store
from listhygiene.service.store.retry import is_transient

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

#: The longest wait between two polls of the outbox while they fail.
_BACKOFF_MAX = 5.0


class Outbox:
    """Delivers the store's due deliveries in the background, polling every ``poll_interval``.

    ``schedule`` holds the delays (seconds) after each failed attempt; once they are used up the
    delivery is given up. ``verify`` is httpx's: True (the system's CAs), a CA file path or an
    ``ssl.SSLContext`` (e.g. to trust a test receiver's certificate).
    """

    def __init__(
        self,
        store: Store,
        *,
        schedule: Sequence[float] = DEFAULT_SCHEDULE,
        poll_interval: float = 0.5,
        timeout: float = TIMEOUT,
        verify: bool | str | ssl.SSLContext = True,
        allow_http: bool = False,
        allow_private: bool = False,
        batch: int = 20,
        resolve: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.store = store
        self.schedule = tuple(schedule)
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.verify = verify
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.batch = batch
        self.resolve = resolve
        self.transport = transport
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._task is not None:
            return
        verify = self.verify
        if isinstance(verify, str):
            verify = ssl.create_default_context(cafile=verify)
        self._client = httpx.AsyncClient(
            timeout=self.timeout,
            verify=verify,
            follow_redirects=False,
            trust_env=False,
            transport=self.transport,
        )
        self._task = asyncio.create_task(self._run(), name="webhook-outbox")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _run(self) -> None:
        # One line when the polls start failing and one when they work again, not a traceback
        # every poll: the database away for an hour would otherwise write 7,200 of them. While
        # the polls fail they back off, as the job worker's claims do.
        failing: str | None = None
        wait = self.poll_interval
        while True:
            try:
                worked = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                worked = 0
                wait = min(max(wait * 2, self.poll_interval), _BACKOFF_MAX)
                if failing is None:
                    failing = type(exc).__name__
                    if is_transient(exc):
                        log.warning(
                            "webhook outbox: the database is unavailable, deliveries wait: %s",
                            first_line(exc),
                        )
                    else:
                        log.exception("webhook outbox: polling failed")
            else:
                wait = self.poll_interval
                if failing is not None:
                    log.info("webhook outbox: polling works again")
                    failing = None
            if not worked:
                await asyncio.sleep(wait)

    async def run_once(self) -> int:
        """Attempt the deliveries due now; returns how many were attempted."""
        lease = timedelta(seconds=self.timeout * 3 + 30)
        rows = await asyncio.to_thread(
            webhook_store.due, self.store, datetime.now(UTC), self.batch, lease=lease
        )
        if rows:
            await asyncio.gather(*(self._attempt(row) for row in rows))
        return len(rows)

    async def _attempt(self, row: webhook_store.OutboxRow) -> None:
        error = await self._send(row)
        if error is None:
            await asyncio.to_thread(webhook_store.mark_delivered, self.store, row.id)
            return
        attempt = row.attempts  # 0 for the first attempt
        next_at = None
        if attempt < len(self.schedule):
            next_at = datetime.now(UTC) + timedelta(seconds=self.schedule[attempt])
        else:
            log.warning("webhook delivery %s to %s given up: %s", row.id, row.url, error)
        await asyncio.to_thread(webhook_store.mark_failed, self.store, row.id, next_at, error)

    async def _send(self, row: webhook_store.OutboxRow) -> str | None:
        """POST the delivery; None on success, else what went wrong."""
        assert self._client is not None
        try:
            address = await check_url(
                row.url,
                allow_http=self.allow_http,
                allow_private=self.allow_private,
                resolve=self.resolve,
            )
        except UnsafeURL as exc:
            return f"refused: {exc}"
        target, host_header, extensions = pinned_request(row.url, address)
        body = row.payload.encode()
        headers = {
            **host_header,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Webhook-Event": row.event,
            "X-Webhook-Timestamp": str(int(time.time())),
        }
        if row.secret:
            headers["X-Webhook-Signature"] = sign(body, row.secret)
        try:
            response = await asyncio.wait_for(
                self._client.post(target, content=body, headers=headers, extensions=extensions),
                self.timeout,
            )
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            return None
        return f"HTTP {response.status_code}"

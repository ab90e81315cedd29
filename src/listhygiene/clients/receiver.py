"""A webhook receiver for the clients of a remote verification service, in form A or form B.

:class:`WebhookReceiver` verifies each delivery and records it in an
:class:`~listhygiene.clients.events.EventStore`; whatever waits for the remote job (possibly in
another process) reads the store. Its ``.app`` is a small Starlette ASGI app that answers
``POST`` on any path (so it can be mounted anywhere):

=====  ========================================================================================
200    ``{"received": true}``: recorded, or already recorded (a retry or a replay of the same
       body: acknowledged, so the sender stops, and not recorded again)
400    not a JSON object, no ``event`` or ``data.job_id``, no ``timestamp``, or a ``timestamp``
       older than ``max_age`` or more than ``max_future`` seconds ahead
401    a secret is configured and the delivery is unsigned or badly signed
405    not a POST
413    a body over ``max_body`` bytes (1 MiB)
503    the store could not record it (the sender retries)
=====  ========================================================================================

Signatures (``sha256=`` + lowercase hex HMAC-SHA256 keyed with the webhook's secret, compared in
constant time): form A's ``X-Webhook-Signature`` header, over the raw body. Form B's header
(same) and its payload's ``signature`` field, computed over the payload without that field as
JSON with sorted keys, ``(",", ":")`` separators and non-ASCII characters as they are: each one
present must verify, and at least one must be present. Without a secret (form B's
``webhook_url`` with no registered webhook is unsigned) every delivery is accepted unsigned.
Before a signature is verified, nothing about the body is told: a malformed body that is
unsigned is 401, not 400.

Freshness is judged by the body's ``timestamp``, never by the ``X-Webhook-Timestamp`` header:
the header is covered by no signature (anyone who captured a delivery could resend it with a
fresh header) and it changes on every attempt, whereas the body's ``timestamp`` is signed and is
set once, when the event is queued: retries resend the identical body. So ``max_age`` must be
longer than the sender's whole retry schedule (ours: 30 s, 2 min, 5 min, 15 min, 1 h, 3 h, about
4.4 h), hence the default of 24 h; within that window a replay is recognised by the digest of
its body, and after it, it is refused as stale.

The Starlette import is deferred to the first use of ``.app``: importing this module (and
:mod:`listhygiene.clients`) stays free of the web framework.
"""

import hashlib
import hmac
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from listhygiene.clients.events import EventStore

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = [
    "DEFAULT_MAX_AGE",
    "MAX_BODY",
    "MAX_FUTURE",
    "Delivery",
    "WebhookReceiver",
    "WebhookRejected",
]

log = logging.getLogger(__name__)

#: Seconds a delivery stays acceptable after its event was queued: past the sender's retries.
DEFAULT_MAX_AGE = 86_400.0
#: Seconds a delivery's timestamp may be ahead of our clock.
MAX_FUTURE = 300.0
#: The largest body accepted, in bytes.
MAX_BODY = 1024 * 1024
SIGNATURE_HEADER = "X-Webhook-Signature"


class WebhookRejected(ValueError):
    """A delivery refused: ``status`` is the HTTP status to answer (400, 401 or 413)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Delivery:
    """A verified delivery: its event, job and whole payload, and the digest of its raw body."""

    form: str
    event: str
    job_id: str
    payload: dict[str, Any] = field(hash=False)
    timestamp: datetime
    digest: str


def _hmac(secret: str, message: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _matches(expected: str, given: object) -> bool:
    if not isinstance(given, str):
        return False
    # bytes, not str: compare_digest refuses non-ASCII strings, and a header or a field can hold
    # anything
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def _canonical(payload: Mapping[str, Any]) -> bytes:
    """What form B's ``signature`` field signs: the payload without it, in canonical JSON."""
    return json.dumps(
        {k: v for k, v in payload.items() if k != "signature"},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8", "surrogatepass")


def _parse_time(value: object) -> datetime:
    if not isinstance(value, str) or not value:
        raise WebhookRejected(400, "the payload has no timestamp")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise WebhookRejected(400, "the payload's timestamp is not ISO 8601") from None
    if moment.tzinfo is None:  # the spec says UTC
        moment = moment.replace(tzinfo=UTC)
    return moment


class WebhookReceiver:
    """Verifies and records the deliveries of one webhook (see the module's docstring).

    ``secret``: the webhook's secret (form A's is generated by the service at registration;
    form B's is the one registered), or None to accept unsigned deliveries. ``form``: "a" or
    "b". ``max_age`` / ``max_future``: seconds a payload's ``timestamp`` may lie behind / ahead
    of ``clock()`` (Unix seconds). ``max_body``: the largest body accepted, in bytes.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        secret: str | None,
        form: Literal["a", "b"],
        max_age: float = DEFAULT_MAX_AGE,
        max_future: float = MAX_FUTURE,
        max_body: int = MAX_BODY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if form not in ("a", "b"):
            raise ValueError(f"form must be 'a' or 'b', not {form!r}")
        if secret is not None and not secret:
            raise ValueError("an empty secret signs nothing: pass None to accept unsigned")
        if max_age <= 0 or max_future < 0 or max_body <= 0:
            raise ValueError("max_age and max_body must be positive, max_future not negative")
        self.store = store
        self.secret = secret
        self.form = form
        self.max_age = max_age
        self.max_future = max_future
        self.max_body = max_body
        self.clock = clock
        self._app: Starlette | None = None

    def __repr__(self) -> str:
        signed = "signed" if self.secret is not None else "unsigned"
        return f"WebhookReceiver(form={self.form!r}, {signed}, store={self.store!r})"

    # -- verification, without HTTP ------------------------------------------------------------

    def verify(self, body: bytes, signature: str | None = None) -> Delivery:
        """The delivery of raw ``body`` with its ``X-Webhook-Signature`` header ``signature``;
        :class:`WebhookRejected` if it is not to be recorded. Records nothing."""
        if len(body) > self.max_body:
            raise WebhookRejected(413, f"the body is over {self.max_body} bytes")
        secret = self.secret
        if (
            secret is not None
            and signature is not None
            and not _matches(_hmac(secret, body), signature)
        ):
            raise WebhookRejected(401, f"the {SIGNATURE_HEADER} header does not verify")
        # Until a signature has verified, a malformed body is an unsigned one: 401.
        authenticated = secret is None or signature is not None
        payload = self._parse(body, authenticated)
        if secret is not None and self.form == "b" and "signature" in payload:
            if not _matches(_hmac(secret, _canonical(payload)), payload["signature"]):
                raise WebhookRejected(401, "the payload's signature does not verify")
            authenticated = True
        if not authenticated:
            raise WebhookRejected(401, "the delivery is not signed")
        event, job_id = self._shape(payload)
        timestamp = _parse_time(payload.get("timestamp"))
        age = self.clock() - timestamp.timestamp()
        if age > self.max_age:
            raise WebhookRejected(400, f"the payload is stale ({age:.0f} s old)")
        if -age > self.max_future:
            raise WebhookRejected(400, f"the payload's timestamp is {-age:.0f} s in the future")
        return Delivery(
            form=self.form,
            event=event,
            job_id=job_id,
            payload=payload,
            timestamp=timestamp,
            digest=hashlib.sha256(body).hexdigest(),
        )

    def _parse(self, body: bytes, authenticated: bool) -> dict[str, Any]:
        status = 400 if authenticated else 401
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
            raise WebhookRejected(status, "the body is not JSON") from None
        if not isinstance(payload, dict):
            raise WebhookRejected(status, "the body is not a JSON object")
        return payload

    @staticmethod
    def _shape(payload: dict[str, Any]) -> tuple[str, str]:
        event = payload.get("event")
        if not isinstance(event, str) or not event:
            raise WebhookRejected(400, "the payload has no event")
        data = payload.get("data")
        job_id = data.get("job_id") if isinstance(data, dict) else None
        if isinstance(job_id, int) and not isinstance(job_id, bool):
            job_id = str(job_id)
        if not isinstance(job_id, str) or not job_id:
            raise WebhookRejected(400, "the payload has no data.job_id")
        return event, job_id

    def accept(self, body: bytes, signature: str | None = None) -> tuple[Delivery, bool]:
        """Verify and record (blocking): ``(delivery, False if it was already recorded)``."""
        delivery = self.verify(body, signature)
        recorded = self.store.record(
            delivery.form,
            delivery.event,
            delivery.job_id,
            delivery.payload,
            delivery.digest,
            received_at=self.clock(),
        )
        return delivery, recorded

    # -- the ASGI app --------------------------------------------------------------------------

    @property
    def app(self) -> "Starlette":
        """The ASGI app (built on first use)."""
        if self._app is None:
            self._app = self._build()
        return self._app

    def _build(self) -> "Starlette":
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.routing import Route

        async def http_error(_request: "Request", exc: Exception) -> "Response":
            assert isinstance(exc, HTTPException)
            return _answer(exc.status_code, {"received": False, "error": exc.detail}, exc.headers)

        return Starlette(
            routes=[Route("/{path:path}", self._receive, methods=["POST"])],
            exception_handlers={HTTPException: http_error},
        )

    async def _receive(self, request: "Request") -> "Response":
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import ClientDisconnect

        try:
            body = await self._read(request)
            delivery, recorded = await run_in_threadpool(
                self.accept, body, request.headers.get(SIGNATURE_HEADER)
            )
        except WebhookRejected as exc:
            log.warning("webhook delivery refused (%s): %s", exc.status, exc.reason)
            return _answer(exc.status, {"received": False, "error": exc.reason})
        except ClientDisconnect:
            return _answer(400, {"received": False, "error": "the body was cut short"})
        except sqlite3.Error:
            log.exception("webhook delivery not recorded")
            return _answer(503, {"received": False, "error": "not recorded, retry later"})
        if not recorded:
            log.info("webhook %s of job %s: a repeated delivery", delivery.event, delivery.job_id)
            return _answer(200, {"received": True, "duplicate": True})
        log.info("webhook %s of job %s recorded", delivery.event, delivery.job_id)
        return _answer(200, {"received": True})

    async def _read(self, request: "Request") -> bytes:
        """The body, read no further than ``max_body`` bytes."""
        too_large = WebhookRejected(413, f"the body is over {self.max_body} bytes")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)


def _answer(
    status: int, content: dict[str, Any], headers: Mapping[str, str] | None = None
) -> "Response":
    from starlette.responses import JSONResponse

    return JSONResponse(content, status_code=status, headers=headers)

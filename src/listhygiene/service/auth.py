"""API keys and rate limits of both forms, as FastAPI dependencies.

Form A reads the key from the ``LISTHYGIENE-API-KEY`` header (an unknown key: 401 ``4010``; a
disabled one: 403 ``4030``, access denied) and limits each endpoint type per minute (429 ``4290``
with a ``Retry-After`` header). Form B reads ``Authorization: Bearer <key>`` (a disabled key is
invalid: 401 ``INVALID_API_KEY``) and limits every authenticated request of a key per hour and
per day, by plan; the hourly window goes in the ``X-RateLimit-*`` headers of every response once
the key is known, errors included (the headers are kept in ``request.state.rate_headers``,
which the error handlers read too).

The store is synchronous (SQLAlchemy): the admission of the requests that arrive together runs
as one transaction in a thread (``StoreBatches``, store/batching.py).
"""

import time
from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import Request, Response

from listhygiene.errors import (
    FormAAccessDenied,
    FormAInvalidApiKey,
    FormARateLimited,
    FormBInvalidApiKey,
    FormBRateLimitExceeded,
)
from listhygiene.service.store import (
    ApiKeyRow,
    Limit,
    RateHit,
    Store,
    form_a_limit,
    form_b_limits,
)
from listhygiene.service.store.batching import StoreBatches

__all__ = ["FORM_A_KEY_HEADER", "FormBKey", "form_a_key", "form_b_key"]

FORM_A_KEY_HEADER = "LISTHYGIENE-API-KEY"
AEndpoint = Literal["single", "bulk", "file", "other"]


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _seconds_until(reset: int) -> int:
    return max(1, reset - int(time.time()))


def _given_key(value: str | None) -> str | None:
    """One rule for both forms: whitespace around a key is not part of it (httptools keeps the
    trailing whitespace of a header value, h11 does not)."""
    stripped = (value or "").strip()
    return stripped or None


def form_a_key(endpoint: AEndpoint) -> Callable[[Request], Awaitable[ApiKeyRow]]:
    """A dependency: the request's form A key, after counting it against ``endpoint``'s limit."""

    def limits(row: ApiKeyRow) -> list[Limit]:
        return [form_a_limit(row, endpoint)]

    async def dependency(request: Request) -> ApiKeyRow:
        store = _store(request)
        given = _given_key(request.headers.get(FORM_A_KEY_HEADER))
        # The key and its count, in one transaction with the other requests waiting for theirs
        # (store/batching.py: a fixed cost per request, shared).
        key, hits = await StoreBatches.for_loop(store).admit(given, limits)
        if key is None:
            raise FormAInvalidApiKey(
                details="Provide a valid key in the LISTHYGIENE-API-KEY header"
            )
        if not key.active:
            raise FormAAccessDenied(details="This API key is disabled")
        (hit,) = hits
        if not hit.allowed:
            limit = form_a_limit(key, endpoint)
            wait = _seconds_until(hit.reset)
            raise FormARateLimited(
                details=f"At most {limit.limit} {endpoint} requests per minute; retry in {wait} s",
                retry_after=wait,
            )
        return key

    return dependency


class FormBKey:
    """A form B request's key, with the state of its hourly window."""

    def __init__(self, row: ApiKeyRow, hour_limit: int, hour_hit: RateHit) -> None:
        self.row = row
        self.hour_limit = hour_limit
        self.hour_hit = hour_hit


async def form_b_key(request: Request, response: Response) -> FormBKey:
    """A dependency: the request's bearer key, counted in its hourly and daily windows."""
    store = _store(request)
    scheme, token = ([*request.headers.get("authorization", "").split(None, 1), "", ""])[:2]
    given = _given_key(token) if scheme.lower() == "bearer" else None
    key, hits = await StoreBatches.for_loop(store).admit(given, form_b_limits)
    if key is None or not key.active:  # form B has no 403 for keys: a disabled one is invalid
        raise FormBInvalidApiKey(details="Send Authorization: Bearer <API key>")
    hour, _ = form_b_limits(key)
    hour_hit = hits[0]
    refused = next((hit for hit in hits if not hit.allowed), None)
    headers = {
        "X-RateLimit-Limit": str(hour.limit),
        "X-RateLimit-Remaining": str(hour_hit.remaining),
        "X-RateLimit-Reset": str(hour_hit.reset),
    }
    request.state.rate_headers = headers
    response.headers.update(headers)
    if refused is not None:
        wait = _seconds_until(refused.reset)
        raise FormBRateLimitExceeded(
            f"Rate limit exceeded; retry in {wait} seconds", retry_after=wait
        )
    return FormBKey(key, hour.limit, hour_hit)

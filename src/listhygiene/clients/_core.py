"""The clients' logic without I/O: what to send, how to read the answer, whether to try again.

The sync and async clients only send the request this module builds and sleep as long as it
says (see ``_send``). Retry decisions, by kind of call:

- ``READ`` (GET) and ``DELETE`` are safe to repeat: retried with jittered exponential back-off
  on network errors and on 500/502/503/504 (a ``Retry-After`` wins over the back-off). A DELETE
  that answers 404 after an earlier try went unanswered is taken as done: that try deleted it.
- ``WRITE`` (the verifications, webhook creation) spends credits or creates a thing, so it is
  repeated only when the request provably never reached the service: a failure to connect.
  A 5xx, a read time-out or a reset raises, since the work may have been done (and charged).
- ``SUBMIT`` (``submit_file``, ``submit_bulk``) is a ``WRITE`` whose unanswered send raises
  :class:`SubmissionUncertainError`: the job may exist, and a second one would verify, and
  charge, the list twice.
- A 429 is retried for every kind: the service refused the request without doing it. The wait
  is form A's ``Retry-After``, form B's ``retry_after`` (or ``Retry-After``, or
  ``X-RateLimit-Reset``), else the back-off.

All of them together are at most ``max_retries`` retries per call, and no single wait is longer
than ``max_wait``: a longer one raises the error at hand instead (its ``retry_after`` says how
long), since hanging for an hour is the caller's choice, not the client's.
"""

import enum
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import httpx

from listhygiene.clients._config import ClientSettings
from listhygiene.clients._exceptions import (
    ClientRateLimitError,
    UnexpectedResponseError,
    from_httpx,
    reached_server,
)
from listhygiene.clients._limits import RateLimiter
from listhygiene.errors import RateLimitError, ServiceError, error_from_response

__all__ = ["Call", "ClientCore", "Done", "Exchange", "Fail", "Kind", "Retry"]

T = TypeVar("T")

#: 5xx statuses worth another try of an idempotent call.
RETRY_STATUSES = frozenset({500, 502, 503, 504})


class Kind(enum.Enum):
    """How safe a call is to repeat (see the module's docstring)."""

    READ = "read"
    DELETE = "delete"
    WRITE = "write"
    SUBMIT = "submit"


@dataclass(frozen=True, slots=True, kw_only=True)
class Call(Generic[T]):
    """One endpoint call: the request, and how to read a success."""

    method: str
    path: str
    kind: Kind
    parse: Callable[[httpx.Response], T]
    #: The rate-limit bucket: form A's endpoint type, form B's one bucket.
    bucket: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    files: Mapping[str, Any] | None = None
    data: Mapping[str, Any] | None = None
    #: A longer read time-out than the settings', for a call that asks the service to take long.
    min_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class Retry:
    wait: float


@dataclass(frozen=True, slots=True)
class Fail:
    error: Exception
    cause: BaseException | None = None


Outcome = Done[T] | Retry | Fail


class ClientCore:
    """What a client of one form knows: its settings, authentication, limiter and error body."""

    def __init__(
        self,
        form: str,
        settings: ClientSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.form = form
        self.settings = settings
        self.wall = wall
        self.jitter = jitter
        if form == "a":
            self.auth = {settings.api_key_header: settings.api_key}
            windows: dict[str, Mapping[float, int]] = {
                bucket: {60.0: limit} for bucket, limit in settings.form_a_limits.items()
            }
        else:
            self.auth = {"Authorization": f"Bearer {settings.api_key}"}
            windows = {"b": settings.form_b_limits()}
        self.limiter = RateLimiter(windows, clock=clock, wall=wall) if settings.rate_limit else None

    def exchange(self, call: Call[T]) -> "Exchange[T]":
        return Exchange(self, call)

    def error(self, response: httpx.Response) -> ServiceError:
        """The service's error answer as the exception of :mod:`listhygiene.errors`."""
        try:
            body = response.json()
        except ValueError:
            body = None  # a proxy's HTML page: the class still follows the status
        error = error_from_response(self.form, response.status_code, body, response.headers)
        if _in_form(self.form, body) or response.status_code >= 500:
            return error
        # A 4xx that is not the form's error body: most often a base URL that is not the form's
        # root (a 404 of the site, or the other form's 401). Say so, not a bare "Error".
        return type(error)(
            self._not_the_form(response), retry_after=error.retry_after, status=error.status
        )

    def _not_the_form(self, response: httpx.Response) -> str:
        form, root = self.form.upper(), f"/{self.form}/v1"
        try:
            where = f"{response.request.method} {response.request.url}"
        except RuntimeError:  # a response built without its request
            where = "the request"
        return (
            f"the service at {self.settings.base_url} answered {where} with "
            f"{response.status_code} {response.reason_phrase}, not a form {form} answer: is the "
            f"base URL right? It should be the service's form {form} root, ending in /v1 "
            f"({root} on listhygiene serve)"
        )

    def backoff(self, attempt: int) -> float:
        """Full jitter: a random wait up to ``backoff_base * 2 ** attempt`` (capped)."""
        cap = min(self.settings.backoff_max, self.settings.backoff_base * 2**attempt)
        return float(self.jitter() * cap)

    def rate_limit_wait(self, error: ServiceError, headers: Mapping[str, str]) -> float | None:
        """The wait a 429 asks for: ``retry_after``, else form B's window reset."""
        if error.retry_after is not None:
            return float(max(0, error.retry_after))
        reset = headers.get("x-ratelimit-reset")
        if self.form == "b" and reset is not None:
            try:
                return max(0.0, float(reset) - self.wall())
            except ValueError:
                return None
        return None


def _in_form(form: str, body: Any) -> bool:
    """Is ``body`` an error body of ``form``? Form A's envelope has ``success`` and a ``code``;
    form B's body is ``{"error": {"code": ...}}`` without ``success``."""
    if not isinstance(body, Mapping):
        return False
    if form == "a":
        return "success" in body and "code" in body
    error = body.get("error")
    return "success" not in body and isinstance(error, Mapping) and "code" in error


class Exchange(Generic[T]):
    """One call's tries: each step says send, wait, give up, or here is the value."""

    def __init__(self, core: ClientCore, call: Call[T]) -> None:
        self.core = core
        self.call = call
        self.retries = 0
        #: An earlier try may have reached the service (matters for DELETE).
        self.maybe_reached = False

    def before_send(self) -> float:
        """Seconds to wait before sending (0: send now; the slot is taken)."""
        limiter = self.core.limiter
        if limiter is None:
            return 0.0
        wait = limiter.reserve(self.call.bucket)
        if wait > self.core.settings.max_wait:
            raise ClientRateLimitError(
                f"the rate limit allows the next {self.call.method} {self.call.path} "
                f"in {wait:.0f} s, more than max_wait ({self.core.settings.max_wait:.0f} s)",
                retry_after=math.ceil(wait),
            )
        return wait

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        call, settings = self.call, self.core.settings
        timeout: httpx.Timeout | None = None
        if call.min_timeout is not None and call.min_timeout > settings.timeout:
            timeout = httpx.Timeout(call.min_timeout, connect=settings.connect_timeout)
        if timeout is None:
            return http.build_request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                files=call.files,
                data=call.data,
                headers=self.core.auth,
            )
        return http.build_request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            files=call.files,
            data=call.data,
            headers=self.core.auth,
            timeout=timeout,
        )

    def on_response(self, response: httpx.Response) -> "Outcome[T]":
        if self.core.limiter is not None:
            self.core.limiter.observe(response.headers)
        if response.is_success:
            try:
                return Done(self.call.parse(response))
            except (KeyError, TypeError, ValueError) as exc:
                return Fail(
                    UnexpectedResponseError(
                        f"{self.call.method} {self.call.path}: not a form "
                        f"{self.core.form.upper()} answer ({type(exc).__name__}: {exc})",
                        status=response.status_code,
                        body=response.text[:2000],
                    ),
                    exc,
                )
        error = self.core.error(response)
        if self.call.kind is Kind.DELETE and response.status_code == 404 and self.maybe_reached:
            return Done(cast(T, None))
        if isinstance(error, RateLimitError):
            wait = self.core.rate_limit_wait(error, response.headers)
            return self._again(error, self.core.backoff(self.retries) if wait is None else wait)
        if self.call.kind in (Kind.READ, Kind.DELETE) and response.status_code in RETRY_STATUSES:
            self.maybe_reached = True  # a 5xx may come after the work was done
            wait = self.core.backoff(self.retries)
            if error.retry_after is not None:
                wait = float(error.retry_after)
            return self._again(error, wait)
        return Fail(error)

    def on_transport_error(self, exc: httpx.RequestError) -> "Outcome[T]":
        reached = reached_server(exc)
        self.maybe_reached = self.maybe_reached or reached
        error = from_httpx(exc, submission=self.call.kind is Kind.SUBMIT)
        if self.call.kind in (Kind.READ, Kind.DELETE) or not reached:
            return self._again(error, self.core.backoff(self.retries), exc)
        return Fail(error, exc)

    def _again(
        self, error: Exception, wait: float, cause: BaseException | None = None
    ) -> "Outcome[T]":
        if self.retries >= self.core.settings.max_retries or wait > self.core.settings.max_wait:
            return Fail(error, cause)
        self.retries += 1
        return Retry(wait)

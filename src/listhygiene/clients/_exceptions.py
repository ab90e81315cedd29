"""What the clients raise when the service gave no answer to read.

An answer of the service, even an error, is one of :mod:`listhygiene.errors` (built by
``error_from_response``). The rest is here; every httpx error is mapped at one boundary,
:func:`from_httpx`, and keeps httpx's exception as ``__cause__``::

    ClientError                       (a listhygiene.errors.BackendError)
    ├── ClientConnectionError         no (complete) answer: refused, reset, DNS, TLS...
    │   ├── ClientTimeoutError        ... or none in time (also a ``TimeoutError``)
    │   └── SubmissionUncertainError  a job submission was sent, its answer lost: the job may exist
    ├── ClientRateLimitError          the client would have to wait longer than ``max_wait``
    │                                 (also a ``listhygiene.errors.RateLimitError``)
    └── UnexpectedResponseError       a success that is not in the form's shape
"""

import httpx

from listhygiene.errors import BackendError, RateLimitError

__all__ = [
    "ClientConnectionError",
    "ClientError",
    "ClientRateLimitError",
    "ClientTimeoutError",
    "SubmissionUncertainError",
    "UnexpectedResponseError",
    "from_httpx",
    "reached_server",
]


class ClientError(BackendError):
    """An error of the client's own, not an answer of the service."""


class ClientConnectionError(ClientError):
    """The service could not be reached, or its answer did not arrive whole."""


class ClientTimeoutError(ClientConnectionError, TimeoutError):
    """No connection or no answer within the configured time."""


class SubmissionUncertainError(ClientConnectionError):
    """A job submission reached the service but its answer was lost.

    The job may well exist (and hold credits): it is not submitted again, since that could
    verify, and charge, the list twice. Look for the job before submitting anew.
    """


class ClientRateLimitError(ClientError, RateLimitError):
    """The client's limiter, or the service's exhausted window, asks for a wait too long to take
    silently; ``retry_after`` says how many seconds."""

    form = "client"
    status = 429
    title = "Client-side rate limit"


class UnexpectedResponseError(ClientError):
    """A 2xx answer that is not what the form documents (not JSON, or not its shape)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


#: httpx errors raised before any byte of the request could reach the service.
_UNSENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)


def reached_server(exc: Exception) -> bool:
    """Could the request have reached the service? Only a failure to connect proves it did not.

    A write error may leave a whole request on the server; a read error, a reset, or a
    disconnect of a kept-alive connection leaves the outcome unknown.
    """
    return not isinstance(exc, _UNSENT)


def from_httpx(exc: httpx.RequestError, *, submission: bool = False) -> ClientError:
    """The client's error for an httpx request error (raise it ``from exc``)."""
    where = f"{exc.request.method} {exc.request.url}" if _has_request(exc) else "request"
    if submission and reached_server(exc):
        return SubmissionUncertainError(
            f"{where}: no answer to the submission ({type(exc).__name__}: {exc}); "
            "the job may have been created, so it was not submitted again"
        )
    if isinstance(exc, httpx.TimeoutException):
        return ClientTimeoutError(f"{where}: timed out ({type(exc).__name__}: {exc})")
    return ClientConnectionError(f"{where}: {type(exc).__name__}: {exc}")


def _has_request(exc: httpx.RequestError) -> bool:
    try:
        exc.request  # noqa: B018 - the property raises when httpx had no request to attach
    except RuntimeError:
        return False
    return True

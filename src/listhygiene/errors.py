"""The one exception tree of listhygiene: every error the library, the CLI, the service, the clients
and the integrations raise on purpose derives from :class:`ListHygieneError`.

Each category carries the exit code of ``listhygiene clean`` (PRODUCT.md, docs/results.md) and a
short ``kind`` (the ``--json`` error object's member). Some also derive from the built-in they were
before this tree existed (``ValueError``, ``RuntimeError``, ``OSError``), so code that catches the
built-in keeps working::

    ListHygieneError                          1  (kind "run")
    ├── InputError (ValueError)               3  the input cannot be read or has no email column
    │                                            (pipeline.sources.SourceError)
    ├── ConfigurationError (ValueError)       2  settings or options that cannot work
    ├── StorageError (OSError)                1  a folder or store cannot be used
    │                                            (pipeline.outputs.OutputError)
    ├── service.store.jobs.BalanceShort          a key's balance short of a job (the service
    │                                            answers its form's insufficient credits)
    ├── service.store.jobs.LostClaim             a job no longer this job runner's
    └── PipelineError (RuntimeError)          1  anything else that stops a run
        ├── BackendError                      4  the backend refused or failed
        │   ├── ServiceError                     an error answer of a service (below)
        │   ├── clients.ClientError              no usable answer (listhygiene.clients)
        │   ├── pipeline.backends.InsufficientCredits
        │   └── pipeline.backends.JobFailed
        ├── QualityError                      5  a data-quality check failed
        └── UnreachableError                  6  most domains could not be reached on port 25

The service raises the :class:`ServiceError` classes to answer; the clients raise them from a
response. Each form's codes are classes of their own (``FormAError`` / ``FormBError``), and each
also derives from the error's *meaning*, so a caller can catch ``InsufficientCreditsError``
whatever the form::

    ServiceError
    ├── BadRequestError
    │   ├── FormABadRequest            400 "4000"
    │   ├── FormBInvalidRequest        400 INVALID_REQUEST
    │   └── FormBInvalidEmail          400 INVALID_EMAIL
    ├── AuthenticationError
    │   ├── FormAInvalidApiKey         401 "4010"
    │   └── FormBInvalidApiKey         401 INVALID_API_KEY
    ├── InsufficientCreditsError
    │   ├── FormAInsufficientCredits   402 "4020"
    │   └── FormBInsufficientCredits   403 INSUFFICIENT_CREDITS
    ├── AccessDeniedError
    │   └── FormAAccessDenied          403 "4030"
    ├── NotFoundError
    │   ├── FormANotFound              404 "4040"
    │   ├── FormBJobNotFound           404 JOB_NOT_FOUND
    │   └── FormBNotFound              404 NOT_FOUND
    ├── PayloadTooLargeError
    │   └── FormAFileTooLarge          413 "4130"
    ├── RateLimitError                 (``retry_after`` seconds)
    │   ├── FormARateLimited           429 "4290"
    │   └── FormBRateLimitExceeded     429 RATE_LIMIT_EXCEEDED
    ├── ServiceTimeoutError
    │   └── FormBTimeout               504 TIMEOUT
    └── ServerError
        ├── FormAInternalError         500 "1000"
        ├── FormBInternalError         500 INTERNAL_ERROR
        └── FormBServiceUnavailable    503 SERVICE_UNAVAILABLE

Bodies: form A's envelope ``{success: false, code, message, error: {code, message}}``; form B's
``{error: {code, message, details?, retry_after?}}``.
"""

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "AccessDeniedError",
    "AuthenticationError",
    "BackendError",
    "BadRequestError",
    "ConfigurationError",
    "FormAError",
    "FormBError",
    "InputError",
    "InsufficientCreditsError",
    "ListHygieneError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PipelineError",
    "QualityError",
    "RateLimitError",
    "ServerError",
    "ServiceError",
    "ServiceTimeoutError",
    "StorageError",
    "UnreachableError",
    "error_from_response",
    "exit_code",
    "first_line",
    "form_error",
    "http_error",
]


class ListHygieneError(Exception):
    """The root of every error listhygiene raises on purpose: catch this to catch them all."""

    #: The exit code of ``listhygiene clean`` for this error (PRODUCT.md "Exit codes").
    exit_code: ClassVar[int] = 1
    #: The ``kind`` member of ``clean --json``'s error object.
    kind: ClassVar[str] = "run"


class InputError(ListHygieneError, ValueError):
    """Bad input: the message names the input and says what is wrong and what to do."""

    exit_code = 3
    kind = "input"


class ConfigurationError(ListHygieneError, ValueError):
    """Settings or options that cannot work together (an unknown backend, a missing URL)."""

    exit_code = 2
    kind = "configuration"


class StorageError(ListHygieneError, OSError):
    """A folder, file or store the run needs cannot be used; the message names it."""

    kind = "output"


class PipelineError(ListHygieneError, RuntimeError):
    """The run could not complete; the message says why and names the input or output."""


class BackendError(PipelineError):
    """The backend refused the run (not enough credits) or failed a job; nothing more is spent,
    and a rerun with the same output folder resumes."""

    exit_code = 4
    kind = "backend"


class QualityError(PipelineError):
    """A data-quality check failed: nothing was published."""

    exit_code = 5
    kind = "quality"

    def __init__(self, message: str, quality: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.quality = quality


class UnreachableError(PipelineError):
    """Most domains could not be reached on the SMTP port (or refused this machine by policy),
    so most results are unknown because of where the run ran, not because of the addresses.

    Nothing is published; the results stay in the work folder, so a rerun with
    ``accept_unreachable=True`` publishes them without probing again.
    """

    exit_code = 6
    kind = "unreachable"

    def __init__(self, message: str, health: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.health = health


class ServiceError(BackendError):
    """An error answer of a verification service (ours, or a remote one)."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = ""
    form: ClassVar[str] = ""
    #: The short message the form uses for this code.
    title: ClassVar[str] = "Error"

    def __init__(
        self,
        message: str | None = None,
        *,
        details: str | None = None,
        retry_after: int | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message or self.title
        self.details = details
        self.retry_after = retry_after
        if status is not None:
            self.status = status  # type: ignore[misc]  # a remote service's actual status
        super().__init__(self.message if not details else f"{self.message}: {details}")

    def body(self) -> dict[str, Any]:
        """The response body of this error in its form."""
        raise NotImplementedError


class BadRequestError(ServiceError):
    """The request is malformed or its parameters are invalid."""


class AuthenticationError(ServiceError):
    """The API key is missing or invalid."""


class InsufficientCreditsError(ServiceError):
    """The key's credits do not cover the request."""


class AccessDeniedError(ServiceError):
    """The key may not do this."""


class NotFoundError(ServiceError):
    """No such job, webhook or path (or not this key's)."""


class PayloadTooLargeError(ServiceError):
    """An upload over the size or row limit."""


class RateLimitError(ServiceError):
    """Too many requests; ``retry_after`` says how many seconds to wait."""


class ServiceTimeoutError(ServiceError):
    """The verification took longer than allowed."""


class ServerError(ServiceError):
    """The service failed (5xx)."""


class FormAError(ServiceError):
    """An error in form A's envelope."""

    form = "a"

    def body(self) -> dict[str, Any]:
        return {
            "success": False,
            "code": self.code,
            "message": self.title,
            "error": {"code": self.code, "message": self.details or self.message},
        }


class FormBError(ServiceError):
    """An error in form B's body."""

    form = "b"

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        if self.retry_after is not None:
            error["retry_after"] = self.retry_after
        return {"error": error}


class FormABadRequest(FormAError, BadRequestError):
    """Form A 4000: Bad request."""

    status = 400
    code = "4000"
    title = "Bad request"


class FormAInvalidApiKey(FormAError, AuthenticationError):
    """Form A 4010: Invalid or missing API key."""

    status = 401
    code = "4010"
    title = "Invalid or missing API key"


class FormAInsufficientCredits(FormAError, InsufficientCreditsError):
    """Form A 4020: Insufficient credits."""

    status = 402
    code = "4020"
    title = "Insufficient credits"


class FormAAccessDenied(FormAError, AccessDeniedError):
    """Form A 4030: Access denied."""

    status = 403
    code = "4030"
    title = "Access denied"


class FormANotFound(FormAError, NotFoundError):
    """Form A 4040: Resource not found."""

    status = 404
    code = "4040"
    title = "Resource not found"


class FormAFileTooLarge(FormAError, PayloadTooLargeError):
    """Form A 4130: File too large."""

    status = 413
    code = "4130"
    title = "File too large"


class FormARateLimited(FormAError, RateLimitError):
    """Form A 4290: Rate limit exceeded."""

    status = 429
    code = "4290"
    title = "Rate limit exceeded"


class FormAInternalError(FormAError, ServerError):
    """Form A 1000: Internal server error."""

    status = 500
    code = "1000"
    title = "Internal server error"


class FormBInvalidRequest(FormBError, BadRequestError):
    """Form B INVALID_REQUEST: Invalid request."""

    status = 400
    code = "INVALID_REQUEST"
    title = "Invalid request"


class FormBInvalidEmail(FormBError, BadRequestError):
    """Form B INVALID_EMAIL: Email format invalid."""

    status = 400
    code = "INVALID_EMAIL"
    title = "Email format invalid"


class FormBInvalidApiKey(FormBError, AuthenticationError):
    """Form B INVALID_API_KEY: Invalid or missing API key."""

    status = 401
    code = "INVALID_API_KEY"
    title = "Invalid or missing API key"


class FormBInsufficientCredits(FormBError, InsufficientCreditsError):
    """Form B INSUFFICIENT_CREDITS: Insufficient credits."""

    status = 403
    code = "INSUFFICIENT_CREDITS"
    title = "Insufficient credits"


class FormBJobNotFound(FormBError, NotFoundError):
    """Form B JOB_NOT_FOUND: Job not found."""

    status = 404
    code = "JOB_NOT_FOUND"
    title = "Job not found"


class FormBNotFound(FormBError, NotFoundError):
    """Form B NOT_FOUND: Not found."""

    status = 404
    code = "NOT_FOUND"
    title = "Not found"


class FormBRateLimitExceeded(FormBError, RateLimitError):
    """Form B RATE_LIMIT_EXCEEDED: Rate limit exceeded."""

    status = 429
    code = "RATE_LIMIT_EXCEEDED"
    title = "Rate limit exceeded"


class FormBTimeout(FormBError, ServiceTimeoutError):
    """Form B TIMEOUT: Verification timed out."""

    status = 504
    code = "TIMEOUT"
    title = "Verification timed out"


class FormBInternalError(FormBError, ServerError):
    """Form B INTERNAL_ERROR: Internal server error."""

    status = 500
    code = "INTERNAL_ERROR"
    title = "Internal server error"


class FormBServiceUnavailable(FormBError, ServerError):
    """Form B SERVICE_UNAVAILABLE: Service unavailable."""

    status = 503
    code = "SERVICE_UNAVAILABLE"
    title = "Service unavailable"


FORM_A_ERRORS: dict[str, type[FormAError]] = {
    cls.code: cls
    for cls in (
        FormABadRequest,
        FormAInvalidApiKey,
        FormAInsufficientCredits,
        FormAAccessDenied,
        FormANotFound,
        FormAFileTooLarge,
        FormARateLimited,
        FormAInternalError,
    )
}
FORM_B_ERRORS: dict[str, type[FormBError]] = {
    cls.code: cls
    for cls in (
        FormBInvalidRequest,
        FormBInvalidEmail,
        FormBInvalidApiKey,
        FormBInsufficientCredits,
        FormBJobNotFound,
        FormBNotFound,
        FormBRateLimitExceeded,
        FormBTimeout,
        FormBInternalError,
        FormBServiceUnavailable,
    )
}
__all__ += sorted(c.__name__ for c in (*FORM_A_ERRORS.values(), *FORM_B_ERRORS.values()))

_BY_STATUS: dict[int, type[ServiceError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: InsufficientCreditsError,
    403: AccessDeniedError,
    404: NotFoundError,
    413: PayloadTooLargeError,
    429: RateLimitError,
    504: ServiceTimeoutError,
}


def error_from_response(
    form: str, status: int, body: Any, headers: Mapping[str, str] | None = None
) -> ServiceError:
    """The exception for an error response of a form ``"a"`` or ``"b"`` service.

    An unknown code (a service newer than this client) still gets the class of its meaning,
    by HTTP status; ``Retry-After`` / ``retry_after`` fill ``retry_after``.
    """
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    code, message, details, retry_after = "", None, None, None
    if isinstance(body, Mapping):
        found = body.get("error")
        error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if form == "a":
            code = str(body.get("code") or error.get("code") or "")
            message = body.get("message")
            details = error.get("message")
        else:
            code = str(error.get("code") or "")
            message = error.get("message")
            details = error.get("details")
            retry_after = _int(error.get("retry_after"))
    if retry_after is None:
        retry_after = _int(headers.get("retry-after"))
    known = (FORM_A_ERRORS if form == "a" else FORM_B_ERRORS).get(code)
    if known is not None:
        return known(message, details=details, retry_after=retry_after, status=status)
    base = _BY_STATUS.get(status, ServerError if status >= 500 else ServiceError)
    form_base = FormAError if form == "a" else FormBError
    # A class of this form and of the status's meaning, for a code this module does not know.
    unknown: type[ServiceError] = type(
        f"Form{form.upper()}UnknownError",
        (form_base, base),
        {"status": status, "code": code, "title": message or "Error"},
    )
    return unknown(message, details=details, retry_after=retry_after, status=status)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def exit_code(exc: BaseException) -> int | None:
    """The exit code of ``listhygiene clean`` for an error (PRODUCT.md "Exit codes"; each category
    above carries its own), or None for an exception the library does not raise on purpose: a bug,
    whose traceback the caller keeps."""
    return exc.exit_code if isinstance(exc, ListHygieneError) else None


#: Each meaning's class in each form; a meaning a form lacks answers as its internal error.
_FORM_CLASSES: dict[str, dict[type[ServiceError], type[ServiceError]]] = {
    "a": {
        BadRequestError: FormABadRequest,
        AuthenticationError: FormAInvalidApiKey,
        InsufficientCreditsError: FormAInsufficientCredits,
        AccessDeniedError: FormAAccessDenied,
        NotFoundError: FormANotFound,
        PayloadTooLargeError: FormAFileTooLarge,
        RateLimitError: FormARateLimited,
        ServerError: FormAInternalError,
    },
    "b": {
        BadRequestError: FormBInvalidRequest,
        AuthenticationError: FormBInvalidApiKey,
        InsufficientCreditsError: FormBInsufficientCredits,
        NotFoundError: FormBNotFound,
        PayloadTooLargeError: FormBInvalidRequest,
        RateLimitError: FormBRateLimitExceeded,
        ServiceTimeoutError: FormBTimeout,
        ServerError: FormBInternalError,
    },
}


def form_error(form: str, meaning: type[ServiceError], **details: Any) -> ServiceError:
    """Form ``"a"``'s or ``"b"``'s answer of ``meaning`` (:class:`BadRequestError`,
    :class:`NotFoundError`, :class:`ServerError`, ...), made with ``details``; a meaning the form
    has no code for answers as its internal error."""
    classes = _FORM_CLASSES[form]
    return classes.get(meaning, classes[ServerError])(**details)


def http_error(exc: BaseException, form: str) -> ServiceError:
    """The error answer of form ``"a"`` or ``"b"`` for an exception: the one mapping from the
    library's errors to HTTP (docs/results.md, "Errors").

    An error of the form already is its own answer; another :class:`ServiceError` (the other
    form's, or a meaning such as :class:`InsufficientCreditsError`) answers as this form's class of
    the same meaning; bad input and bad settings are a bad request; anything else is the form's
    internal error, whose details never carry the exception's text (it may hold internals).
    """
    base = FormAError if form == "a" else FormBError
    if isinstance(exc, base):
        return exc
    classes = _FORM_CLASSES[form]
    meaning: type[ServiceError] = ServerError
    if isinstance(exc, ServiceError):
        meaning = next((m for m in classes if isinstance(exc, m)), ServerError)
    elif isinstance(exc, (InputError, ConfigurationError)):
        meaning = BadRequestError
    if meaning is ServerError:
        return classes[ServerError]()
    retry_after = getattr(exc, "retry_after", None)
    return classes[meaning](details=str(exc) or None, retry_after=retry_after)


def first_line(error: BaseException) -> str:
    """What an error says, on one line, for a log line or a one-line message: the first line of
    its text (a database driver's own, when SQLAlchemy wraps it as ``orig``), else its class's
    name."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__

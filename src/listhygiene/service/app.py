"""The HTTP service: form A under ``/a/v1`` and form B under ``/b/v1`` of one root app.

Each form is a sub-application with its own error handlers, so that every answer under its mount
is in the form's own body (listhygiene.errors): the service's errors, FastAPI's validation errors
(400 ``4000`` / ``INVALID_REQUEST``), unmatched paths (404 ``4040`` / ``NOT_FOUND``) and any
unexpected exception (500 ``1000`` / ``INTERNAL_ERROR``, never a traceback).
"""

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from listhygiene.engine import Engine
from listhygiene.errors import (
    BadRequestError,
    FormAInternalError,
    FormBServiceUnavailable,
    NotFoundError,
    ServerError,
    ServiceError,
    first_line,
    form_error,
    http_error,
)
from listhygiene.service import FORM_A_ROOT, FORM_B_ROOT
from listhygiene.service.charging import DEFAULT_SYNC_DEADLINE
from listhygiene.service.store import Store
from listhygiene.service.store.retry import is_transient

if TYPE_CHECKING:
    from listhygiene.service.delivery import Resolver

__all__ = ["UNAVAILABLE_RETRY_AFTER", "create_app", "error_response", "form_app", "unavailable"]

log = logging.getLogger(__name__)


def error_response(request_state: dict[str, Any] | None, error: ServiceError) -> JSONResponse:
    """The response of ``error`` in its form, with its rate-limit headers if the key is known."""
    headers: dict[str, str] = dict((request_state or {}).get("rate_headers") or {})
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def _state(request: Request) -> dict[str, Any]:
    state = request.scope.get("state")
    return state if isinstance(state, dict) else {}


def _describe(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "Invalid request body"


class _CatchAll:
    """Turns an exception no handler took into the form's 500, never a traceback."""

    def __init__(self, app: ASGIApp, form: str) -> None:
        self.app = app
        self.form = form

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            where = (scope.get("method"), scope.get("path"))
            if is_transient(exc):
                # the database away for a while (a lost connection, a refused one, a lock not
                # granted): the request can be sent again, and the pool connects again by itself
                log.warning("%s %s: the database is unavailable: %s", *where, first_line(exc))
                error = unavailable(self.form)
            else:
                log.exception("unexpected error in %s %s", *where)
                error = http_error(exc, self.form)  # the form's 500, nothing of the exception
            if started:
                raise
            state = scope.get("state")
            response = error_response(state if isinstance(state, dict) else None, error)
            await response(scope, receive, send)


#: Seconds a client is told to wait when the database is unavailable.
UNAVAILABLE_RETRY_AFTER = 5


def unavailable(form: str) -> ServiceError:
    """The form's 503 with ``Retry-After``: form B's ``SERVICE_UNAVAILABLE``; form A, whose
    spec has no code for it, its only server error code, ``1000``, with the status 503."""
    details = "The database is unavailable; try again shortly"
    if form == "a":
        return FormAInternalError(details=details, status=503, retry_after=UNAVAILABLE_RETRY_AFTER)
    return FormBServiceUnavailable(details=details, retry_after=UNAVAILABLE_RETRY_AFTER)


def form_app(form: str) -> FastAPI:
    """An empty sub-application of ``form`` ("a" or "b") with the form's error handling."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(_state(request), http_error(exc, form))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        bad = form_error(form, BadRequestError, details=_describe(exc))
        return error_response(_state(request), bad)

    @app.exception_handler(StarletteHTTPException)
    async def framework_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = _framework_error(form, request.url.path, exc)
        return _with_headers(error_response(_state(request), error), exc, request)

    app.add_middleware(_CatchAll, form=form)
    return app


def create_app(
    store: Store,
    engine: Engine,
    *,
    allow_http_webhooks: bool = False,
    allow_private_webhooks: bool = False,
    webhook_resolver: "Resolver | None" = None,
    sync_deadline: float = DEFAULT_SYNC_DEADLINE,
    worker_options: dict[str, Any] | None = None,
    run_jobs: bool = True,
    feedback: Any = None,
) -> FastAPI:
    """The service: form A at ``/a/v1``, form B at ``/b/v1``.

    With ``run_jobs`` (the default, one process doing everything: tests, embedding) the app runs
    the job worker and the webhook outbox itself; ``listhygiene serve`` passes False and runs
    them in its job runner process instead (:mod:`listhygiene.service.runner`), so that the
    server processes only admit requests and read the store (docs/service.md, "Fairness").
    ``worker_options`` go to the job worker (:class:`~listhygiene.service.worker.JobWorker`:
    ``slots``, ``stale_after``, ``poll_seconds`` ...). ``webhook_resolver`` resolves the
    names of webhook URLs (the system's resolver by default; the tests' way to a public name).
    ``sync_deadline``: seconds a synchronous form A verification may take before what is left
    is answered unknown (:func:`.charging.verify_charged`). ``feedback``: a verdict store's
    events (``listhygiene.verdicts.feedback.Feedback``) applied to every result, or None
    (docs/feedback.md, "In the service").
    """
    from listhygiene.service import files_a, form_a, form_b, jobs_b, openapi_docs, webhooks
    from listhygiene.service.guards import HeaderGuard
    from listhygiene.service.worker import JobWorker

    root = FastAPI(
        title="listhygiene", docs_url=None, redoc_url=None, openapi_url=None, lifespan=_lifespan
    )
    root.add_middleware(HeaderGuard)
    # One worker runs the jobs of both forms (form A's files, form B's lists), here or in the
    # job runner process; a submission wakes it when it is here.
    worker: JobWorker | _Elsewhere = (
        JobWorker(store, engine, feedback=feedback, **(worker_options or {}))
        if run_jobs
        else _Elsewhere()
    )
    root.state.services = [worker] if run_jobs else []
    root.state.run_jobs = run_jobs
    app_a = form_a.build(form_app("a"))
    app_b = form_b.build(form_app("b"))
    for sub in (root, app_a, app_b):
        sub.state.store = store
        sub.state.engine = engine
        sub.state.worker = worker
        sub.state.allow_http_webhooks = allow_http_webhooks
        sub.state.allow_private_webhooks = allow_private_webhooks
        sub.state.webhook_resolver = webhook_resolver
        sub.state.sync_deadline = sync_deadline
        sub.state.feedback = feedback
    # Each part adds its routes to the form apps and its background services (a job worker, the
    # webhook outbox) to ``root.state.services``, started and stopped with the server.
    for part in (files_a, jobs_b, webhooks, openapi_docs):
        part.install(root, app_a, app_b)
    root.mount(FORM_A_ROOT, app_a)
    root.mount(FORM_B_ROOT, app_b)

    @root.exception_handler(StarletteHTTPException)
    async def unrouted(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # A path the mounts do not match (Starlette's mount pattern stops at a newline, so
        # ``/a/v1/webhooks/%0A`` ends here): still the form's own body, never the framework's.
        path = request.url.path
        form = "a" if path.startswith(FORM_A_ROOT) else "b" if path.startswith(FORM_B_ROOT) else ""
        if not form:
            return JSONResponse(
                {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
            )
        return _with_headers(error_response(None, _framework_error(form, path, exc)), exc)

    return root


def _framework_error(form: str, path: str, exc: StarletteHTTPException) -> ServiceError:
    """The form's answer for the framework's own HTTP errors: an unknown path is the form's not
    found, a server error its internal error, the rest (a 405, say) its bad request with the
    real status."""
    if exc.status_code == 404:
        return form_error(form, NotFoundError, details=f"No such path: {path}")
    if exc.status_code >= 500:
        return form_error(form, ServerError)
    return form_error(form, BadRequestError, details=str(exc.detail), status=exc.status_code)


def _with_headers(
    response: JSONResponse, exc: StarletteHTTPException, request: Request | None = None
) -> JSONResponse:
    """The framework's headers of an HTTP error kept on the form's body, and a 405's ``Allow``
    naming every method the path takes (RFC 9110, section 15.5.6: Starlette names only those of
    the first route of the path, and ``/webhooks`` has one route a method)."""
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    if exc.status_code == 405 and request is not None:
        from starlette.routing import Match

        methods: set[str] = set()
        for route in request.app.routes:
            match, _ = route.matches({**request.scope, "method": "\0"})
            if match is Match.PARTIAL:
                methods |= set(getattr(route, "methods", None) or ())
        if methods:
            response.headers["Allow"] = ", ".join(sorted(methods))
    return response


class _Elsewhere:
    """The job worker of a server process whose jobs run in the job runner process: that one
    polls the store (``poll_seconds``), so a submission has nothing to wake here."""

    def wake(self) -> None:
        pass


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the background services with the server, stop them (in reverse) with it."""
    started = []
    try:
        for service in app.state.services:
            await service.start()
            started.append(service)
        yield
    finally:
        for service in reversed(started):
            await service.stop()

"""Bounds on what one request may cost before any route sees it (docs/security.md).

Two layers, because uvicorn runs either of two HTTP parsers and neither bounds headers the same
way:

- :class:`HeaderGuard`, ASGI middleware: more than :data:`MAX_HEADER_COUNT` header fields, or more
  than :data:`MAX_HEADER_BYTES` of names and values, answer 431 in the form's error body. It works
  under any server (the tests' in-process one too), but only once the server has read the head.
- :func:`server_options` for ``listhygiene serve``: h11 refuses a head over
  :data:`MAX_HEAD_BYTES` itself; with httptools (uvicorn's choice when it is installed) the
  protocol of ``bounded_httptools`` counts the bytes of a head as they arrive and closes the
  connection once it passes the bound, so a megabyte header line is never held, let alone served.

JSON bodies are bounded per route by :func:`listhygiene.service.request_body.read_body`.
"""

import importlib.util
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from listhygiene.errors import FormABadRequest, FormBInvalidRequest, ServiceError
from listhygiene.service import FORM_B_ROOT

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_HEADER_COUNT",
    "MAX_HEAD_BYTES",
    "HeaderGuard",
    "refusal",
    "server_options",
]

#: Header fields one request may carry (browsers send about 20, proxies add a few).
MAX_HEADER_COUNT = 100
#: Bytes of header names and values one request may carry (nginx's default buffers: 8 KiB a line).
MAX_HEADER_BYTES = 16 * 1024
#: Bytes of a whole head (request line, headers, line ends) the server reads before giving up.
MAX_HEAD_BYTES = 32 * 1024

_TOO_LARGE = 431


def refusal(path: str, details: str) -> ServiceError:
    form_b = path.startswith(FORM_B_ROOT)
    error = FormBInvalidRequest if form_b else FormABadRequest
    return error(details=details, status=_TOO_LARGE)


class HeaderGuard:
    """431 for a request with too many header fields or too many header bytes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            size = sum(len(name) + len(value) for name, value in headers)
            problem = None
            if len(headers) > MAX_HEADER_COUNT:
                problem = f"{len(headers)} header fields; at most {MAX_HEADER_COUNT}"
            elif size > MAX_HEADER_BYTES:
                problem = f"{size} bytes of headers; at most {MAX_HEADER_BYTES}"
            if problem:
                from fastapi.responses import JSONResponse

                error = refusal(str(scope.get("path", "")), problem)
                response = JSONResponse(error.body(), status_code=error.status)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def server_options() -> dict[str, Any]:
    """uvicorn settings that bound a request head whichever parser runs."""
    options: dict[str, Any] = {"h11_max_incomplete_event_size": MAX_HEAD_BYTES}
    if importlib.util.find_spec("httptools") is not None:
        # by name: uvicorn imports it (this module is imported by it, not the other way round)
        options["http"] = "listhygiene.service.bounded_httptools:BoundedHttpToolsProtocol"
    return options

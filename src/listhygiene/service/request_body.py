"""Reading a request's JSON body: bounded in bytes, validated against a model, refused in the
form's own words (400, or 413 past the model's ``max_body_bytes``; docs/security.md)."""

from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from listhygiene.errors import FormABadRequest, FormAFileTooLarge, ServiceError

__all__ = ["DEFAULT_BODY_BYTES", "read_body"]

_Model = TypeVar("_Model", bound=BaseModel)


#: Bytes a JSON body may have unless its model says otherwise (``max_body_bytes``).
DEFAULT_BODY_BYTES = 64 * 1024


async def read_body(request: Request, model: type[_Model], bad: type[ServiceError]) -> _Model:
    """The JSON body as ``model``; ``bad`` (the form's 400) when it is not.

    Routes call this after their key dependency rather than declaring the body as a parameter:
    FastAPI validates declared bodies before any dependency, so a malformed body sent without a
    key would answer 400 instead of 401, and would not count against the key's rate limit.

    The body is read up to the model's ``max_body_bytes`` (the spec's limits with room to spare,
    docs/security.md) and refused with 413 past it, whether or not a ``Content-Length`` said so.
    """
    limit = int(getattr(model, "max_body_bytes", DEFAULT_BODY_BYTES))
    raw = await _bounded_body(request, limit, bad)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
        raise bad(details="; ".join(parts) or "Invalid request body") from None


async def _bounded_body(request: Request, limit: int, bad: type[ServiceError]) -> bytes:
    def too_large() -> ServiceError:
        details = f"the request body is over {limit:,} bytes"
        if issubclass(bad, FormABadRequest):
            return FormAFileTooLarge("Request body too large", details=details)
        return bad(details=details, status=413)

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)

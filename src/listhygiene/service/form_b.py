"""Form B (spec/form-b.md): ``Authorization: Bearer <key>``, bare JSON bodies.

This slice: ``POST /verify`` and ``GET /credits``. Every response of a known key carries the
``X-RateLimit-*`` headers of its hourly window (see listhygiene.service.auth).
"""

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from listhygiene.engine.syntax import parse_address
from listhygiene.errors import (
    FormBInsufficientCredits,
    FormBInvalidEmail,
    FormBInvalidRequest,
    FormBTimeout,
)
from listhygiene.service.auth import FormBKey, form_b_key
from listhygiene.service.charging import verify_charged
from listhygiene.service.request_body import read_body
from listhygiene.service.store import Store
from listhygiene.service.wire import iso

__all__ = ["build"]


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_body_bytes: ClassVar[int] = 8 * 1024

    email: StrictStr
    smtp_check: StrictBool = True
    #: Milliseconds the verification may take.
    timeout: Annotated[StrictInt, Field(ge=1, le=30_000)] = 5_000


def build(app: FastAPI) -> FastAPI:
    """Add form B's routes to ``app`` (made by ``listhygiene.service.app.form_app``)."""

    @app.post("/verify")
    async def verify(
        request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        body = await read_body(request, VerifyRequest, FormBInvalidRequest)
        if parse_address(body.email) is None:
            raise FormBInvalidEmail(details=f"Not a valid address: {body.email!r}")
        try:
            results, _ = await verify_charged(
                request,
                key.row.id,
                [body.email],
                check_smtp=body.smtp_check,
                insufficient=FormBInsufficientCredits,
                timeout=body.timeout / 1000,
            )
        except TimeoutError:
            raise FormBTimeout(details=f"No verdict within {body.timeout} ms") from None
        return results[body.email].to_form_b()

    @app.get("/credits")
    async def credits(
        request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        store: Store = request.app.state.store
        account = await run_in_threadpool(store.credits, key.row.id)
        return {
            "available": account.balance,
            "used": account.consumed,
            "total": account.added,
            "plan": key.row.plan,
            # Credits do not expire; what resets is the hourly request window shown below.
            "resets_at": iso(datetime.fromtimestamp(key.hour_hit.reset, UTC)),
            "rate_limit": {
                "requests_per_hour": key.hour_limit,
                "remaining": key.hour_hit.remaining,
            },
        }

    return app

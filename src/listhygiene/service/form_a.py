"""Form A (spec/form-a.md): ``LISTHYGIENE-API-KEY`` header, every answer in the envelope.

This slice: ``POST /verify/single``, ``POST /verify/bulk`` and ``GET /credits``.
"""

import time
from typing import Annotated, Any, ClassVar

from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.concurrency import run_in_threadpool

from listhygiene.errors import FormABadRequest, FormAInsufficientCredits
from listhygiene.service.auth import form_a_key
from listhygiene.service.charging import verify_charged
from listhygiene.service.request_body import read_body
from listhygiene.service.store import ApiKeyRow, Store
from listhygiene.service.wire import iso, success
from listhygiene.statuses import Status

__all__ = ["MAX_BULK", "build"]

#: Addresses per ``POST /verify/bulk`` call at most.
MAX_BULK = 50


class SingleRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_body_bytes: ClassVar[int] = 8 * 1024

    email: StrictStr
    check_smtp: StrictBool = True


class BulkRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    #: 50 addresses of up to 320 characters, JSON-escaped, with room to spare.
    max_body_bytes: ClassVar[int] = 128 * 1024

    emails: Annotated[list[StrictStr], Field(min_length=1, max_length=MAX_BULK)]
    check_smtp: StrictBool = True


def build(app: FastAPI) -> FastAPI:
    """Add form A's routes to ``app`` (made by ``listhygiene.service.app.form_app``)."""

    @app.post("/verify/single")
    async def verify_single(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("single"))]
    ) -> dict[str, Any]:
        body = await read_body(request, SingleRequest, FormABadRequest)
        results, _ = await verify_charged(
            request,
            key.id,
            [body.email],
            check_smtp=body.check_smtp,
            insufficient=FormAInsufficientCredits,
            deadline=request.app.state.sync_deadline,
        )
        return success(results[body.email].to_form_a())

    @app.post("/verify/bulk")
    async def verify_bulk(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("bulk"))]
    ) -> dict[str, Any]:
        started = time.perf_counter()
        body = await read_body(request, BulkRequest, FormABadRequest)
        results, kept = await verify_charged(
            request,
            key.id,
            body.emails,
            check_smtp=body.check_smtp,
            insufficient=FormAInsufficientCredits,
            deadline=request.app.state.sync_deadline,
        )
        ordered = [results[email] for email in body.emails]  # input order, duplicates included
        return success(
            {
                "results": [r.to_form_a_batch_item() for r in ordered],
                "total_emails": len(ordered),
                "valid_emails": sum(r.status is Status.VALID for r in ordered),
                "invalid_emails": sum(r.status is Status.INVALID for r in ordered),
                "credits_used": kept,
                # The spec does not give the unit: ours is milliseconds (as response_time).
                "process_time": round((time.perf_counter() - started) * 1000),
            }
        )

    @app.get("/credits")
    async def credits(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("other"))]
    ) -> dict[str, Any]:
        store: Store = request.app.state.store
        account = await run_in_threadpool(store.credits, key.id)
        return success(
            {
                # One account per key: the account is the key's own.
                "account_id": key.id,
                "api_key_id": key.id,
                "api_key_name": key.name,
                "credits_balance": account.balance,
                "credits_consumed": account.consumed,
                "credits_added": account.added,
                "last_updated": iso(account.updated_at),
            }
        )

    return app

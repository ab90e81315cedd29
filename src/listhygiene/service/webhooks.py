"""Webhooks of both forms: registration, signed deliveries from a durable outbox.

Form A: ``POST /webhooks`` returns the webhook in the envelope, with its generated ``secret``
(shown only then); ``GET`` returns ``{webhooks, total}`` without secrets; ``DELETE`` returns
``{message, webhook_id}``. Form B: the client gives the secret; create returns ``{id, url,
events, is_active, created_at}``, list ``{webhooks, total}``, delete ``{id, deleted: true}``.
Unknown events or a refused URL: 400 (``4000`` / ``INVALID_REQUEST``); an unknown or another
key's id: 404 (``4040`` / ``NOT_FOUND``). Deliveries: :mod:`listhygiene.service.delivery` and
:mod:`listhygiene.service.outbox`.
"""

import secrets
from typing import Annotated, Any, ClassVar

from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from starlette.concurrency import run_in_threadpool

from listhygiene.errors import (
    FormABadRequest,
    FormANotFound,
    FormBInvalidRequest,
    FormBNotFound,
)
from listhygiene.service.auth import FormBKey, form_a_key, form_b_key
from listhygiene.service.delivery import MAX_URL_LENGTH, guard_url
from listhygiene.service.outbox import Outbox
from listhygiene.service.request_body import read_body
from listhygiene.service.store import ApiKeyRow, Store
from listhygiene.service.store import webhooks as webhook_store
from listhygiene.service.wire import iso, success

__all__ = ["EVENTS", "install"]

EVENTS: dict[str, tuple[str, ...]] = {
    "a": ("file.completed", "file.failed"),
    "b": ("verification.completed", "bulk.completed", "bulk.failed", "credits.low"),
}


class CreateA(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_body_bytes: ClassVar[int] = 16 * 1024

    url: Annotated[StrictStr, Field(min_length=1, max_length=MAX_URL_LENGTH)]
    events: Annotated[list[StrictStr], Field(min_length=1, max_length=20)]


class CreateB(CreateA):
    secret: Annotated[StrictStr, Field(min_length=1, max_length=512)]


async def _validate(request: Request, form: str, url: str, events: list[str]) -> list[str]:
    """The distinct events in order; raises the form's 400 for unknown events or a bad URL."""
    bad = FormABadRequest if form == "a" else FormBInvalidRequest
    unknown = [e for e in events if e not in EVENTS[form]]
    if unknown:
        raise bad(details=f"unknown events {', '.join(unknown)}; known: {', '.join(EVENTS[form])}")
    await guard_url(request.app.state, url, bad)
    return list(dict.fromkeys(events))


def _shape_a(hook: webhook_store.WebhookRow, *, with_secret: bool = False) -> dict[str, Any]:
    shaped: dict[str, Any] = {"id": hook.id, "url": hook.url, "events": hook.events}
    if with_secret:
        shaped["secret"] = hook.secret
    shaped.update(
        is_active=hook.is_active, created_at=iso(hook.created_at), updated_at=iso(hook.updated_at)
    )
    return shaped


def _shape_b(hook: webhook_store.WebhookRow) -> dict[str, Any]:
    return {
        "id": hook.id,
        "url": hook.url,
        "events": hook.events,
        "is_active": hook.is_active,
        "created_at": iso(hook.created_at),
    }


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _install_a(app: FastAPI) -> None:
    @app.post("/webhooks")
    async def create_webhook(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("other"))]
    ) -> dict[str, Any]:
        body = await read_body(request, CreateA, FormABadRequest)
        events = await _validate(request, "a", body.url, body.events)
        secret = "whsec_" + secrets.token_urlsafe(32)
        hook = await run_in_threadpool(
            webhook_store.create, _store(request), key.id, "a", body.url, events, secret
        )
        return success(_shape_a(hook, with_secret=True))

    @app.get("/webhooks")
    async def list_webhooks(
        request: Request, key: Annotated[ApiKeyRow, Depends(form_a_key("other"))]
    ) -> dict[str, Any]:
        hooks = await run_in_threadpool(webhook_store.list_webhooks, _store(request), key.id, "a")
        return success({"webhooks": [_shape_a(h) for h in hooks], "total": len(hooks)})

    @app.delete("/webhooks/{webhook_id}")
    async def delete_webhook(
        webhook_id: str,
        request: Request,
        key: Annotated[ApiKeyRow, Depends(form_a_key("other"))],
    ) -> dict[str, Any]:
        deleted = await run_in_threadpool(
            webhook_store.delete_webhook, _store(request), key.id, "a", webhook_id
        )
        if not deleted:
            raise FormANotFound(details=f"No webhook {webhook_id}")
        return success({"message": "Webhook deleted", "webhook_id": webhook_id})


def _install_b(app: FastAPI) -> None:
    @app.post("/webhooks")
    async def create_webhook(
        request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        body = await read_body(request, CreateB, FormBInvalidRequest)
        events = await _validate(request, "b", body.url, body.events)
        hook = await run_in_threadpool(
            webhook_store.create, _store(request), key.row.id, "b", body.url, events, body.secret
        )
        return _shape_b(hook)

    @app.get("/webhooks")
    async def list_webhooks(
        request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        hooks = await run_in_threadpool(
            webhook_store.list_webhooks, _store(request), key.row.id, "b"
        )
        return {"webhooks": [_shape_b(h) for h in hooks], "total": len(hooks)}

    @app.delete("/webhooks/{webhook_id}")
    async def delete_webhook(
        webhook_id: str, request: Request, key: Annotated[FormBKey, Depends(form_b_key)]
    ) -> dict[str, Any]:
        deleted = await run_in_threadpool(
            webhook_store.delete_webhook, _store(request), key.row.id, "b", webhook_id
        )
        if not deleted:
            raise FormBNotFound(details=f"No webhook {webhook_id}")
        return {"id": webhook_id, "deleted": True}


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add the webhook routes to both forms, and the delivery :class:`Outbox` to the services
    when this process runs the background work."""
    _install_a(app_a)
    _install_b(app_b)
    if not root.state.run_jobs:
        return  # the job runner process delivers them (listhygiene.service.runner)
    outbox = Outbox(
        root.state.store,
        allow_http=root.state.allow_http_webhooks,
        allow_private=root.state.allow_private_webhooks,
        resolve=root.state.webhook_resolver,
    )
    root.state.webhook_outbox = outbox
    root.state.services.append(outbox)

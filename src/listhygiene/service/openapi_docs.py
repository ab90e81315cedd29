"""The OpenAPI 3.0 documents of both forms, served at ``/a/v1/openapi.json`` and
``/b/v1/openapi.json``.

Each document is package data (``listhygiene/service/openapi/form-a.json``, ``form-b.json``),
served as it is stored, without authentication. Each describes every endpoint of its form
(spec/form-a.md, spec/form-b.md) with the decisions of PRODUCT.md: authentication, bodies, the
error codes and statuses per endpoint, headers (form B's ``X-RateLimit-*``).
"""

import json
from functools import cache
from importlib import resources
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import Response

__all__ = ["DOCUMENTS", "Form", "document", "document_bytes", "install"]

Form = Literal["a", "b"]

#: Each form's document, by resource name inside ``listhygiene.service``.
DOCUMENTS: dict[Form, str] = {"a": "openapi/form-a.json", "b": "openapi/form-b.json"}


@cache
def document_bytes(form: Form) -> bytes:
    """``form``'s document as stored in the package."""
    return resources.files("listhygiene.service").joinpath(DOCUMENTS[form]).read_bytes()


def document(form: Form) -> dict[str, Any]:
    """``form``'s document, parsed (a fresh copy each call)."""
    loaded: dict[str, Any] = json.loads(document_bytes(form))
    return loaded


def _serve(app: FastAPI, body: bytes) -> None:
    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_document() -> Response:
        return Response(content=body, media_type="application/json")


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Serve each form's document at ``GET /openapi.json`` of its mount."""
    _serve(app_a, document_bytes("a"))
    _serve(app_b, document_bytes("b"))

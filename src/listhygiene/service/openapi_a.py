"""Form A's OpenAPI 3.0 document, served at ``/a/v1/openapi.json``.

The document is package data (``listhygiene/service/openapi/form-a.json``), served as it is stored,
without authentication. It describes every endpoint of form A (spec/form-a.md) with the decisions
of PRODUCT.md: the ``LISTHYGIENE-API-KEY`` header, the envelope, the error codes per endpoint.
"""

import json
from functools import cache
from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

__all__ = ["DOCUMENT", "document", "document_bytes", "install"]

#: The document's resource name inside ``listhygiene.service``.
DOCUMENT = "openapi/form-a.json"


@cache
def document_bytes() -> bytes:
    """The document as stored in the package."""
    return resources.files("listhygiene.service").joinpath(DOCUMENT).read_bytes()


def document() -> dict[str, Any]:
    """The document, parsed (a fresh copy each call)."""
    loaded: dict[str, Any] = json.loads(document_bytes())
    return loaded


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Serve the document at ``GET /openapi.json`` of form A (``/a/v1/openapi.json``)."""
    body = document_bytes()

    @app_a.get("/openapi.json", include_in_schema=False)
    async def openapi_document() -> Response:
        return Response(content=body, media_type="application/json")

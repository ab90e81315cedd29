"""Form A's OpenAPI 3.0 document, served at ``/a/v1/openapi.json``."""

from fastapi import FastAPI


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add this part's routes and background services to the app (nothing yet)."""

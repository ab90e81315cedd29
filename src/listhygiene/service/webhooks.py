"""Webhooks of both forms: registration, signed deliveries from a durable outbox."""

from fastapi import FastAPI


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add this part's routes and background services to the app (nothing yet)."""

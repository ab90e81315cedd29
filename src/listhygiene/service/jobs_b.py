"""Form B bulk jobs: submit a list, follow the job, read its results in pages."""

from fastapi import FastAPI


def install(root: FastAPI, app_a: FastAPI, app_b: FastAPI) -> None:
    """Add this part's routes and background services to the app (nothing yet)."""

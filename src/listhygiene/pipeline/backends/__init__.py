"""Backends: what the pipeline verifies addresses with, built by one factory.

The pipeline speaks one small protocol (:mod:`.base`): *submit* a list of distinct addresses as
a job, then stream the job's *results* as Arrow tables. The package holds::

    base.py      Backend, JobRef, KEY: the protocol, and the errors of a job
    local.py     LocalBackend: the engine in this process
    remote.py    FormABackend, FormBBackend: a verification service (listhygiene.clients)
    waiting.py   wait_until_done: the one wait loop, polling or watching webhook events

and :func:`make_backend`, the one place a backend is built from its kind.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from listhygiene.engine import EngineSettings
from listhygiene.errors import ConfigurationError
from listhygiene.pipeline.backends.base import (
    KEY,
    Backend,
    InsufficientCredits,
    JobFailed,
    JobRef,
)
from listhygiene.pipeline.backends.local import LocalBackend
from listhygiene.pipeline.backends.waiting import WaitTimeout, wait_until_done
from listhygiene.results import results_table
from listhygiene.vocabulary import BACKEND_KINDS

if TYPE_CHECKING:
    from listhygiene.clients import ClientSettings
    from listhygiene.clients.events import EventStore

__all__ = [
    "KEY",
    "Backend",
    "InsufficientCredits",
    "JobFailed",
    "JobRef",
    "LocalBackend",
    "WaitTimeout",
    "engine_settings",
    "make_backend",
    "results_table",
    "wait_until_done",
]


def engine_settings(
    settings: EngineSettings | None = None, overrides: Mapping[str, Any] | None = None
) -> EngineSettings:
    """The local engine's settings: ``settings`` (``LISTHYGIENE_*`` when None) with
    ``overrides`` over them."""
    if settings is None:
        return EngineSettings(**dict(overrides or {}))
    return settings.model_copy(update=dict(overrides)) if overrides else settings


def make_backend(
    kind: "str | Backend" = "local",
    *,
    settings: EngineSettings | None = None,
    engine_overrides: Mapping[str, Any] | None = None,
    client_settings: "ClientSettings | None" = None,
    base_url: str | None = None,
    api_key: str | None = None,
    api_key_header: str | None = None,
    events: "EventStore | str | None" = None,
    **options: Any,
) -> Backend:
    """The one place a backend is built from its kind, for the pipeline, the CLI, Airflow and
    Dagster alike (docs/backends.md).

    ``local`` takes the engine's ``settings`` (``LISTHYGIENE_*`` when none) with
    ``engine_overrides`` over them. ``form-a`` / ``form-b`` take ``client_settings``, or
    ``base_url`` and ``api_key`` (and form A's ``api_key_header``); ``events`` is a webhook
    receiver's event store (or its path); other ``options`` go to the remote backend's
    constructor (``poll_seconds``, ``file_threshold``, ``webhook_url``...). A ready
    :class:`Backend` is returned as it is. Anything that cannot work raises
    :class:`~listhygiene.errors.ConfigurationError`.
    """
    if isinstance(kind, Backend):
        return kind
    if kind == "local":
        return LocalBackend(engine_settings(settings, engine_overrides))
    if kind not in BACKEND_KINDS:
        known = ", ".join(BACKEND_KINDS)
        raise ConfigurationError(f"unknown backend {kind!r} (known: {known})")
    from listhygiene.clients import DEFAULT_API_KEY_HEADER, ClientSettings
    from listhygiene.pipeline.backends.remote import FormABackend, FormBBackend

    if client_settings is None:
        if not base_url or not api_key:
            raise ConfigurationError(f"a {kind} backend needs a base URL and an API key")
        client_settings = ClientSettings(
            base_url=base_url,
            api_key=api_key,
            api_key_header=api_key_header or DEFAULT_API_KEY_HEADER,
        )
    if isinstance(events, str):
        from listhygiene.clients.events import EventStore

        events = EventStore(events)
    cls = FormABackend if kind == "form-a" else FormBBackend
    return cls(client_settings, events=events, **options)

"""The service built from a configuration in the environment, for server processes that uvicorn
starts itself (``listhygiene serve --workers N``).

uvicorn's worker processes import the application by name and cannot be handed objects, so
``serve`` writes its whole configuration (database URL, engine settings, webhook flags, worker
options) as JSON in :data:`CONFIG_VARIABLE`, and each process builds its own store and engine
from it with :func:`app_from_environment`; the job runner process reads the same configuration
(listhygiene.service.runner). The processes share everything that matters through the database:
jobs are claimed, credits reserved and rate limits counted there.
"""

import gc
import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["CONFIG_VARIABLE", "ServeConfig", "app_from_environment", "build_app", "open_feedback"]

CONFIG_VARIABLE = "LISTHYGIENE_SERVE_CONFIG"


@dataclass(frozen=True)
class ServeConfig:
    """Everything a server process needs to build the app."""

    db: str
    engine: dict[str, Any] = field(default_factory=dict)
    allow_http_webhooks: bool = False
    allow_private_webhooks: bool = False
    sync_deadline: float = 25.0
    worker: dict[str, Any] = field(default_factory=dict)
    #: False in the server processes of ``serve``: its job runner process runs the jobs and the
    #: webhook outbox (listhygiene.service.runner).
    run_jobs: bool = True
    #: A verdict store whose feedback events apply to every result (``serve --verdicts``).
    feedback: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ServeConfig":
        return cls(**json.loads(text))


def build_app(config: ServeConfig) -> "FastAPI":
    """The app of ``config``, with its own store and engine (closed when the server stops)."""
    from listhygiene.engine import Engine, EngineSettings
    from listhygiene.service.app import create_app
    from listhygiene.service.store import Store

    store = Store(config.db)
    app = create_app(
        store,
        Engine(EngineSettings(**config.engine)),
        allow_http_webhooks=config.allow_http_webhooks,
        allow_private_webhooks=config.allow_private_webhooks,
        sync_deadline=config.sync_deadline,
        worker_options=config.worker,
        run_jobs=config.run_jobs,
        feedback=open_feedback(config.feedback),
    )
    app.state.services.insert(0, _Closing(store))  # started first, so stopped last
    return app


def open_feedback(url: str | None) -> Any:
    """The feedback of the verdict store at ``url`` as the service applies it (looking again
    for events every 30 s), or None without one (docs/feedback.md, "In the service")."""
    if not url or url.strip().lower() == "none":
        return None
    from listhygiene.verdicts import Freshness, VerdictStore
    from listhygiene.verdicts.feedback import Feedback

    return Feedback(VerdictStore(url), Freshness.of(None).limit("valid"), recheck=30.0)


def _freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, the app, the engine's lists) out of the
    garbage collector's sight. A server process holds millions of such objects (pandas,
    pyarrow, SQLAlchemy, the disposable-domain lists) and a full collection walked all of them,
    stalling every request for tens of milliseconds: most of the p99 latency under load
    (docs/service.md, "Speed"). Objects made later are collected as usual."""
    gc.collect()
    gc.freeze()


def app_from_environment() -> "FastAPI":
    """uvicorn's factory: the app of the configuration ``serve`` put in the environment."""
    text = os.environ.get(CONFIG_VARIABLE)
    if not text:
        raise RuntimeError(f"{CONFIG_VARIABLE} is not set: start the server with listhygiene serve")
    return build_app(ServeConfig.from_json(text))


class _Closing:
    """A service whose start freezes the start-up objects and whose stop closes the store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def start(self) -> None:
        _freeze_startup_objects()

    async def stop(self) -> None:
        self.store.close()

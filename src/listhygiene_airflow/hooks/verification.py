"""The hook: a verification backend built from an Airflow connection, and the job statuses.

The connection (type ``listhygiene``) says which backend verifies: ``local`` (the engine on the
worker itself), ``form-a`` or ``form-b`` (a remote service). Remote backends take their base URL
from the ``base_url`` extra or the Host field, and their key from the Password field. Extras of
the local engine (``dns_server``, ``smtp_port``, ``helo``, ``allow_private_mx`` and any other
:class:`~listhygiene.engine.EngineSettings` field) become its settings; what is not set comes from
``LISTHYGIENE_*`` environment variables, as for the CLI.

The hook owns every call to a service and the job-status vocabulary (:data:`TERMINAL_STATUSES`,
:meth:`ListHygieneHook.is_terminal`, spelled once in :mod:`listhygiene.vocabulary`); operator,
trigger and sensor ask it, never a client. The backend itself comes from the core's
:func:`~listhygiene.pipeline.backends.make_backend`, as for the CLI and Dagster.
"""

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseHook

from listhygiene.pipeline import JobRef, make_backend
from listhygiene.vocabulary import BACKEND_KINDS, JOB_EVENTS, TERMINAL_JOB_STATUSES, JobStatus

if TYPE_CHECKING:
    from listhygiene.clients import ClientSettings, EventStore
    from listhygiene.engine import EngineSettings
    from listhygiene.pipeline import Backend

__all__ = [
    "BACKENDS",
    "COMPLETED",
    "FAILED",
    "TERMINAL_STATUSES",
    "JobState",
    "ListHygieneHook",
    "sqlalchemy_url",
    "verdicts_url_of",
]

#: Airflow connection types and the SQLAlchemy dialect (and driver) that reads them.
_DIALECTS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql",
    "mssql": "mssql+pyodbc",
    "oracle": "oracle",
    "snowflake": "snowflake",
    "duckdb": "duckdb",
    "sqlite": "sqlite",
}

#: The backends a connection may name.
BACKENDS = BACKEND_KINDS
COMPLETED: str = JobStatus.COMPLETED
FAILED: str = JobStatus.FAILED
#: A job in one of these states will not change again.
TERMINAL_STATUSES: frozenset[str] = frozenset(TERMINAL_JOB_STATUSES)
#: Extras that are not engine settings.
_NOT_ENGINE = frozenset(
    {
        "backend",
        "base_url",
        "api_key_header",
        "events_path",
        "check_smtp",
        "verdicts",
        "verdicts_conn_id",
        "max_age",
    }
)


@dataclasses.dataclass(frozen=True)
class JobState:
    """A job's status as the service reports it (``pending``, ``processing``, ``completed``,
    ``failed``), and why it failed."""

    job_id: str
    status: str
    error: str | None = None

    @property
    def is_terminal(self) -> bool:
        return ListHygieneHook.is_terminal(self.status)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ListHygieneHook(BaseHook):
    """The verification backend of a ``listhygiene`` connection."""

    conn_name_attr = "listhygiene_conn_id"
    default_conn_name = "listhygiene_default"
    conn_type = "listhygiene"
    hook_name = "listhygiene"

    TERMINAL_STATUSES: ClassVar[frozenset[str]] = TERMINAL_STATUSES

    def __init__(self, listhygiene_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.listhygiene_conn_id = listhygiene_conn_id
        self._conn: Any = None

    # -- the connection ------------------------------------------------------------------------

    @property
    def connection(self) -> Any:
        if self._conn is None:
            self._conn = self.get_connection(self.listhygiene_conn_id)
        return self._conn

    async def aload_connection(self) -> Any:
        """Fetch the connection from async code (a trigger): the sync path may not be used."""
        if self._conn is None:
            self._conn = await self.aget_connection(self.listhygiene_conn_id)
        return self._conn

    @property
    def extras(self) -> dict[str, Any]:
        raw = self.connection.extra_dejson or {}
        prefix = f"extra__{self.conn_type}__"
        # The UI stores form fields either plainly or with the old prefix: accept both.
        values = {k.removeprefix(prefix): v for k, v in raw.items()}
        return {k: v for k, v in values.items() if v not in (None, "")}

    @property
    def backend_name(self) -> str:
        name = str(self.extras.get("backend", "local")).lower()
        if name not in BACKENDS:
            raise ValueError(
                f"connection {self.listhygiene_conn_id!r}: backend {name!r} is not one of "
                f"{', '.join(BACKENDS)}"
            )
        return name

    @property
    def check_smtp(self) -> bool | None:
        """The connection's default for probing mailboxes (None: the backend's own)."""
        value = self.extras.get("check_smtp")
        return None if value is None else _boolean(value)

    @property
    def events_path(self) -> str | None:
        value = self.extras.get("events_path")
        return str(value) if value else None

    # -- the verdict store ---------------------------------------------------------------------

    @property
    def max_age(self) -> str | None:
        """The connection's default ``max_age`` of reused verdicts (``30d``, ``valid=14d,...``)."""
        value = self.extras.get("max_age")
        return None if value is None else str(value)

    def verdicts_url(self) -> str | None:
        """The verdict store the connection names: the SQLAlchemy URL of the Airflow connection
        in the ``verdicts_conn_id`` extra (a Postgres connection, typically), else the
        ``verdicts`` extra (a URL, or ``none``); None when it names none (``clean`` then takes
        ``LISTHYGIENE_VERDICTS``, else the worker's own cache file)."""
        conn_id = self.extras.get("verdicts_conn_id")
        if conn_id:
            return verdicts_url_of(str(conn_id))
        value = self.extras.get("verdicts")
        return None if value is None else str(value)

    def engine_settings(self) -> "EngineSettings":
        """The local engine's settings: the connection's extras over ``LISTHYGIENE_*``."""
        from listhygiene.engine import EngineSettings

        fields = EngineSettings.model_fields
        given = {k: v for k, v in self.extras.items() if k in fields and k not in _NOT_ENGINE}
        unknown = sorted(set(self.extras) - set(fields) - _NOT_ENGINE)
        if unknown:
            self.log.warning("ignoring unknown extras of %s: %s", self.conn_id_text, unknown)
        return EngineSettings(**given)

    @property
    def shared_limits(self) -> str:
        """The store the local engines of the deployment's workers share (the ``shared_limits``
        extra, else ``LISTHYGIENE_SHARED_LIMITS``); ``none`` for a remote backend or none set."""
        if self.backend_name != "local":
            return "none"
        return self.engine_settings().shared_limits or "none"

    @property
    def conn_id_text(self) -> str:
        return repr(self.listhygiene_conn_id)

    def client_settings(self) -> "ClientSettings":
        """Where the remote service is and how to authenticate (form A or form B)."""
        from listhygiene.clients import DEFAULT_API_KEY_HEADER, ClientSettings

        conn = self.connection
        base_url = self.extras.get("base_url") or _url_from_host(conn)
        if not base_url:
            raise ValueError(
                f"connection {self.conn_id_text}: a {self.backend_name} backend needs a base URL "
                "(the base_url extra or the Host field)"
            )
        if not conn.password:
            raise ValueError(f"connection {self.conn_id_text}: the API key goes in the password")
        return ClientSettings(
            base_url=str(base_url),
            api_key=conn.password,
            api_key_header=str(self.extras.get("api_key_header") or DEFAULT_API_KEY_HEADER),
        )

    def event_store(self) -> "EventStore | None":
        if self.events_path is None:
            return None
        from listhygiene.clients import EventStore

        return EventStore(self.events_path)

    # -- the backend ---------------------------------------------------------------------------

    def get_backend(self, **options: Any) -> "Backend":
        """A new backend for one run (``options`` go to the remote backends' constructor)."""
        name = self.backend_name
        if name == "local":
            return make_backend(name, settings=self.engine_settings())
        options.setdefault("events", self.event_store())
        if name == "form-a" and self.extras.get("file_threshold") not in (None, ""):
            options.setdefault("file_threshold", int(self.extras["file_threshold"]))
        return make_backend(name, client_settings=self.client_settings(), **options)

    def get_conn(self) -> "Backend":
        return self.get_backend()

    # -- job statuses --------------------------------------------------------------------------

    @staticmethod
    def is_terminal(status: str) -> bool:
        return str(status) in TERMINAL_STATUSES

    def job_ref(self, job_id: str) -> JobRef:
        """A reference to a job submitted elsewhere (e.g. by ``listhygiene clean``)."""
        return JobRef(self.backend_name, job_id, 0, True, {"mode": "file"})

    async def job_status(self, job: JobRef | Mapping[str, Any]) -> JobState:
        """The job's state on its service, one request. Jobs with nothing to wait on (the local
        engine's, form A's inline ``/verify/bulk`` calls) are ``completed``."""
        if not isinstance(job, JobRef):
            job = JobRef.from_dict(job)
        if job.backend == "local" or job.data.get("mode") == "bulk":
            return JobState(job.job_id, COMPLETED)
        if job.backend not in ("form-a", "form-b"):
            raise ValueError(f"job {job.job_id}: unknown backend {job.backend!r}")
        from listhygiene.clients import AsyncFormAClient, AsyncFormBClient

        settings = self.client_settings()
        client: Any = (AsyncFormAClient if job.backend == "form-a" else AsyncFormBClient)(settings)
        try:
            if job.backend == "form-a":
                found = await client.file_job(job.job_id)
            else:
                found = await client.bulk_job(job.job_id)
        finally:
            await client.aclose()
        error = getattr(found, "error", None)
        detail = f"{error.code}: {error.message}" if error is not None else None
        return JobState(job.job_id, str(getattr(found.status, "value", found.status)), detail)

    def job_status_sync(self, job: JobRef | Mapping[str, Any]) -> JobState:
        """:meth:`job_status` from synchronous code (an operator, a sensor's poke)."""
        return asyncio.run(self.job_status(job))

    @staticmethod
    def job_events(job: JobRef | Mapping[str, Any]) -> tuple[str, str]:
        """The webhook events that end ``job`` (completed, failed)."""
        name = job.backend if isinstance(job, JobRef) else job["backend"]
        return JOB_EVENTS["a" if name == "form-a" else "b"]

    async def credits(self) -> int:
        """The remote key's balance (credits available)."""
        from listhygiene.clients import AsyncFormAClient, AsyncFormBClient

        settings = self.client_settings()
        if self.backend_name == "form-a":
            client_a = AsyncFormAClient(settings)
            try:
                return int((await client_a.credits()).credits_balance)
            finally:
                await client_a.aclose()
        client_b = AsyncFormBClient(settings)
        try:
            return int((await client_b.credits()).available)
        finally:
            await client_b.aclose()

    def test_connection(self) -> tuple[bool, str]:
        """The UI's *Test* button: the settings parse, and a remote key answers."""
        try:
            if self.backend_name == "local":
                self.engine_settings()
                return True, "local engine settings are valid"
            credits = asyncio.run(self.credits())
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return True, f"the key works; {credits:,} credits available"


def verdicts_url_of(conn_id: str) -> str:
    """The SQLAlchemy URL of the Airflow database connection ``conn_id``, as a verdict store
    (its ``sqlalchemy_url`` extra, or a URL built from its fields)."""
    return sqlalchemy_url(BaseHook.get_connection(conn_id))


def sqlalchemy_url(connection: Any) -> str:
    """The SQLAlchemy URL of an Airflow database connection (the ``sqlalchemy_url`` extra wins)."""
    extra = connection.extra_dejson or {}
    if extra.get("sqlalchemy_url"):
        return str(extra["sqlalchemy_url"])
    from sqlalchemy.engine import URL

    conn_type = (connection.conn_type or "").lower()
    dialect = _DIALECTS.get(conn_type)
    if dialect is None:
        raise ValueError(
            f"connection {connection.conn_id!r}: no SQLAlchemy dialect known for type "
            f"{conn_type!r}; set the sqlalchemy_url extra"
        )
    if dialect == "sqlite":
        return f"sqlite:///{connection.host or connection.schema}"
    url = URL.create(
        dialect,
        username=connection.login or None,
        password=connection.password or None,
        host=connection.host or None,
        port=connection.port or None,
        database=connection.schema or None,
    )
    return url.render_as_string(hide_password=False)


def _url_from_host(conn: Any) -> str | None:
    """``scheme://host:port/path`` from the Host field (which may hold a scheme, a path and a
    port of its own), Schema (the scheme, ``https`` by default) and Port."""
    from urllib.parse import urlsplit, urlunsplit

    host = str(conn.host or "").strip()
    if not host:
        return None
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}"
    parts = urlsplit(host)
    if conn.port:
        if parts.port is not None and parts.port != int(conn.port):
            raise ValueError(
                f"connection {conn.conn_id!r}: the Host URL names port {parts.port} and the "
                f"Port field {conn.port}; leave one out"
            )
        if parts.port is None:
            netloc = f"{parts.netloc}:{int(conn.port)}"
            parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")

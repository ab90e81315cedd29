"""Configuration-only Dagster resources that build listhygiene's plain objects.

:class:`VerificationBackendResource` builds a :class:`~listhygiene.pipeline.backends.Backend`
(the local engine, or a remote service in form A or form B) with :meth:`get_backend`;
:class:`ContactSourceResource` says where the contact list is (a file, a folder of exports, or a
SQLAlchemy URL with a table or a query) and reads it, or one partition of it, as a DataFrame.
Neither knows anything of assets: the asset factory (``assets.py``) calls them.

Secrets go in as ``dg.EnvVar("NAME")``: Dagster resolves them when a run starts, not when the
definitions load.
"""

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

import dagster as dg

if TYPE_CHECKING:
    import pandas as pd

    from listhygiene.clients import ClientSettings
    from listhygiene.engine import EngineSettings
    from listhygiene.pipeline import Backend, CleanResult, WriteBack

__all__ = [
    "ContactSourceResource",
    "VerdictStoreResource",
    "VerificationBackendResource",
    "WriteBackResource",
    "chunk_bounds",
    "chunk_key",
]

#: The header the project's own service reads the form A key from (``listhygiene.clients``).
_DEFAULT_API_KEY_HEADER = "LISTHYGIENE-API-KEY"


class VerificationBackendResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """What verifies the addresses: ``kind`` local (this process, SMTP included), form-a or
    form-b (a remote service: ``base_url`` ending in ``/v1`` and ``api_key``).

    Engine options left unset come from the ``LISTHYGIENE_*`` environment, as for the command
    line. ``events_path`` makes a remote backend wait on the webhook events that
    ``listhygiene receive-webhooks`` records there instead of polling the job's status (it still
    reads the status when an event arrives, and every ``webhook_fallback`` seconds).
    """

    kind: Literal["local", "form-a", "form-b"] = Field(
        default="local", description="local, form-a or form-b."
    )
    # -- remote services
    base_url: str | None = Field(
        default=None, description="The service's base URL, ending in /v1 (form-a, form-b)."
    )
    api_key: str | None = Field(default=None, description="The API key: use dg.EnvVar.")
    api_key_header: str = Field(
        default=_DEFAULT_API_KEY_HEADER, description="Form A: the header that carries the key."
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="First polling interval.")
    max_poll_seconds: float = Field(default=30.0, gt=0, description="Longest polling interval.")
    events_path: str | None = Field(
        default=None, description="Webhook event store (SQLite file) to wait on instead of polling."
    )
    webhook_fallback: float = Field(
        default=300.0, gt=0, description="With events_path: read the status this often anyway."
    )
    webhook_url: str | None = Field(
        default=None, description="Form B: the URL the service sends job events to."
    )
    # -- the local engine
    dns_server: str | None = Field(default=None, description="HOST[:PORT] of the nameserver.")
    smtp_port: int | None = Field(default=None, description="SMTP port of the mail hosts.")
    allow_private_mx: bool | None = Field(
        default=None, description="Accept mail hosts on private or loopback addresses."
    )
    helo: str | None = Field(default=None, description="EHLO name (this machine's FQDN).")
    dns_timeout: float | None = Field(default=None, description="Seconds for a DNS lookup.")
    smtp_timeout: float | None = Field(default=None, description="Seconds for an SMTP step.")
    retry_delays: list[float] | None = Field(
        default=None, description="Waits before retrying a temporary refusal (greylisting)."
    )
    socks_proxy: str | None = Field(
        default=None,
        description="socks5://host:port for every session, or google=socks5://...,*=... .",
    )
    provider_limits: str | None = Field(
        default=None, description="TOML file of per-provider budgets (--provider-limits)."
    )
    shared_limits: str | None = Field(
        default=None,
        description=(
            "redis://host:port/db or postgresql://... shared by every step and process of the "
            "fleet: one politeness budget per mail host (docs/deploy.md); none: this process."
        ),
    )
    engine: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Any other EngineSettings field by name (rcpt_per_session, host_concurrency, ...), "
            "as the Airflow connection's extras give them; the fields above win."
        ),
    )
    # -- both
    check_smtp: bool | None = Field(
        default=None, description="Probe mailboxes over SMTP (the backend's default when unset)."
    )

    def engine_settings(self) -> "EngineSettings":
        """The local engine's settings: the fields set here over the ``LISTHYGIENE_*`` ones."""
        from listhygiene.engine import EngineSettings

        names = ("dns_server", "smtp_port", "allow_private_mx", "helo", "dns_timeout")
        values: dict[str, Any] = {
            n: getattr(self, n)
            for n in (*names, "smtp_timeout", "socks_proxy", "provider_limits", "shared_limits")
        }
        if self.retry_delays is not None:
            values["retry_delays"] = tuple(self.retry_delays)
        given = {k: v for k, v in values.items() if v is not None}
        unknown = sorted(set(self.engine or {}) - set(EngineSettings.model_fields))
        if unknown:
            from listhygiene.errors import ConfigurationError

            raise ConfigurationError(f"engine: not engine settings: {', '.join(unknown)}")
        return EngineSettings(**{**(self.engine or {}), **given})

    def get_backend(self) -> "Backend":
        """A new backend for one run (the pipeline closes it when the run ends), built by the
        core's ``make_backend`` as for the CLI and Airflow (docs/backends.md)."""
        from listhygiene.errors import ConfigurationError
        from listhygiene.pipeline import make_backend

        if self.kind == "local":
            return make_backend("local", settings=self.engine_settings())
        if not self.base_url or not self.api_key:
            raise ConfigurationError(f"a {self.kind} backend needs base_url and api_key")
        options: dict[str, Any] = {
            "poll_seconds": self.poll_seconds,
            "max_poll_seconds": self.max_poll_seconds,
            "webhook_fallback": self.webhook_fallback,
        }
        if self.kind == "form-b":
            options["webhook_url"] = self.webhook_url
        return make_backend(
            self.kind,
            base_url=self.base_url,
            api_key=self.api_key,
            api_key_header=self.api_key_header,
            events=self.events_path or None,
            **options,
        )

    def client_settings(self) -> "ClientSettings":
        """Where the remote service is (form A or form B), to cancel its jobs on termination."""
        from listhygiene.clients import ClientSettings
        from listhygiene.errors import ConfigurationError

        if not self.base_url or not self.api_key:
            raise ConfigurationError(f"a {self.kind} backend needs base_url and api_key")
        return ClientSettings(
            base_url=self.base_url, api_key=self.api_key, api_key_header=self.api_key_header
        )

    def describe(self) -> str:
        """One line for metadata and logs; never the key."""
        if self.kind == "local":
            return "local engine"
        return f"{self.kind} service at {self.base_url}"


class VerdictStoreResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The verdict store the verification asset reuses fresh verdicts from and keeps new ones in
    (docs/pipeline.md, "Verdict store").

    ``url`` is a SQLAlchemy URL (``postgresql://...`` to share one store between runs, machines
    and partitions; ``sqlite:///path.db``), or ``none`` for no store; unset, the
    ``LISTHYGIENE_VERDICTS`` variable, else ``verdicts.sqlite`` in the user's cache directory.
    A URL with a password goes in as ``dg.EnvVar``.
    """

    url: str | None = Field(
        default=None, description="SQLAlchemy URL of the store, or none (unset: the default)."
    )
    max_age: str | None = Field(
        default=None,
        description="How old a reused verdict may be: 30d, or per status valid=14d,risky=1d.",
    )
    fresh: bool = Field(
        default=False, description="Verify everything again (the store is still updated)."
    )

    def clean_options(self, *, fresh: bool = False) -> dict[str, Any]:
        """``verdicts``, ``max_age`` and ``fresh`` for :func:`listhygiene.clean`."""
        return {"verdicts": self.url, "max_age": self.max_age, "fresh": self.fresh or fresh}

    def describe(self) -> str:
        """The store's URL without its password (the default when unset)."""
        if self.url is None:
            return "the default verdict store (LISTHYGIENE_VERDICTS, else the user's cache)"
        if self.url.strip().lower() == "none":
            return "no verdict store"
        return _masked(self.url)


class WriteBackResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """A warehouse table the verification asset upserts its result columns into once the run
    has published (docs/pipeline.md, "Writing back"): PostgreSQL, SQLite or DuckDB, keyed by
    an input column or the verified address. A URL with a password goes in as ``dg.EnvVar``.
    """

    url: str = Field(description="SQLAlchemy URL of the database.")
    table: str = Field(description="The table (schema.table), created when missing.")
    key: str | None = Field(
        default=None, description="The input column keying the table (unset: the address)."
    )

    def write(self, result: "CleanResult") -> "WriteBack":
        return result.write_back(self.url, self.table, key=self.key)

    def describe(self) -> str:
        url = _masked(self.url)
        return f"{self.table} at {url}"


def _masked(url: str) -> str:
    """A database URL with its password hidden, for logs and metadata."""
    return re.sub(r"(://[^:/@]+:)[^@]+@", r"\1***@", url)


_CHUNK = re.compile(r"^rows-(\d+)-(\d+)$")


def chunk_key(first: int, last: int) -> str:
    """The partition key of input rows ``first`` to ``last`` (1-based, inclusive)."""
    return f"rows-{first}-{last}"


def chunk_bounds(key: str) -> tuple[int, int] | None:
    """``(first, last)`` of a chunk key, or None when ``key`` is not one (a file name)."""
    match = _CHUNK.match(key)
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    if first < 1 or last < first:
        raise ValueError(f"bad chunk key {key!r}: rows {first} to {last}")
    return first, last


class ContactSourceResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where the contact list is: a file (CSV, TSV, TXT, XLSX, XLS, Parquet, JSONL), a folder of
    exports (partitioned by file name), or a SQLAlchemy URL with ``table`` or ``query``.

    A partition key is either a chunk of rows, ``rows-<first>-<last>`` (see
    :func:`~listhygiene_dagster.partitions.row_chunks`), or the name of a file in the folder
    ``path`` (see :func:`~listhygiene_dagster.partitions.export_files`).
    """

    path: str = Field(description="A file, a folder of exports, or a SQLAlchemy URL.")
    table: str | None = Field(default=None, description="SQL: the table to read.")
    query: str | None = Field(default=None, description="SQL: the query to read.")
    email_column: str | None = Field(
        default=None, description="The email column (detected when unset)."
    )

    def location(self, partition_key: str | None = None) -> str:
        """The path or URL that holds the rows of ``partition_key`` (all rows: None)."""
        if partition_key is None or chunk_bounds(partition_key) is not None:
            return self.path
        name = Path(partition_key).name
        if name != partition_key or name in ("", ".", ".."):
            raise ValueError(f"partition key {partition_key!r} is not a file name")
        return os.path.join(self.path, name)

    def read(self, partition_key: str | None = None) -> "pd.DataFrame":
        """The rows of one partition (or all), as read by listhygiene's own sources: every
        record a row, text formats as strings. A chunk is read in a streaming pass."""
        import pyarrow as pa

        from listhygiene.pipeline import open_source

        source = open_source(self.location(partition_key), table=self.table, query=self.query)
        bounds = chunk_bounds(partition_key) if partition_key is not None else None
        parts: list[pa.Table] = []
        seen = 0
        for batch in source.batches():
            first_row = seen + 1
            seen += batch.num_rows
            if bounds is None:
                parts.append(pa.Table.from_batches([batch]))
                continue
            first, last = bounds
            if seen < first:
                continue
            start = max(first, first_row) - first_row
            stop = min(last, seen) - first_row + 1
            if stop > start:
                parts.append(pa.Table.from_batches([batch]).slice(start, stop - start))
            if seen >= last:
                break
        table = pa.concat_tables(parts) if parts else source.schema.empty_table()
        return table.to_pandas()

    def describe(self, partition_key: str | None = None) -> str:
        """The location, with a database URL's password masked."""
        text = self.location(partition_key)
        masked = re.sub(r"(://[^:/@]+:)[^@]+@", r"\1***@", text)
        if self.table:
            masked += f" (table {self.table})"
        elif self.query:
            masked += " (query)"
        if partition_key is not None and chunk_bounds(partition_key) is not None:
            first, last = chunk_bounds(partition_key) or (0, 0)
            masked += f", rows {first:,} to {last:,}"
        return masked

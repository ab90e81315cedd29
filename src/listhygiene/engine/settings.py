"""Engine settings: keyword arguments, or ``LISTHYGIENE_*`` environment variables.

The names are the product's (``--dns-server``, ``--smtp-port``, ``--helo``, ``--mail-from``,
``--concurrency``, ``--smtp-timeout``, ``--allow-private-mx``); the rest tune politeness and
retries and have safe defaults.
"""

import functools
import ipaddress
import socket
from pathlib import Path
from typing import Annotated, Any, TypedDict

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from listhygiene.engine.provider_limits import provider_budgets, read_provider_limits
from listhygiene.engine.proxies import parse_proxies

__all__ = ["EngineOptions", "EngineSettings"]


@functools.cache
def _fqdn() -> str:
    return socket.getfqdn()


class EngineSettings(BaseSettings):
    """How the engine resolves, connects and paces itself."""

    model_config = SettingsConfigDict(env_prefix="LISTHYGIENE_", frozen=True, extra="ignore")

    #: ``HOST[:PORT]`` of the nameserver to ask; the system's resolvers when absent.
    dns_server: str | None = None
    #: Seconds for a whole DNS lookup, retries included.
    dns_timeout: float = Field(default=5.0, gt=0)
    smtp_port: int = Field(default=25, ge=1, le=65535)
    #: EHLO name: the machine's own FQDN by default, never a big provider's name.
    helo: str = Field(default_factory=_fqdn)
    #: Envelope sender of the probes; ``verify@<helo>`` by default.
    mail_from: str = ""
    #: SMTP sessions open at once, over the whole run.
    concurrency: int = Field(default=50, ge=1)
    #: SMTP sessions open at once to one mail host (one IP address).
    host_concurrency: int = Field(default=2, ge=1)
    #: New SMTP sessions per second to one mail host.
    host_rate: float = Field(default=5.0, gt=0)
    #: SMTP sessions open at once to the MX hosts of one big provider together (Google,
    #: Microsoft, Yahoo, ...: ``mx_provider``), which judge a client by all its sessions: the
    #: most the shipped per-provider defaults give, and the budget of a provider they do not
    #: name (``provider_limits``; docs/engine.md, "Per-provider budgets and proxies").
    provider_concurrency: int = Field(default=5, ge=1)
    #: New SMTP sessions per second to the MX hosts of one big provider together (as above).
    provider_rate: float = Field(default=2.0, gt=0)
    #: A TOML file of per-provider budgets (``[google]`` ``concurrency = 3`` ``rate = 1.0``)
    #: over the shipped defaults (``engine/data/provider_limits.toml``), given as they are.
    provider_limits: Path | None = None
    #: Refused commands one SMTP session may collect before it ends and the next one goes on:
    #: Postfix holds every reply of a session that has made 10 errors (``smtpd_soft_error_limit``)
    #: and ends it at 20; lowered per host when a host shows a lower limit (docs/engine.md).
    errors_per_session: int = Field(default=9, ge=1)
    #: Seconds a whole provider is left alone after it said we went too fast (a rate ban such
    #: as Gmail's 421 4.7.28) when its reply names no time.
    ban_backoff: float = Field(default=60.0, ge=0)
    #: Seconds allowed for each SMTP step (connect, banner, each reply: a pipelined batch's
    #: replies each get this long after the one before).
    smtp_timeout: float = Field(default=10.0, gt=0)
    #: Seconds a mail host has to open a session (connect, banner, EHLO) before the next MX is
    #: tried beside it (RFC 8305's head start, for MX hosts; docs/engine.md).
    mx_head_start: float = Field(default=2.0, ge=0)
    #: Accept mail hosts on private, loopback or other non-routable addresses.
    allow_private_mx: bool = False
    #: Probe mailboxes over SMTP; off, the verdict rests on syntax, DNS and the lists.
    check_smtp: bool = True
    #: RCPT commands per SMTP session at most (lowered for a host that says "too many").
    rcpt_per_session: int = Field(default=25, ge=1)
    #: Waits (seconds) between retries after a temporary refusal (greylisting, 421) when the
    #: reply names no delay and the host has taught none (docs/engine.md, "Retries"); empty:
    #: no retries. Long waits belong to the pipeline's second pass (``retry_unknown_after``).
    retry_delays: Annotated[tuple[float, ...], NoDecode] = (1.0, 4.0, 15.0)
    #: The longest wait, from a domain's first refusal, for a delay a reply names (or a host
    #: taught); a longer one is left to the second pass. The schedule's sum counts if longer.
    retry_max_wait: float = Field(default=60.0, ge=0)
    #: Offer STARTTLS when the server supports it (certificates are not verified).
    starttls: bool = True
    #: ``socks5://[user:pass@]host:port`` to reach port 25 through, where it is blocked; or
    #: one per provider, ``google=URL,microsoft=URL,*=URL`` (``*``: every other host, ``none``:
    #: direct). The budgets of a session through a proxy are held per proxy address.
    socks_proxy: str | None = None
    #: DNS blocklist zones to look the mail host's address up in (none: not checked).
    dnsbl_zones: Annotated[tuple[str, ...], NoDecode] = ()
    #: Where the processes of a fleet share one politeness budget (PRODUCT.md, "Fleet"):
    #: ``redis://host:port/db``, ``postgresql://...``, or none (this process alone).
    shared_limits: str | None = None
    #: Folder of the user's changes to the disposable, free and role lists (``disposable.txt``,
    #: ``free.txt``, ``role.txt``: an entry a line, ``-entry`` removes; docs/engine.md, "Lists").
    lists_dir: str | None = None
    #: Addresses read ahead of the results: bounds memory whatever the input's length.
    max_pending: int = Field(default=20_000, ge=1)
    #: Addresses a bulk run (``priority="bulk"``, a service's jobs) reads ahead: enough to keep
    #: the DNS and SMTP slots busy, few enough that a job is fed in portions (docs/service.md).
    bulk_pending: int = Field(default=1_000, ge=1)

    @field_validator("retry_delays", "dnsbl_zones", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("retry_delays")
    @classmethod
    def _non_negative(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry delays cannot be negative")
        return value

    @field_validator("dns_server")
    @classmethod
    def _nameserver_address(cls, value: str | None) -> str | None:
        if value:
            _split_nameserver(value)  # raises ValueError with the reason
        return value or None

    @field_validator("shared_limits")
    @classmethod
    def _shared_store(cls, value: str | None) -> str | None:
        if not value or value.strip().lower() == "none":
            return None
        from listhygiene.engine.host_state import store_kind
        from listhygiene.extras import require_extra

        if store_kind(value) == "redis":  # (raises ConfigurationError, a ValueError, naming it)
            require_extra("fleet", f"--shared-limits {value}")
        return value

    @field_validator("provider_limits", mode="before")
    @classmethod
    def _no_file(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "none"):
            return None
        return value

    @field_validator("provider_limits")
    @classmethod
    def _provider_limits_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            read_provider_limits(value)  # raises ConfigurationError naming the file
        return value

    @field_validator("socks_proxy")
    @classmethod
    def _proxies(cls, value: str | None) -> str | None:
        if value and value.strip().lower() == "none":
            return None
        parse_proxies(value)  # raises ConfigurationError with the reason
        return value  # as given: it is part of a run's fingerprint (pipeline/backends/)

    @field_validator("lists_dir")
    @classmethod
    def _lists_folder(cls, value: str | None) -> str | None:
        if value:
            from listhygiene.engine.lists import lists_for

            lists_for(value)  # raises ListsError (a ValueError) with the reason
        return value or None

    @model_validator(mode="after")
    def _default_sender(self) -> "EngineSettings":
        if not self.mail_from:
            object.__setattr__(self, "mail_from", f"verify@{self.helo}")
        return self

    def provider_budgets(self) -> dict[str, tuple[int, float]]:
        """Each big provider's (SMTP sessions at once, new sessions a second): the shipped
        defaults capped by ``provider_concurrency`` and ``provider_rate``, ``provider_limits``
        over them (the file is read again: call once per engine)."""
        return provider_budgets(
            self.provider_limits, concurrency=self.provider_concurrency, rate=self.provider_rate
        )

    def proxy_for(self, provider: str | None) -> str | None:
        """The SOCKS proxy URL of a session to a host of ``provider`` (None: a host of no big
        provider); None to go direct."""
        return parse_proxies(self.socks_proxy).url_for(provider)

    @property
    def nameserver(self) -> tuple[str, int] | None:
        """``dns_server`` as (IP address, port), or None for the system's resolvers."""
        return _split_nameserver(self.dns_server) if self.dns_server else None


def _split_nameserver(value: str) -> tuple[str, int]:
    """``IP``, ``IPv4:PORT``, ``[IPv6]:PORT`` or a bare IPv6 address -> (address, port)."""
    text = value.strip()
    host, port = text, "53"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{value!r}: expected [IPv6]:PORT")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{value!r}: the nameserver must be an IP address") from None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return str(address), int(port)


class EngineOptions(TypedDict, total=False):
    """The engine settings ``clean()``, ``aclean()``, ``submit()`` and ``asubmit()`` take as
    keyword arguments (over ``settings``), so that editors and type checkers see them: every
    :class:`EngineSettings` field but ``check_smtp``, a parameter of its own
    (tests/test_public_api.py keeps the two in step)."""

    dns_server: str | None
    dns_timeout: float
    smtp_port: int
    helo: str
    mail_from: str
    concurrency: int
    host_concurrency: int
    host_rate: float
    provider_concurrency: int
    provider_rate: float
    provider_limits: Path | None
    errors_per_session: int
    ban_backoff: float
    smtp_timeout: float
    mx_head_start: float
    allow_private_mx: bool
    rcpt_per_session: int
    retry_delays: tuple[float, ...]
    retry_max_wait: float
    starttls: bool
    socks_proxy: str | None
    dnsbl_zones: tuple[str, ...]
    shared_limits: str | None
    lists_dir: str | None
    max_pending: int
    bulk_pending: int

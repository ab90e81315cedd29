"""The world file: domains, their DNS records, their mail hosts and each host's behaviour.

A world is JSON (see ``sample_data/world.json`` and ``docs/sandbox.md``)::

    {
      "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}],
                      "mailboxes": ["alice", "bob"]}
      },
      "hosts": {"mx.acme.test": {"greylist_delay_ms": 1000}}
    }

Loading validates everything up front; a mistake is reported with the file, the path inside it
(``domains["acme.test"].mx[0].host``) and what is wrong, as a :class:`WorldError`.
"""

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import dns.name
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "BlockPolicy",
    "DomainSpec",
    "HostSpec",
    "MxSpec",
    "PostscreenSpec",
    "ProviderSpec",
    "World",
    "WorldError",
    "load_world",
]

#: Where mail hosts get their loopback addresses when the world does not pin one.
HOST_NETWORK = ipaddress.IPv4Network("127.1.0.0/16")


class WorldError(ValueError):
    """A world file that cannot be used: names the file, the place inside it and the problem."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [
            f"{source}: {where}: {what}" if where else f"{source}: {what}"
            for where, what in problems
        ]
        super().__init__("\n".join(lines))


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def normalise_name(value: str) -> str:
    """Normalise a DNS name to lower-case A-labels without the trailing dot."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty host name")
    try:
        name = dns.name.from_unicode(value.strip().rstrip("."), idna_codec=dns.name.IDNA_2008)
    except Exception as exc:
        raise ValueError(f"{value!r} is not a valid DNS name ({exc})") from None
    return name.to_text(omit_final_dot=True).lower()


HostName = Annotated[str, Field(min_length=1)]


class MxSpec(_Spec):
    preference: int = Field(ge=0, le=65535)
    host: HostName

    @field_validator("host")
    @classmethod
    def _normalise(cls, value: str) -> str:
        return normalise_name(value)


class BlockPolicy(_Spec):
    """A policy refusal of the client, naming a blocklist (5.7.1), as big providers do."""

    stage: Literal["connect", "mail", "rcpt"] = "rcpt"
    blocklist: str = "zen.spamhaus.org"


class PostscreenSpec(_Spec):
    """Postfix postscreen in front of a host: a client must wait for the whole greeting."""

    #: postscreen_greet_wait (Postfix: 6 s): between the ``220-`` line and the final ``220``.
    greet_wait_ms: int = Field(default=6000, ge=0)
    #: The after-220 tests: a client's first session gets 450 4.3.2 to every RCPT.
    deep_tests: bool = False


class HostSpec(_Spec):
    """One mail host: where it listens and how it behaves."""

    #: A loopback address (127.0.0.0/8) to listen on; assigned from 127.1.0.0/16 when absent.
    address: str | None = None
    #: ``smtp``: a real SMTP server; ``refuse``: nothing listens (connection refused);
    #: ``silent``: accepts TCP and never speaks; ``garbage``: answers noise; ``drop``: greets,
    #: then closes the connection at the first command; ``endless``: a banner line that never ends.
    behaviour: Literal["smtp", "refuse", "silent", "garbage", "drop", "endless"] = "smtp"
    #: Extra delay before the banner (a tarpit).
    banner_delay_ms: int = Field(default=0, ge=0)
    #: Delay applied to every command before the server reads it: one round trip per reply.
    latency_ms: int = Field(default=0, ge=0)
    #: Greylisting: a first RCPT for (client, sender, recipient) gets 450 4.2.0; a retry after
    #: this delay is accepted.
    greylist_delay_ms: int | None = Field(default=None, ge=0)
    #: The greylisting reply names the delay ("Greylisted for 2 seconds", as postgrey can).
    greylist_names_delay: bool = False
    #: RCPT commands allowed per connection; past it, ``too_many_reply``.
    max_rcpt_per_connection: int | None = Field(default=None, ge=1)
    too_many_reply: Literal["452", "421"] = "452"
    #: Concurrent connections allowed; past it, a 421 4.7.0 greeting.
    max_connections: int | None = Field(default=None, ge=1)
    block: BlockPolicy | None = None
    smtputf8: bool = True
    pipelining: bool = True
    starttls: bool = False
    #: The name in the banner and EHLO reply; the host's own name when absent.
    banner_name: str | None = None
    # -- self-defences (docs/sandbox.md, "Hosts") -------------------------------------------------
    #: Postfix smtpd_soft_error_limit: from this many 4xx/5xx replies on, every reply is delayed.
    soft_error_limit: int | None = Field(default=None, ge=0)
    #: Postfix smtpd_hard_error_limit: from this many, the next command gets 421 and a hang-up.
    hard_error_limit: int | None = Field(default=None, ge=1)
    #: Postfix smtpd_error_sleep_time: the delay past ``soft_error_limit``.
    error_sleep_ms: int = Field(default=0, ge=0)
    #: Exchange's TarpitInterval: RCPTs refused for an unknown or disabled mailbox come this late.
    rejected_rcpt_delay_ms: int = Field(default=0, ge=0)
    #: anvil's smtpd_client_connection_count_limit: concurrent connections from one client IP.
    max_connections_per_client: int | None = Field(default=None, ge=1)
    #: anvil's smtpd_client_connection_rate_limit: connections from one client IP per window.
    connection_rate_limit: int | None = Field(default=None, ge=1)
    #: anvil_rate_time_unit: the sliding window of ``connection_rate_limit``.
    rate_window_ms: int = Field(default=60000, ge=1)
    postscreen: PostscreenSpec | None = None
    #: Postfix smtpd_forbid_unauth_pipelining, for a host that does not advertise PIPELINING.
    strict_pipelining: bool = False
    #: MAIL before STARTTLS is refused (530 5.7.0); needs ``starttls``.
    require_tls: bool = False
    #: The EHLO reply names the client's address as Gmail's does ("250-<banner_name> at your
    #: service, [127.0.0.1]"): how ``listhygiene doctor`` learns the address mail hosts see.
    ehlo_names_client: bool = False

    @field_validator("require_tls")
    @classmethod
    def _tls_to_require(cls, value: bool, info: ValidationInfo) -> bool:
        if value and not info.data.get("starttls"):
            raise ValueError("require_tls needs starttls: true (there is no STARTTLS to require)")
        return value

    @field_validator("address")
    @classmethod
    def _loopback(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 address") from None
        if not address.is_loopback:
            raise ValueError(f"{value} is not a loopback address (127.0.0.0/8)")
        if address == ipaddress.IPv4Address("127.0.0.1"):
            raise ValueError("127.0.0.1 is kept for the DNS server; use another 127.x address")
        return str(address)


class DomainSpec(_Spec):
    """One domain: its DNS answers and its mailboxes."""

    #: ``ok`` answers from the records below; the others answer every query for the domain so.
    dns: Literal["ok", "nxdomain", "servfail", "timeout"] = "ok"
    #: Every answer for a name under the domain comes this much later (a slow nameserver).
    dns_latency_ms: int = Field(default=0, ge=0)
    ttl: int = Field(default=300, ge=0, le=2**31 - 1)
    mx: list[MxSpec] = []
    #: ``MX 0 .`` (RFC 7505): the domain accepts no mail.
    null_mx: bool = False
    #: The domain's own A records: IPv4 addresses, or names of hosts of this world (implicit MX).
    a: list[str] = []
    aaaa: list[str] = []
    txt: list[str] = []
    #: Local parts that exist; any other gets 550 5.1.1 (unless ``catch_all``).
    mailboxes: list[str] = []
    #: Local parts whose mailbox is full (552 5.2.2).
    full: list[str] = []
    #: Local parts whose mailbox is disabled (550 5.2.1).
    disabled: list[str] = []
    catch_all: bool = False

    @field_validator("aaaa")
    @classmethod
    def _ipv6(cls, values: list[str]) -> list[str]:
        out = []
        for value in values:
            try:
                out.append(str(ipaddress.IPv6Address(value)))
            except ValueError:
                raise ValueError(f"{value!r} is not an IPv6 address") from None
        return out

    @model_validator(mode="after")
    def _null_mx_alone(self) -> Self:
        if self.null_mx and self.mx:
            raise ValueError("null_mx and mx cannot both be given (RFC 7505: the null MX is alone)")
        return self


class ProviderSpec(_Spec):
    """A big provider whose hosts share one limit per client IP (Gmail, Microsoft 365, Yahoo)."""

    #: Host names of this world; a host belongs to one provider at most.
    hosts: list[HostName] = []
    #: New connections allowed from one client IP to all these hosts within ``window_ms``.
    max_sessions: int | None = Field(default=None, ge=1)
    window_ms: int = Field(default=60000, ge=1)
    #: Connections allowed open at once from one client IP to all these hosts.
    max_concurrent: int | None = Field(default=None, ge=1)
    #: How long a client that went past a limit is refused.
    ban_ms: int = Field(default=60000, ge=0)
    #: Whose words the refusal uses (docs/sandbox.md, "Providers").
    style: Literal["gmail", "microsoft", "yahoo", "generic"] = "generic"

    @field_validator("hosts")
    @classmethod
    def _normalise(cls, values: list[str]) -> list[str]:
        return [normalise_name(value) for value in values]


class World(_Spec):
    """A whole mail world. Domain and host names are normalised to lower-case A-labels."""

    description: str = ""
    domains: dict[str, DomainSpec] = {}
    hosts: dict[str, HostSpec] = {}
    #: DNS blocklist zones served by the sandbox: zone -> listed host names or IPv4 addresses.
    dnsbl: dict[str, list[str]] = {}
    #: Big providers, by a name of the user's choice (not a DNS name, so not normalised).
    providers: dict[str, ProviderSpec] = {}
    #: The reverse zone (``in-addr.arpa``): IPv4 address -> the name of its PTR record.
    ptr: dict[str, HostName] = {}
    #: A resolver that lies: every name the world does not know answers ``A`` with this IPv4
    #: address instead of NXDOMAIN (other types: no data), as a resolver that sends typos to a
    #: search page does.
    nxdomain_answer: str | None = None

    @field_validator("ptr", mode="before")
    @classmethod
    def _reverse_zone(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, str] = {}
        for key, name in value.items():
            if not isinstance(key, str) or not _is_ipv4(key):
                raise ValueError(f"{key!r} is not an IPv4 address (the reverse zone's keys)")
            out[str(ipaddress.IPv4Address(key))] = normalise_name(name)
        return out

    @field_validator("nxdomain_answer")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None and not _is_ipv4(value):
            raise ValueError(f"{value!r} is not an IPv4 address")
        return value

    @field_validator("domains", "hosts", "dnsbl", mode="before")
    @classmethod
    def _normalise_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = normalise_name(key)
            if name in out:
                raise ValueError(f"{key!r} is given twice (as {name})")
            out[name] = item
        return out

    @model_validator(mode="after")
    def _references(self) -> Self:
        problems: list[str] = []
        for name, domain in self.domains.items():
            for i, value in enumerate(domain.a):
                if not _is_ipv4(value) and normalise_name(value) not in self.hosts:
                    problems.append(
                        f'domains["{name}"].a[{i}]: {value!r} is neither an IPv4 address '
                        "nor a host of this world"
                    )
        for zone, listed in self.dnsbl.items():
            for i, value in enumerate(listed):
                if not _is_ipv4(value) and normalise_name(value) not in self.hosts:
                    problems.append(
                        f'dnsbl["{zone}"][{i}]: {value!r} is neither an IPv4 address '
                        "nor a host of this world"
                    )
        pinned: dict[str, str] = {}
        for name, host in self.hosts.items():
            if host.address is None:
                continue
            if host.address in pinned:
                problems.append(
                    f'hosts["{name}"].address: {host.address} is also the address of '
                    f'hosts["{pinned[host.address]}"]'
                )
            pinned[host.address] = name
        problems.extend(self._provider_problems())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _provider_problems(self) -> list[str]:
        """Providers name hosts of this world, and no host has two providers."""
        problems: list[str] = []
        owner: dict[str, str] = {}
        for provider, spec in self.providers.items():
            for i, host in enumerate(spec.hosts):
                where = f'providers["{provider}"].hosts[{i}]'
                if host not in self.hosts:
                    problems.append(f"{where}: {host!r} is not a host of this world")
                elif owner.setdefault(host, provider) != provider:
                    problems.append(
                        f'{where}: {host} already belongs to providers["{owner[host]}"] '
                        "(a host has one provider at most)"
                    )
        return problems

    # -- derived ---------------------------------------------------------------------------------

    def provider_of(self, host: str) -> str | None:
        """The name of the provider ``host`` belongs to, if any."""
        for name, spec in self.providers.items():
            if host in spec.hosts:
                return name
        return None

    def host_addresses(self) -> dict[str, str]:
        """Every host's loopback address: pinned ones as given, the rest assigned in order."""
        taken = {h.address for h in self.hosts.values() if h.address}
        free = (str(a) for a in HOST_NETWORK.hosts() if str(a) not in taken)
        return {name: host.address or next(free) for name, host in self.hosts.items()}

    def mail_hosts_of(self, domain: str) -> list[str]:
        """The hosts that receive mail for ``domain``, by MX preference (or implicit MX)."""
        spec = self.domains.get(domain)
        if spec is None:
            return []
        if spec.mx:
            return [mx.host for mx in sorted(spec.mx, key=lambda m: m.preference)]
        return [normalise_name(a) for a in spec.a if not _is_ipv4(a)]

    def addresses(self) -> Iterator[str]:
        """Every address the world names (mailboxes, full and disabled), for tests and demos."""
        for name, spec in self.domains.items():
            for local in (*spec.mailboxes, *spec.full, *spec.disabled):
                yield f"{local}@{name}"

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<world>") -> "World":
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise WorldError(source, [_describe(err) for err in exc.errors()]) from None


def _is_ipv4(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _describe(err: Any) -> tuple[str, str]:
    """A pydantic error as (path inside the file, message)."""
    path = ""
    loc = list(err["loc"])
    for i, part in enumerate(loc):
        if isinstance(part, int):
            path += f"[{part}]"
        elif (
            i > 0
            and loc[i - 1] in ("domains", "hosts", "dnsbl", "providers")
            and not path.endswith("]")
        ):
            path += f'["{part}"]'
        else:
            path += f".{part}" if path else str(part)
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        message = "unknown field (see docs/sandbox.md for the fields a world takes)"
    return path, message


def load_world(path: str | Path) -> World:
    """Read and validate a world file; any problem is a :class:`WorldError` naming the file."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorldError(source, [("", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorldError(source, [("", f"cannot be read ({exc})")]) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorldError(
            source, [(f"line {exc.lineno}, column {exc.colno}", f"invalid JSON: {exc.msg}")]
        ) from None
    if not isinstance(data, dict):
        raise WorldError(source, [("", "the top level must be a JSON object")])
    return World.from_dict(data, source=source)

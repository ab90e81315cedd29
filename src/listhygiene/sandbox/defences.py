"""What real mail hosts do against address harvesting and bulk senders, for the sandbox's hosts.

Each defence models a documented setting (docs/sandbox.md, "Hosts" and "Providers"): Postfix's
smtpd error limits, anvil's per-client connection count and rate, postscreen's greeting test,
Exchange's tarpit, and the shared per-IP limits of big providers. This module holds their state
and their words; ``smtp_server`` decides when a connection meets them.
"""

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal

from listhygiene.sandbox.world import ProviderSpec

__all__ = [
    "DEEP_TEST",
    "DESYNC",
    "PREGREET",
    "STARTTLS_FIRST",
    "TOO_MANY_ERRORS",
    "TOO_MANY_FROM",
    "ClientLimits",
    "EventKind",
    "Provider",
    "ProviderStats",
    "Screen",
]

#: Why a host said the client went too far (docs/sandbox.md, "What the hosts said").
EventKind = Literal[
    "too_many_errors",
    "too_many_connections",
    "rate_ban",
    "rate_limited",
    "pregreet",
    "pipelining",
    "too_many_recipients",
]

# Postfix smtpd's and postscreen's replies, as their sources word them.
TOO_MANY_ERRORS = "421 4.7.0 {host} Error: too many errors"
TOO_MANY_FROM = "421 4.7.0 {host} Error: too many connections from {client}"
PREGREET = "521 5.5.1 Protocol error"
DEEP_TEST = "450 4.3.2 Service currently unavailable"
DESYNC = "554 5.5.0 Error: SMTP protocol synchronization"
STARTTLS_FIRST = "530 5.7.0 Must issue a STARTTLS command first"

#: The providers' refusals; lines of a multi-line reply are separated by "\n".
_PROVIDER_REPLIES = {
    "gmail": (
        "421-4.7.28 [{ip}] Our system has detected an unusual rate of\n"
        "421-4.7.28 unsolicited mail originating from your IP address. To protect our\n"
        "421 4.7.28 users from spam, mail sent from your IP address has been temporarily "
        "rate limited."
    ),
    "microsoft": "421 4.7.500 Server busy. Please try again later from [{ip}]. (S77714)",
    "yahoo": (
        "421 4.7.0 [TSS04] Messages from {ip} temporarily deferred due to unexpected volume "
        "or user complaints"
    ),
}
_GENERIC_REPLIES = {
    "concurrent": "421 4.7.0 Too many concurrent SMTP connections from {ip}, try again later",
    "sessions": "421 4.7.0 Too many connections from {ip} in a short time, try again later",
}

Reason = Literal["concurrent", "sessions"]


def provider_reply(style: str, reason: Reason, ip: str) -> str:
    """A provider's refusal of ``ip``, in its own words; generic names the limit met."""
    template = _PROVIDER_REPLIES.get(style, _GENERIC_REPLIES[reason])
    return template.format(ip=ip)


class _Window:
    """Times of recent events per client, over a sliding window (anvil's rate counting)."""

    def __init__(self, window_ms: int) -> None:
        self.window = window_ms / 1000
        self._seen: dict[str, deque[float]] = {}

    def add(self, client: str, now: float) -> int:
        """Count one more event of ``client``; return how many fall in the window."""
        seen = self._seen.setdefault(client, deque())
        seen.append(now)
        while seen[0] <= now - self.window:
            seen.popleft()
        return len(seen)

    def forget(self, client: str) -> None:
        self._seen.pop(client, None)


class ClientLimits:
    """anvil for one host: connections open and made per client IP, against the host's limits."""

    def __init__(self, max_open: int | None, max_rate: int | None, window_ms: int) -> None:
        self.max_open = max_open
        self.max_rate = max_rate
        self.open: Counter[str] = Counter()
        self._attempts = _Window(window_ms)

    def opened(self, client: str) -> None:
        self.open[client] += 1

    def closed(self, client: str) -> None:
        self.open[client] -= 1

    def too_many(self, client: str) -> bool:
        """Is this connection past a limit? Every connection counts as an attempt, as in anvil."""
        rate = self._attempts.add(client, time.monotonic()) if self.max_rate else 0
        if self.max_open is not None and self.open[client] > self.max_open:
            return True
        return self.max_rate is not None and rate > self.max_rate


@dataclass
class Screen:
    """postscreen's cache: client IPs that passed the greeting test, and the deep tests."""

    greeted: set[str] = field(default_factory=set)
    deep: set[str] = field(default_factory=set)


@dataclass
class ProviderStats:
    """What a provider's front door saw, over all its hosts."""

    #: Most connections open at once from one client IP to the provider's hosts.
    max_active: int = 0
    bans: int = 0
    limits_met: int = 0

    def limit_met(self, kind: EventKind) -> None:
        """Count a refusal said by one of the provider's hosts."""
        self.limits_met += 1
        if kind == "rate_ban":
            self.bans += 1


@dataclass(frozen=True)
class _Ban:
    until: float
    reason: Reason


class Provider:
    """A big provider's front door: one limit per client IP over all its hosts, then a ban."""

    def __init__(self, name: str, spec: ProviderSpec) -> None:
        self.name = name
        self.spec = spec
        self.stats = ProviderStats()
        self.open: Counter[str] = Counter()
        self._sessions = _Window(spec.window_ms)
        self._bans: dict[str, _Ban] = {}

    def opened(self, client: str) -> None:
        self.open[client] += 1
        self.stats.max_active = max(self.stats.max_active, self.open[client])

    def closed(self, client: str) -> None:
        self.open[client] -= 1

    def admit(self, client: str) -> tuple[EventKind, str] | None:
        """None to let the connection in, else the event and the refusal to greet it with.

        A connection past a limit starts a ban (and the client's count starts afresh after it);
        connections during the ban are refused without extending it. The host that says the
        refusal counts it (``ProviderStats.limit_met``).
        """
        now = time.monotonic()
        ban = self._bans.get(client)
        if ban is not None and now < ban.until:
            return "rate_limited", provider_reply(self.spec.style, ban.reason, client)
        reason = self._limit_met(client, now)
        if reason is None:
            return None
        self._bans[client] = _Ban(now + self.spec.ban_ms / 1000, reason)
        self._sessions.forget(client)
        return "rate_ban", provider_reply(self.spec.style, reason, client)

    def _limit_met(self, client: str, now: float) -> Reason | None:
        sessions = self._sessions.add(client, now)
        if self.spec.max_concurrent is not None and self.open[client] > self.spec.max_concurrent:
            return "concurrent"
        if self.spec.max_sessions is not None and sessions > self.spec.max_sessions:
            return "sessions"
        return None

"""Settings of a client: where the service is, how to authenticate, how patient to be."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx

from listhygiene.vocabulary import FORM_A_RATE_LIMITS, PLAN_LIMITS

__all__ = [
    "DEFAULT_API_KEY_HEADER",
    "FORM_A_RATE_LIMITS",
    "FORM_B_PLAN_LIMITS",
    "ClientSettings",
]

#: Form A's key header of our own service; another service's carries its own name.
DEFAULT_API_KEY_HEADER = "LISTHYGIENE-API-KEY"

#: Form B: plan -> (requests per hour, requests per day); enterprise is "custom": no default
#: (listhygiene.vocabulary, the one spelling; form A's per-minute limits come from there too).
FORM_B_PLAN_LIMITS: Mapping[str, tuple[int, int] | None] = PLAN_LIMITS


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """How to reach one verification service, in form A or form B.

    ``base_url`` ends in ``/v1``, e.g. ``http://127.0.0.1:8080/a/v1``. The client waits on its
    own (a ``Retry-After``, an exhausted rate-limit window, its own limiter) at most
    ``max_wait`` seconds at a time; a longer wait is the caller's choice, so it raises instead.
    """

    base_url: str
    api_key: str = field(repr=False)
    #: Form A only: the key header carries the service's own name.
    api_key_header: str = DEFAULT_API_KEY_HEADER
    #: Seconds to wait for a response (SMTP probes are slow: a batch can take a while).
    timeout: float = 60.0
    #: Seconds to wait for a connection.
    connect_timeout: float = 10.0
    #: Retries of one call, all causes together (429, 5xx of a read, unsent requests).
    max_retries: int = 3
    #: Back-off: a random wait up to ``backoff_base * 2 ** attempt``, capped at ``backoff_max``.
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    max_wait: float = 60.0
    #: Keep under the service's rate limits on the client side too.
    rate_limit: bool = True
    #: Form A: requests per minute by endpoint type (single, bulk, file, other).
    form_a_limits: Mapping[str, int] = field(default_factory=lambda: FORM_A_RATE_LIMITS)
    #: Form B: the key's plan, which gives its hourly and daily limits ...
    plan: str | None = None
    #: ... or explicit limits, which win over the plan's.
    requests_per_hour: int | None = None
    requests_per_day: int | None = None
    #: The httpx transport, e.g. ``httpx.MockTransport`` in tests (sync or async, to match).
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    user_agent: str = "listhygiene-client"

    def __post_init__(self) -> None:
        if not self.base_url:
            raise ValueError("base_url is required")
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if self.plan is not None and self.plan not in FORM_B_PLAN_LIMITS:
            raise ValueError(f"unknown plan {self.plan!r}: one of {', '.join(FORM_B_PLAN_LIMITS)}")
        for name in ("timeout", "connect_timeout", "backoff_base", "backoff_max", "max_wait"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    def form_b_limits(self) -> dict[float, int]:
        """Form B's limits to keep under on the client side: ``{window seconds: requests}``."""
        hour, day = FORM_B_PLAN_LIMITS.get(self.plan or "") or (None, None)
        hour = self.requests_per_hour if self.requests_per_hour is not None else hour
        day = self.requests_per_day if self.requests_per_day is not None else day
        return {w: n for w, n in ((3_600.0, hour), (86_400.0, day)) if n is not None}

    def httpx_options(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client`` / ``httpx.AsyncClient``."""
        options: dict[str, Any] = {
            "base_url": self.base_url.rstrip("/") + "/",
            "timeout": httpx.Timeout(self.timeout, connect=self.connect_timeout),
            "headers": {"User-Agent": self.user_agent, **self.headers},
        }
        if self.transport is not None:
            options["transport"] = self.transport
        return options

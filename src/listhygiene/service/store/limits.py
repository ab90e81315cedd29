"""Rate limits: the defaults of the spec, and a key's own overrides on top.

Form A limits each endpoint type per minute; form B limits every request of a key per hour and
per day by plan. Form B's enterprise plan says "custom": without overrides it gets ten times the
professional plan. Buckets are the names :meth:`Store.rate_window_hit` counts under. The numbers
are listhygiene.vocabulary's, the one spelling.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from listhygiene.service.store.rows import ApiKeyRow
from listhygiene.vocabulary import FORM_A_RATE_LIMITS, SERVICE_PLAN_LIMITS

__all__ = ["A_PER_MINUTE", "B_PER_PLAN", "Limit", "form_a_limit", "form_b_limits"]

AEndpoint = Literal["single", "bulk", "file", "other"]

A_PER_MINUTE: Mapping[str, int] = FORM_A_RATE_LIMITS
#: Plan -> (requests per hour, requests per day).
B_PER_PLAN: Mapping[str, tuple[int, int]] = SERVICE_PLAN_LIMITS


@dataclass(frozen=True)
class Limit:
    """At most ``limit`` requests per fixed window of ``window_seconds``, counted in ``bucket``."""

    bucket: str
    limit: int
    window_seconds: int


def form_a_limit(key: ApiKeyRow, endpoint: AEndpoint) -> Limit:
    """The per-minute limit of one of form A's endpoint types for ``key``."""
    override = getattr(key, f"a_{endpoint}_per_minute")
    limit = A_PER_MINUTE[endpoint] if override is None else override
    return Limit(f"a:{endpoint}:minute", limit, 60)


def form_b_limits(key: ApiKeyRow) -> tuple[Limit, Limit]:
    """Form B's hourly and daily limits for ``key`` (the hourly one goes in the headers)."""
    per_hour, per_day = B_PER_PLAN[key.plan]
    return (
        Limit("b:hour", per_hour if key.b_per_hour is None else key.b_per_hour, 3_600),
        Limit("b:day", per_day if key.b_per_day is None else key.b_per_day, 86_400),
    )

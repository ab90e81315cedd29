"""The store's plain rows: what its reads return, as the rest of the service sees them.

Kept apart from :mod:`.store` so that the modules below it (the rate limits of :mod:`.limits`)
and above it (:mod:`.batching`) can name them without importing the store itself: the store's
modules import one another in one direction (no circles).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

__all__ = ["ApiKeyRow", "Credits", "RateHit"]


@dataclass(frozen=True)
class ApiKeyRow:
    """An API key as the service sees it (everything but the hash)."""

    id: str
    name: str
    key_prefix: str
    plan: str
    credits_balance: int
    credits_consumed: int
    credits_added: int
    a_single_per_minute: int | None
    a_bulk_per_minute: int | None
    a_file_per_minute: int | None
    a_other_per_minute: int | None
    b_per_hour: int | None
    b_per_day: int | None
    active: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Credits:
    """A key's credit account."""

    balance: int
    consumed: int
    added: int
    updated_at: datetime


class RateHit(NamedTuple):
    """The answer of :meth:`Store.rate_window_hit`."""

    allowed: bool
    remaining: int
    #: Epoch seconds at which the window ends and the count starts again.
    reset: int

"""The verdict store: what earlier runs found, reused while it is fresh (PRODUCT.md, "Verdict
store"; docs/pipeline.md)."""

from listhygiene.verdicts.freshness import DEFAULT_MAX_AGE, Freshness, parse_duration, parse_max_age
from listhygiene.verdicts.store import (
    PEPPER_VARIABLE,
    VerdictStore,
    VerdictStoreError,
    default_url,
)

__all__ = [
    "DEFAULT_MAX_AGE",
    "PEPPER_VARIABLE",
    "Freshness",
    "VerdictStore",
    "VerdictStoreError",
    "default_url",
    "parse_duration",
    "parse_max_age",
]

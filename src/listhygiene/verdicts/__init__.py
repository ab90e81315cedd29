"""The verdict store: what earlier runs found, reused while it is fresh (PRODUCT.md, "Verdict
store"; docs/pipeline.md)."""

from typing import TYPE_CHECKING

from listhygiene._lazy import on_first_use
from listhygiene.verdicts.freshness import DEFAULT_MAX_AGE, Freshness, parse_duration, parse_max_age

if TYPE_CHECKING:
    from listhygiene.verdicts.store import (
        PEPPER_VARIABLE,
        VerdictStore,
        VerdictStoreError,
        default_url,
    )

#: The store itself imports SQLAlchemy (~0.4 s): given on first use, so that a run without a
#: store (``--verdicts none``) and the freshness rules do not pay for it.
__getattr__, __dir__ = on_first_use(
    __name__,
    dict.fromkeys(
        ["PEPPER_VARIABLE", "VerdictStore", "VerdictStoreError", "default_url"],
        "listhygiene.verdicts.store",
    ),
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

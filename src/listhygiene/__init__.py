"""listhygiene: batch email-list hygiene.

Verify every address of a table, then write one Parquet file per verification status.

The engine and the pipeline are imported when first used (``listhygiene._lazy``): importing the
package alone loads only its errors and statuses.
"""

from typing import TYPE_CHECKING

from listhygiene._lazy import on_first_use
from listhygiene._version import __version__
from listhygiene.errors import (
    AuthenticationError,
    BackendError,
    ConfigurationError,
    InputError,
    InsufficientCreditsError,
    ListHygieneError,
    PipelineError,
    QualityError,
    RateLimitError,
    ServiceError,
    StorageError,
    UnreachableError,
)
from listhygiene.statuses import FormBStatus, Reason, Status

if TYPE_CHECKING:
    from listhygiene.engine import Engine, EngineOptions, EngineSettings, verify, verify_many
    from listhygiene.pipeline import CleanResult, Estimate, aclean, asubmit, clean, estimate, submit
    from listhygiene.results import DomainReputation, VerificationResult, arrow_schema

__getattr__, __dir__ = on_first_use(
    __name__,
    {
        **dict.fromkeys(
            ["Engine", "EngineOptions", "EngineSettings", "verify", "verify_many"],
            "listhygiene.engine",
        ),
        **dict.fromkeys(
            ["CleanResult", "Estimate", "aclean", "asubmit", "clean", "estimate", "submit"],
            "listhygiene.pipeline",
        ),
        **dict.fromkeys(
            ["DomainReputation", "VerificationResult", "arrow_schema"], "listhygiene.results"
        ),
    },
)

__all__ = [
    "AuthenticationError",
    "BackendError",
    "CleanResult",
    "ConfigurationError",
    "DomainReputation",
    "Engine",
    "EngineOptions",
    "EngineSettings",
    "Estimate",
    "FormBStatus",
    "InputError",
    "InsufficientCreditsError",
    "ListHygieneError",
    "PipelineError",
    "QualityError",
    "RateLimitError",
    "Reason",
    "ServiceError",
    "Status",
    "StorageError",
    "UnreachableError",
    "VerificationResult",
    "__version__",
    "aclean",
    "arrow_schema",
    "asubmit",
    "clean",
    "estimate",
    "submit",
    "verify",
    "verify_many",
]

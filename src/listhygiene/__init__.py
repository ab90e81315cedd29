"""listhygiene: batch email-list hygiene.

Verify every address of a table, then write one Parquet file per verification status.
"""

from listhygiene._version import __version__
from listhygiene.engine import Engine, EngineOptions, EngineSettings, verify, verify_many
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
from listhygiene.pipeline import CleanResult, aclean, asubmit, clean, submit
from listhygiene.results import DomainReputation, VerificationResult, arrow_schema
from listhygiene.statuses import FormBStatus, Reason, Status

__all__ = [
    "AuthenticationError",
    "BackendError",
    "CleanResult",
    "ConfigurationError",
    "DomainReputation",
    "Engine",
    "EngineOptions",
    "EngineSettings",
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
    "submit",
    "verify",
    "verify_many",
]

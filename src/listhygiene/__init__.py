"""listhygiene: batch email-list hygiene.

Verify every address of a table, then write one Parquet file per verification status.
"""

from listhygiene.engine import Engine, EngineSettings, verify, verify_many
from listhygiene.results import DomainReputation, VerificationResult, arrow_schema
from listhygiene.statuses import FormBStatus, Reason, Status

__version__ = "0.1.0"

__all__ = [
    "DomainReputation",
    "Engine",
    "EngineSettings",
    "FormBStatus",
    "Reason",
    "Status",
    "VerificationResult",
    "__version__",
    "arrow_schema",
    "verify",
    "verify_many",
]

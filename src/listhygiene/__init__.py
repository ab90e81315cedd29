"""listhygiene: batch email-list hygiene.

Verify every address of a table, then write one Parquet file per verification status.
"""

from listhygiene._version import __version__
from listhygiene.engine import Engine, EngineSettings, verify, verify_many
from listhygiene.pipeline.run import CleanResult, aclean, clean
from listhygiene.results import DomainReputation, VerificationResult, arrow_schema
from listhygiene.statuses import FormBStatus, Reason, Status

__all__ = [
    "CleanResult",
    "DomainReputation",
    "Engine",
    "EngineSettings",
    "FormBStatus",
    "Reason",
    "Status",
    "VerificationResult",
    "__version__",
    "aclean",
    "arrow_schema",
    "clean",
    "verify",
    "verify_many",
]

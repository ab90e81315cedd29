"""The Dagster integration of listhygiene: resources, a Parquet IO manager, an asset factory,
asset checks backed by the pipeline's great-expectations suite, partitions and an export sensor.

A thin layer: verification, outputs and checks are the core's (``listhygiene``), which knows
nothing of Dagster. Install with ``pip install 'listhygiene[dagster]'``; see ``docs/dagster.md``.
"""

from listhygiene_dagster.assets import STATUSES, build_email_hygiene_assets, statuses_table
from listhygiene_dagster.checks import (
    QUALITY_CHECKS,
    ROW_COLUMN,
    build_quality_checks,
    output_rows,
    quality_report,
)
from listhygiene_dagster.estimates import build_estimate_op
from listhygiene_dagster.feedback import FeedbackConfig, build_feedback_asset
from listhygiene_dagster.io_manager import ParquetIOManager, ParquetUPathIOManager
from listhygiene_dagster.partitions import export_files, row_chunks
from listhygiene_dagster.resources import (
    ContactSourceResource,
    VerdictStoreResource,
    VerificationBackendResource,
    WriteBackResource,
)
from listhygiene_dagster.sensors import build_export_sensor, find_exports

__all__ = [
    "QUALITY_CHECKS",
    "ROW_COLUMN",
    "STATUSES",
    "ContactSourceResource",
    "FeedbackConfig",
    "ParquetIOManager",
    "ParquetUPathIOManager",
    "VerdictStoreResource",
    "VerificationBackendResource",
    "WriteBackResource",
    "build_email_hygiene_assets",
    "build_estimate_op",
    "build_export_sensor",
    "build_feedback_asset",
    "build_quality_checks",
    "export_files",
    "find_exports",
    "output_rows",
    "quality_report",
    "row_chunks",
    "statuses_table",
]

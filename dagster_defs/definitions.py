"""Example definitions: the CRM export of ``sample_data/`` as a contact list, and a folder of
exports partitioned by file with a sensor that picks up each new one, and a nightly schedule
of the CRM export that reuses the verdict store (verifying only what is new or stale), and an
hourly load of the email service's feedback into that store.

    dagster dev -f dagster_defs/definitions.py

The local engine takes its settings from the ``LISTHYGIENE_*`` environment; to verify against
the sample mail world, start it first: ``eval "$(listhygiene sandbox up sample_data/world.json)"``.
Set ``LISTHYGIENE_DAGSTER_DIR`` to choose where outputs go (a temporary folder by default), and
``LISTHYGIENE_EXPORTS_DIR`` for the folder the sensor watches, and ``LISTHYGIENE_VERDICTS`` for
the verdict store (a PostgreSQL URL shares it between machines; unset: a SQLite file in the
user's cache). A remote service instead::

    VerificationBackendResource(
        kind="form-b", base_url="https://verify.example/b/v1", api_key=dg.EnvVar("VERIFY_KEY")
    )
"""

import os
import tempfile
from pathlib import Path

import dagster as dg
from listhygiene_dagster import (
    ContactSourceResource,
    ParquetIOManager,
    VerdictStoreResource,
    VerificationBackendResource,
    build_email_hygiene_assets,
    build_export_sensor,
    build_feedback_asset,
    export_files,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(
    os.environ.get("LISTHYGIENE_DAGSTER_DIR", Path(tempfile.gettempdir()) / "listhygiene-dagster")
)
EXPORTS = Path(os.environ.get("LISTHYGIENE_EXPORTS_DIR", DATA / "exports"))

# The CRM export: one list, not partitioned.
crm = build_email_hygiene_assets(
    name="crm", output_dir=str(DATA / "runs"), verdicts_resource_key="verdict_store"
)
# Every night at 02:00: reused verdicts cost no SMTP session, no DNS query and no credit.
crm_nightly = dg.ScheduleDefinition(
    name="crm_nightly",
    target=dg.AssetSelection.groups("crm"),
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
)

# What the email service reported (docs/feedback.md), loaded into the same verdict store every
# hour: the next cleaning applies it. The sample exports stand in for the service's.
FEEDBACK_FILES = [
    str(ROOT / "sample_data" / f"feedback_{shape}.json")
    for shape in ("sendgrid", "mailgun", "ses", "postmark")
]
feedback = build_feedback_asset(
    name="feedback_events", files=FEEDBACK_FILES, verdicts_resource_key="verdict_store"
)
feedback_hourly = dg.ScheduleDefinition(
    name="feedback_hourly",
    target=dg.AssetSelection.assets(feedback),
    cron_schedule="15 * * * *",
    execution_timezone="UTC",
)

# A folder of exports: one partition per file, added by the sensor when the file lands.
exports_partitions = export_files("crm_exports")
exports = build_email_hygiene_assets(
    name="crm_exports",
    output_dir=str(DATA / "runs"),
    source_resource_key="exports_source",
    partitions_def=exports_partitions,
)
new_export_sensor = build_export_sensor(
    name="crm_new_export",
    folder=str(EXPORTS),
    target=dg.AssetSelection.groups("crm_exports"),
    partitions_def=exports_partitions,
    pattern="*.csv",
)

defs = dg.Definitions(
    assets=[*crm, *exports, feedback],
    sensors=[new_export_sensor],
    schedules=[crm_nightly, feedback_hourly],
    resources={
        "contact_source": ContactSourceResource(path=str(ROOT / "sample_data" / "crm_export.csv")),
        "exports_source": ContactSourceResource(path=str(EXPORTS)),
        # Engine settings not given here come from the LISTHYGIENE_* environment.
        "verification_backend": VerificationBackendResource(kind="local"),
        # url unset: LISTHYGIENE_VERDICTS, else verdicts.sqlite in the user's cache directory
        "verdict_store": VerdictStoreResource(max_age="valid=14d"),
        "listhygiene_parquet_io_manager": ParquetIOManager(base_path=str(DATA / "tables")),
    },
)

"""The feedback asset (``build_feedback_asset``), materialised with ``dg.materialize``: it loads
the sample exports into a SQLite verdict store (each event once), and the cleaning assets then
apply them over the sample world's catch-all domain (docs/feedback.md)."""

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import dagster as dg
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import (
    VerdictStoreResource,
    build_email_hygiene_assets,
    build_feedback_asset,
)
from tests.conftest import write_contacts
from tests.dagster.test_dagster_assets import ids_by_status, local_backend, resources

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_data"))
import make_feedback  # noqa: E402

CSV = f"""id,name,email
1,Nina,{make_feedback.CATCHALL_ENGAGED}
2,Jim,{make_feedback.CATCHALL_BOUNCED}
3,Someone,someone.else@fabrikam.test
"""


def test_the_feedback_asset_loads_events_the_cleaning_applies(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    exports = make_feedback.write(tmp_path / "events", base=datetime.now(UTC))
    store = VerdictStoreResource(url=f"sqlite:///{tmp_path / 'verdicts.sqlite'}")
    feedback = build_feedback_asset(files=[str(p) for p in exports.values()])
    loaded = dg.materialize([feedback], resources={"verdict_store": store})
    assert loaded.success
    (event,) = loaded.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert (metadata["added"].value, metadata["bad_rows"].value) == (24, 1)
    again = dg.materialize([feedback], resources={"verdict_store": store})
    (event,) = again.get_asset_materialization_events()
    assert (event.materialization.metadata["added"].value) == 0

    contacts = write_contacts(tmp_path, CSV)
    assets = build_email_hygiene_assets(
        name="crm", verdicts_resource_key="verdict_store", output_dir=str(tmp_path / "runs")
    )
    cleaned = dg.materialize(
        assets,
        resources={
            **resources(tmp_path, str(contacts), local_backend(mail_sandbox)),
            "verdict_store": store,
        },
    )
    assert cleaned.success
    by_status = ids_by_status(cleaned, "crm")
    assert by_status["valid"] == {"1"}  # the catch-all's engaged address
    assert by_status["invalid"] == {"2"}  # its hard-bounced one
    assert by_status["catchall"] == {"3"}
    invalid = cleaned.asset_value(dg.AssetKey(["crm", "invalid"]))
    assert list(invalid["reason"]) == ["bounced"]
    assert list(invalid["evidence"]) == ["bounced"]


def test_the_asset_needs_something_to_load() -> None:
    with pytest.raises(ValueError, match="files or sql_url"):
        build_feedback_asset()

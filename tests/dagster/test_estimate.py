"""The estimate op (``build_estimate_op``): run in a job with ``execute_in_process``, on the
asset factory's resources; it verifies nothing, and its output and metadata are
:func:`listhygiene.estimate`'s counts. With a verdict store of an earlier materialisation, the
reused verdicts are counted."""

from pathlib import Path
from typing import Any

import dagster as dg
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import (
    ContactSourceResource,
    VerdictStoreResource,
    VerificationBackendResource,
    build_email_hygiene_assets,
    build_estimate_op,
)
from tests.conftest import write_contacts
from tests.dagster.test_dagster_assets import engine_options, resources

CSV = """id,name,Email
1,Alice,alice.johnson@acme-corp.test
2,Alice again, ALICE.Johnson@Acme-Corp.test
3,Bob,bob.smith@acme-corp.test
4,Typo,bob@@acme-corp.test
5,Blank,
"""
DISTINCT = 3


def estimate_job() -> dg.JobDefinition:
    op = build_estimate_op(verdicts_resource_key="verdict_store")

    @dg.job
    def estimate_contacts() -> None:
        op()

    return estimate_contacts


def test_the_op_estimates_then_counts_what_a_materialisation_kept(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    contacts = write_contacts(tmp_path, CSV)
    backend = VerificationBackendResource(kind="local", **engine_options(mail_sandbox))
    store = VerdictStoreResource(url=f"sqlite:///{tmp_path / 'verdicts.sqlite'}")
    used = {
        "contact_source": ContactSourceResource(path=str(contacts)),
        "verification_backend": backend,
        "verdict_store": store,
    }

    def estimate() -> tuple[dict[str, Any], dict[str, Any]]:
        result = estimate_job().execute_in_process(resources=used)
        assert result.success
        [output] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
        metadata = dict(output.event_specific_data.metadata)
        return result.output_for_node("estimate_contacts"), metadata

    queries = mail_sandbox.dns_queries
    before, metadata = estimate()
    assert mail_sandbox.dns_queries == queries  # nothing looked up
    assert (before["rows"], before["empty_email"], before["distinct"]) == (5, 1, DISTINCT)
    assert (before["invalid_syntax"], before["reused"], before["to_verify"]) == (1, 0, DISTINCT)
    assert metadata["left to verify"].value == DISTINCT
    assert metadata["backend"].value == "local engine"
    assert "credits needed" not in metadata  # the local engine charges none

    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), verdicts_resource_key="verdict_store"
    )
    materialised = dg.materialize(
        assets, resources={**resources(tmp_path, str(contacts), backend), "verdict_store": store}
    )
    assert materialised.success
    after, metadata = estimate()
    assert (after["reused"], after["to_verify"]) == (DISTINCT, 0)
    assert metadata["reused verdicts"].value == DISTINCT
    assert after["time"]["seconds"] == 0

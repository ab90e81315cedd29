"""What the Dagster assets tell about their data (column schema and row counts, next to the
asset checks), and a run terminated while it verifies: the local engine stops at once, nothing
is published and the run folder stays for the next materialisation to resume."""

import _thread
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import (
    ContactSourceResource,
    ParquetIOManager,
    VerificationBackendResource,
    build_email_hygiene_assets,
)
from tests.conftest import engine_defaults, write_contacts
from tests.dagster.test_dagster_assets import engine_options, metadata_of

CSV = """id,name,Email
1,Alice,alice.johnson@acme-corp.test
2,Nobody,nobody.here@acme-corp.test
3,Blank,
"""
RESULT_COLUMNS = ["status", "score", "reason", "is_deliverable", "is_disposable"]


def backend(sandbox: Sandbox, **options: Any) -> VerificationBackendResource:
    """A local backend against ``sandbox`` with the engine's own DNS time limit (these runs
    never set one)."""
    changes = engine_defaults("dns_timeout") | options
    return VerificationBackendResource(kind="local", **engine_options(sandbox, **changes))


def resources(tmp: Path, source: Path, verifier: VerificationBackendResource) -> dict[str, Any]:
    return {
        "contact_source": ContactSourceResource(path=str(source)),
        "verification_backend": verifier,
        "listhygiene_parquet_io_manager": ParquetIOManager(base_path=str(tmp / "tables")),
    }


def test_assets_carry_their_column_schema_and_row_count(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    source = write_contacts(tmp_path, CSV)
    assets = build_email_hygiene_assets(name="crm", output_dir=str(tmp_path / "runs"))
    result = dg.materialize(
        assets, resources=resources(tmp_path, source, backend(mail_sandbox, smtp_timeout=2))
    )
    assert result.success

    contacts = metadata_of(result, ["crm", "contacts"])
    assert [c.name for c in contacts["dagster/column_schema"].schema.columns] == [
        "id",
        "name",
        "Email",
    ]
    assert contacts["dagster/row_count"].value == 3
    valid = metadata_of(result, ["crm", "valid"])
    columns = [c.name for c in valid["dagster/column_schema"].schema.columns]
    assert columns[:3] == ["id", "name", "Email"]  # the input's own columns first
    assert set(RESULT_COLUMNS) <= set(columns)
    assert valid["dagster/row_count"].value == 1
    invalid = metadata_of(result, ["crm", "invalid"])
    types = {c.name: c.type for c in invalid["dagster/column_schema"].schema.columns}
    assert types["score"] == "float64"
    assert invalid["dagster/row_count"].value == 2
    # the quality results are asset checks of the verification, every one passed
    evaluations = result.get_asset_check_evaluations()
    assert {e.asset_key for e in evaluations} == {dg.AssetKey(["crm", "verification"])}
    assert evaluations
    assert all(e.passed for e in evaluations)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_terminating_the_run_stops_the_engine_and_keeps_the_run_folder(
    tarpit: Sandbox, tmp_path: Path
) -> None:
    """The termination arrives as Dagster sends it to a step's process, an interrupt of its
    main thread, while a probe waits on the tarpit's banner."""
    source = tmp_path / "list.csv"
    source.write_text("email\nann@slow.test\n")
    assets = build_email_hygiene_assets(name="slow", output_dir=str(tmp_path / "runs"))
    stats = tarpit.stats("mx.slow.test")

    def terminate() -> None:
        wait_for("the probe's connection", lambda: stats.active == 1)
        _thread.interrupt_main()

    threading.Thread(target=terminate, daemon=True).start()
    outcome: Any = None
    try:
        outcome = dg.materialize(
            assets,
            resources=resources(tmp_path, source, backend(tarpit, smtp_timeout=600)),
            raise_on_error=False,
        )
    except KeyboardInterrupt:
        outcome = "interrupted"
    assert outcome == "interrupted" or not outcome.success

    wait_for("the probe's connection to close", lambda: stats.active == 0)
    assert stats.connections == 1
    assert stats.mail_commands == 0  # stopped before the banner came: at once
    folder = tmp_path / "runs" / "slow" / "all"
    assert not (folder / "summary.json").exists()
    manifest = json.loads((folder / ".listhygiene" / "manifest.json").read_text())
    assert manifest["stage"] == "verifying"

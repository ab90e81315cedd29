"""Port 25 unreachable from where Dagster runs: a sandbox world whose mail hosts mostly refuse
connections. The verification asset fails with the run's one-line health problem, and nothing
downstream materialises, unless ``accept_unreachable`` (the factory's default, or the run's
config) says to publish the unknowns."""

from pathlib import Path
from typing import Any

import pytest

import dagster as dg
from listhygiene.sandbox import Sandbox
from listhygiene_dagster import (
    ContactSourceResource,
    ParquetIOManager,
    VerificationBackendResource,
    build_email_hygiene_assets,
)
from tests.conftest import write_contacts
from tests.dagster.test_dagster_assets import engine_options

REFUSING = [f"closed{i}.test" for i in range(6)]
WORLD = {
    "domains": {
        **{
            d: {"mx": [{"preference": 10, "host": f"mx.{d}"}], "mailboxes": ["ann"]}
            for d in REFUSING
        },
        "open.test": {"mx": [{"preference": 10, "host": "mx.open.test"}], "mailboxes": ["ann"]},
    },
    "hosts": {**{f"mx.{d}": {"behaviour": "refuse"} for d in REFUSING}, "mx.open.test": {}},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture
def run_resources(sandbox: Sandbox, tmp_path: Path) -> dict[str, Any]:
    rows = [(i, f"ann{i}@{d}") for i, d in enumerate([*REFUSING, "open.test"] * 2)]
    path = write_contacts(tmp_path, rows)
    backend = VerificationBackendResource(kind="local", **engine_options(sandbox, smtp_timeout=1.0))
    return {
        "contact_source": ContactSourceResource(path=str(path)),
        "verification_backend": backend,
        "listhygiene_parquet_io_manager": ParquetIOManager(base_path=str(tmp_path / "tables")),
    }


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {
        e.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
        if e.asset_key is not None
    }


def test_the_verification_asset_fails_with_the_health_problem(
    run_resources: dict[str, Any], tmp_path: Path
) -> None:
    assets = build_email_hygiene_assets(name="crm", output_dir=str(tmp_path / "runs"))
    result = dg.materialize(assets, resources=run_resources, raise_on_error=False)
    assert not result.success
    assert materialized(result) == {"crm/contacts"}
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    data = failure.step_failure_data.user_failure_data
    assert data is not None  # a dagster.Failure, not an unexpected exception
    message = str(data.description)
    assert message.startswith("6 of 7 domains could not be reached on the SMTP port")
    assert "accept_unreachable" in message
    assert "\n" not in message
    assert not (tmp_path / "runs" / "crm" / "all" / "summary.json").exists()

    # The same run, accepted in its config: the kept results are published.
    accepted = dg.materialize(
        assets,
        resources=run_resources,
        run_config={"ops": {"crm__verification": {"config": {"accept_unreachable": True}}}},
    )
    assert accepted.success
    assert len(accepted.asset_value(dg.AssetKey(["crm", "unknown"]))) == 12
    summary = accepted.asset_value(dg.AssetKey(["crm", "verification"]))["summary"]
    assert summary["health"]["problem"]


def test_the_factory_can_accept_it_for_every_run(
    run_resources: dict[str, Any], tmp_path: Path
) -> None:
    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), accept_unreachable=True
    )
    result = dg.materialize(assets, resources=run_resources)
    assert result.success
    assert len(result.asset_value(dg.AssetKey(["crm", "unknown"]))) == 12

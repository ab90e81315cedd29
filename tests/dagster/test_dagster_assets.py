"""The Dagster integration, materialised in-process against the sample mail world (local engine)
and against the project's own service on loopback (form B), with its checks, a partition, the
export sensor's tick, and ``dagster definitions validate``."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dagster as dg
from listhygiene.engine import Engine
from listhygiene.pipeline.run import STATUSES
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene_dagster import (
    ContactSourceResource,
    ParquetIOManager,
    VerificationBackendResource,
    build_email_hygiene_assets,
    build_export_sensor,
    export_files,
    quality_report,
    row_chunks,
)
from tests.conftest import sandbox_settings, write_contacts
from tests.service.live import LiveServer

ROOT = Path(__file__).resolve().parents[2]

# One address per status of the sample world, a duplicate, a blank cell and a syntax error.
CSV = """id,name,Email
1,Alice,alice.johnson@acme-corp.test
2,Alice again, ALICE.Johnson@Acme-Corp.test
3,Bob,bob.smith@acme-corp.test
4,Nobody,nobody.here@acme-corp.test
5,Nina,nina.patel@fabrikam.test
6,Dana,dana.cole@litware.test
7,Info,info@contoso.test
8,Temp,quicktest.4821@mailinator.com
9,Claire,claire.dupont@humongous-insurance.test
10,Max,max.mustermann@defunct-startup.test
11,Blank,
12,Typo,alice@@acme-corp.test
"""
EXPECTED = {
    "valid": {"1", "2", "3"},
    "invalid": {"4", "10", "11", "12"},
    "unknown": {"9"},
    "risky": {"6"},
    "disposable": {"8"},
    "catchall": {"5"},
    "role": {"7"},
}


@pytest.fixture(scope="module")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_contacts(tmp_path_factory.mktemp("input"), CSV)


#: The engine fields of ``VerificationBackendResource`` that the tests set.
ENGINE_FIELDS = (
    "dns_server",
    "smtp_port",
    "allow_private_mx",
    "helo",
    "dns_timeout",
    "smtp_timeout",
)


def engine_options(sandbox: Sandbox, **changes: Any) -> dict[str, Any]:
    """``sandbox_settings(sandbox, **changes)`` as the resource's engine fields."""
    settings = sandbox_settings(sandbox, **changes)
    options = {name: getattr(settings, name) for name in ENGINE_FIELDS}
    return options | {"retry_delays": list(settings.retry_delays)}


def local_backend(sandbox: Sandbox) -> VerificationBackendResource:
    return VerificationBackendResource(kind="local", **engine_options(sandbox))


def resources(tmp: Path, source: str, backend: VerificationBackendResource) -> dict[str, Any]:
    return {
        "contact_source": ContactSourceResource(path=source),
        "verification_backend": backend,
        "listhygiene_parquet_io_manager": ParquetIOManager(base_path=str(tmp / "tables")),
    }


def ids_by_status(result: dg.ExecuteInProcessResult, name: str) -> dict[str, set[str]]:
    return {
        status: {str(v) for v in result.asset_value(dg.AssetKey([name, status]))["id"]}
        for status in STATUSES
    }


def check_verdicts(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {
        event.asset_key.to_user_string()
        for event in result.get_asset_materialization_events()
        if event.asset_key is not None
    }


def metadata_of(result: dg.ExecuteInProcessResult, key: list[str]) -> dict[str, Any]:
    for event in result.get_asset_materialization_events():
        if event.asset_key == dg.AssetKey(key):
            return dict(event.materialization.metadata)
    raise AssertionError(f"{key} was not materialised")


# -- the local engine on the sample world -----------------------------------------------------


def test_local_backend_materialises_every_status_with_checks_and_metadata(
    mail_sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    assets = build_email_hygiene_assets(name="crm", output_dir=str(tmp_path / "runs"))
    result = dg.materialize(
        assets, resources=resources(tmp_path, str(contacts), local_backend(mail_sandbox))
    )
    assert result.success
    assert ids_by_status(result, "crm") == EXPECTED
    assert check_verdicts(result) == {
        "rows_in_exactly_one_output": True,
        "status_allowed": True,
        "score_in_range": True,
        "email_present": True,
        "file_counts_match_summary": True,
    }
    # the status tables are Parquet files written by the IO manager
    assert pd.read_parquet(tmp_path / "tables" / "crm" / "valid.parquet")["id"].tolist() == [
        "1",
        "2",
        "3",
    ]
    # the raw table as read, and the verification's summary
    assert len(result.asset_value(dg.AssetKey(["crm", "contacts"]))) == 12
    value = result.asset_value(dg.AssetKey(["crm", "verification"]))
    assert value["input_rows"] == 12
    assert value["summary"]["rows"]["by_status"]["invalid"] == 4
    assert value["out"] == str(tmp_path / "runs" / "crm" / "all")
    # what a person reads in the UI
    meta = metadata_of(result, ["crm", "verification"])
    assert Path(meta["report"].value).name == "report.html"
    assert Path(meta["report"].value).is_file()
    assert "| valid | 3 | 25.0 % |" in meta["statuses"].value
    assert meta["dagster/row_count"].value == 12
    valid = metadata_of(result, ["crm", "valid"])
    assert valid["dagster/row_count"].value == 3
    assert "| **valid** | 3 | 25.0 % |" in valid["statuses"].value
    assert "alice.johnson@acme-corp.test" in valid["preview"].value
    assert valid["path"].value.endswith("valid.parquet")

    # materialised again into the same run folder: a new, complete run
    again = dg.materialize(
        assets, resources=resources(tmp_path, str(contacts), local_backend(mail_sandbox))
    )
    assert again.success
    assert ids_by_status(again, "crm") == EXPECTED

    # the pass/fail function reads the published files: a row dropped from one is caught
    published = Path(value["out"]) / "valid.parquet"
    pd.read_parquet(published).iloc[1:].to_parquet(published, index=False)
    report = quality_report(value)
    failed = {check.name: check.details for check in report.checks if not check.passed}
    assert set(failed) == {"rows_in_exactly_one_output", "file_counts_match_summary"}
    assert "row 1 is missing" in failed["rows_in_exactly_one_output"]


def test_a_failing_blocking_check_stops_the_status_assets(
    mail_sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    """The suite is fed one row more than the contacts asset has: row conservation fails, and
    as a blocking check it keeps every status table from being published."""

    def one_row_lost(verification: Any) -> Any:
        return quality_report({**verification, "input_rows": verification["input_rows"] + 1})

    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), evaluate=one_row_lost
    )
    result = dg.materialize(
        assets,
        resources=resources(tmp_path, str(contacts), local_backend(mail_sandbox)),
        raise_on_error=False,
    )
    assert not result.success
    assert materialized(result) == {"crm/contacts", "crm/verification"}
    verdicts = check_verdicts(result)
    assert verdicts["rows_in_exactly_one_output"] is False
    assert all(passed for name, passed in verdicts.items() if name != "rows_in_exactly_one_output")
    [evaluation] = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "rows_in_exactly_one_output"
    ]
    assert "13 rows expected, 12 written" in evaluation.description
    assert not (tmp_path / "tables" / "crm" / "valid.parquet").exists()


# -- partitions ---------------------------------------------------------------------------------


def test_one_chunk_of_a_large_list(mail_sandbox: Sandbox, contacts: Path, tmp_path: Path) -> None:
    chunks = row_chunks(total_rows=12, rows_per_chunk=5)
    assert chunks.get_partition_keys() == ["rows-1-5", "rows-6-10", "rows-11-12"]
    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), partitions_def=chunks
    )
    result = dg.materialize(
        assets,
        resources=resources(tmp_path, str(contacts), local_backend(mail_sandbox)),
        partition_key="rows-6-10",
    )
    assert result.success
    rows = result.asset_value(dg.AssetKey(["crm", "contacts"]))
    assert rows["id"].tolist() == ["6", "7", "8", "9", "10"]
    found = {
        status: set(result.asset_value(dg.AssetKey(["crm", status]))["id"]) for status in STATUSES
    }
    assert found == {status: ids & {"6", "7", "8", "9", "10"} for status, ids in EXPECTED.items()}
    assert all(check_verdicts(result).values())
    assert (tmp_path / "runs" / "crm" / "rows-6-10" / "report.html").is_file()
    assert (tmp_path / "tables" / "crm" / "risky" / "rows-6-10.parquet").is_file()


def test_the_export_sensor_adds_a_partition_per_new_file_and_that_partition_runs(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "march.csv").write_text(CSV)
    (exports / "april.csv").write_text("Email\nbob.smith@acme-corp.test\n")
    (exports / "notes.txt").write_text("not an export")
    partitions = export_files("crm_exports")
    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), partitions_def=partitions
    )
    sensor = build_export_sensor(
        name="crm_new_export",
        folder=str(exports),
        target=assets,
        partitions_def=partitions,
        pattern="*.csv",
        settle_seconds=0,
    )
    instance = dg.DagsterInstance.ephemeral()
    used = resources(tmp_path, str(exports), local_backend(mail_sandbox))
    defs = dg.Definitions(assets=assets, sensors=[sensor], resources=used)

    def tick(cursor: str | None = None) -> Any:
        context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
        # The sensor's own answer. evaluate_tick() validates the partition keys before the
        # tick's own dynamic-partition requests are applied (the daemon applies them first).
        return sensor(context)

    first = tick()
    assert sorted(r.partition_key for r in first.run_requests) == ["april.csv", "march.csv"]
    assert [r.partition_keys for r in first.dynamic_partitions_requests] == [
        ["april.csv", "march.csv"]
    ]
    assert set(json.loads(first.cursor)) == {"april.csv", "march.csv"}

    again = tick(first.cursor)
    assert isinstance(again, dg.SkipReason)

    # the tick's partitions, added as the daemon would; then the requested partition runs
    instance.add_dynamic_partitions("crm_exports", ["april.csv", "march.csv"])
    (exports / "may.csv").write_text("Email\ninfo@contoso.test\n")
    old = time.time() - 60
    os.utime(exports / "may.csv", (old, old))
    third = tick(first.cursor)
    [request] = third.run_requests
    assert request.partition_key == "may.csv"
    assert [r.partition_keys for r in third.dynamic_partitions_requests] == [["may.csv"]]
    instance.add_dynamic_partitions("crm_exports", ["may.csv"])

    result = dg.materialize(
        assets,
        resources=used,
        partition_key=request.partition_key,
        instance=instance,
    )
    assert result.success
    role = result.asset_value(dg.AssetKey(["crm", "role"]))
    assert role["Email"].tolist() == ["info@contoso.test"]
    assert all(check_verdicts(result).values())


# -- a remote service, in form B ----------------------------------------------------------------


@pytest.fixture(scope="module")
def service(mail_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """(base URL, store) of the project's service on loopback, verifying against the sandbox."""
    path = tmp_path_factory.mktemp("service") / "service.db"
    settings = sandbox_settings(mail_sandbox)
    with (
        Store(f"sqlite:///{path}") as store,
        LiveServer(create_app(store, Engine(settings))) as url,
    ):
        yield url, store


def test_form_b_backend_through_the_local_service(
    service: Any, contacts: Path, tmp_path: Path
) -> None:
    url, store = service
    key, _ = store.create_key("dagster", 100)
    backend = VerificationBackendResource(
        kind="form-b", base_url=f"{url}/b/v1", api_key=key, poll_seconds=0.1
    )
    assets = build_email_hygiene_assets(name="crm", output_dir=str(tmp_path / "runs"))
    result = dg.materialize(assets, resources=resources(tmp_path, str(contacts), backend))
    assert result.success
    assert ids_by_status(result, "crm") == EXPECTED
    assert all(check_verdicts(result).values())
    value = result.asset_value(dg.AssetKey(["crm", "verification"]))
    assert value["summary"]["backend"]["name"] == "form-b"
    assert metadata_of(result, ["crm", "verification"])["backend"].value == "form-b"


# -- resources ----------------------------------------------------------------------------------


def test_backend_resource_builds_each_kind_and_needs_a_url_and_key(tmp_path: Path) -> None:
    from listhygiene.clients import EventStore
    from listhygiene.pipeline.backends import LocalBackend
    from listhygiene.pipeline.backends.remote import FormABackend, FormBBackend

    local = VerificationBackendResource(dns_server="127.0.0.1:5300", retry_delays=[0.5])
    assert isinstance(local.get_backend(), LocalBackend)
    assert local.engine_settings().retry_delays == (0.5,)
    a = VerificationBackendResource(kind="form-a", base_url="http://x/a/v1", api_key="k")
    assert isinstance(a.get_backend(), FormABackend)
    b = VerificationBackendResource(kind="form-b", base_url="http://x/b/v1", api_key="k")
    assert isinstance(b.get_backend(), FormBBackend)
    assert "k" not in b.describe()
    events = VerificationBackendResource(
        kind="form-b", base_url="http://x/b/v1", api_key="k", events_path=str(tmp_path / "ev.db")
    ).get_backend()
    assert isinstance(events.events, EventStore)
    with pytest.raises(ValueError, match="base_url and api_key"):
        VerificationBackendResource(kind="form-b").get_backend()


def test_source_resource_reads_chunks_and_refuses_paths_as_partition_keys(contacts: Path) -> None:
    source = ContactSourceResource(path=str(contacts))
    assert source.read()["id"].tolist() == [str(n) for n in range(1, 13)]
    assert source.read("rows-11-20")["id"].tolist() == ["11", "12"]
    assert source.read("rows-20-30").empty
    folder = ContactSourceResource(path=str(contacts.parent))
    assert folder.location("contacts.csv") == str(contacts)
    with pytest.raises(ValueError, match="not a file name"):
        folder.location("../secrets.csv")
    masked = ContactSourceResource(path="postgresql://u:secret@db/x", table="people")
    assert masked.describe() == "postgresql://u:***@db/x (table people)"


# -- the example definitions --------------------------------------------------------------------


def test_dagster_definitions_validate_accepts_the_example(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTHYGIENE_", "DAGSTER_"))}
    env["LISTHYGIENE_DAGSTER_DIR"] = str(tmp_path)
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "definitions", "validate", "-f"]
    command.append(str(ROOT / "dagster_defs" / "definitions.py"))
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def failure_of(result: dg.ExecuteInProcessResult) -> str:
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return str(event.step_failure_data.user_failure_data.description)


def test_library_errors_become_dagster_failures(
    service: Any, contacts: Path, tmp_path: Path
) -> None:
    url, store = service
    key, _ = store.create_key("poor", 1)
    backend = VerificationBackendResource(kind="form-b", base_url=f"{url}/b/v1", api_key=key)
    assets = build_email_hygiene_assets(name="crm", output_dir=str(tmp_path / "runs"))
    poor = dg.materialize(
        assets, resources=resources(tmp_path, str(contacts), backend), raise_on_error=False
    )
    assert materialized(poor) == {"crm/contacts"}
    assert "needs up to 10 credits" in failure_of(poor)

    missing = dg.materialize(
        assets,
        resources=resources(tmp_path, str(tmp_path / "nowhere.csv"), backend),
        raise_on_error=False,
    )
    assert materialized(missing) == set()
    assert "nowhere.csv" in failure_of(missing)


def test_the_resources_backend_kinds_are_the_cores() -> None:
    import typing

    from listhygiene.clients import DEFAULT_API_KEY_HEADER
    from listhygiene.vocabulary import BACKEND_KINDS

    fields = VerificationBackendResource.model_fields
    assert typing.get_args(fields["kind"].annotation) == BACKEND_KINDS
    assert fields["api_key_header"].default == DEFAULT_API_KEY_HEADER


def test_the_verification_writes_back_to_a_postgres_table(
    mail_sandbox: Sandbox,
    contacts: Path,
    tmp_path: Path,
    new_pg_database: Callable[[], str],
) -> None:
    """``write_back_resource_key``: the result columns upserted into a PostgreSQL table keyed by
    ``id`` once the run has published; the metadata says how many rows."""
    import sqlalchemy as sa

    from listhygiene_dagster import WriteBackResource

    url = new_pg_database()
    assets = build_email_hygiene_assets(
        name="crm", output_dir=str(tmp_path / "runs"), write_back_resource_key="crm_table"
    )
    target = WriteBackResource(url=url, table="email_status", key="id")
    result = dg.materialize(
        assets,
        resources={
            **resources(tmp_path, str(contacts), local_backend(mail_sandbox)),
            "crm_table": target,
        },
    )
    assert result.success
    meta = metadata_of(result, ["crm", "verification"])
    assert meta["written back"].value == 12
    assert "email_status at postgresql" in meta["written back to"].value
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, status FROM email_status")).all()
    engine.dispose()
    by_status: dict[str, set[str]] = {s: set() for s in STATUSES}
    for key, status in rows:
        by_status[status].add(str(key))
    assert by_status == EXPECTED

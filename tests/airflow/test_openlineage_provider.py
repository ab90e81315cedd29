"""The operator's lineage as the real OpenLineage provider emits it (docs/airflow.md, "Lineage
and assets"): one ``dag.test()`` run with the provider's listener writing to its file transport,
and the task's COMPLETE event read back from that file.

The provider reads its configuration (``[openlineage] transport``) through cached functions and
registers its listener only when a transport is configured at plugin load; another test of the
session may have loaded the plugins first. So the module's run sets the configuration, clears
those caches, registers the provider's listener with the task runner's listener manager itself,
and undoes all of that afterwards. Emission runs in a thread the task runner joins before
``dag.test()`` returns (``execute_in_thread``), so the event is in the file when the run is
over: nothing here waits on a clock.
"""

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.quality import STATUSES
from tests.airflow.conftest import SMALL, engine_extras, set_connection
from tests.conftest import write_contacts

DAG_ID = "openlineage_clean"
NAMESPACE = "listhygiene-tests"


def _reset_provider() -> None:
    """Forget the provider's cached configuration and its client (built from it)."""
    from airflow.providers.openlineage import conf
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener

    for value in vars(conf).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()
    get_openlineage_listener().adapter._client = None


@pytest.fixture(scope="module")
def emitted(
    airflow_home: Path, sandbox: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One run of the operator through ``dag.test()`` with the provider's file transport: the
    input, the output folder, the run's summary and the events written to the file."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.sdk import DAG
    from airflow.sdk.listener import get_listener_manager

    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    folder = tmp_path_factory.mktemp("openlineage")
    events_file = folder / "events.jsonl"
    contacts = write_contacts(folder, SMALL)
    out = folder / "out"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    listener = get_openlineage_listener()
    manager = get_listener_manager()
    with pytest.MonkeyPatch.context() as patch:
        set_connection(patch, "listhygiene_default", "listhygiene", extra=engine_extras(sandbox))
        patch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
        patch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", NAMESPACE)
        patch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
        # The bound of the task runner's join of the emitting thread, not a wait: writing one
        # line to a local file takes milliseconds.
        patch.setenv("AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT", "300")
        _reset_provider()
        registered = manager.pm.is_registered(listener)
        manager.add_listener(listener)
        try:
            with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2025, 1, 1)) as dag:
                EmailVerificationOperator(task_id="clean", source=str(contacts), out=str(out))
            bag = DagBag(collect_dags=False)
            bag.bag_dag(dag)
            DagBundlesManager().sync_bundles_to_db()
            sync_bag_to_db(bag, bundle_name="dags-folder", bundle_version=None)
            run = dag.test()
        finally:
            if not registered:
                manager.pm.unregister(listener)
    _reset_provider()
    assert run.state == "success"
    text = events_file.read_text(encoding="utf-8") if events_file.exists() else ""
    return {
        "contacts": contacts,
        "out": out,
        "summary": json.loads((out / "summary.json").read_text(encoding="utf-8")),
        # Only whole lines: nothing else is expected to write, but a line is one write.
        "events": [
            json.loads(line) for line in text.splitlines(keepends=True) if line[-1:] == "\n"
        ],
    }


def _complete(emitted: dict[str, Any]) -> dict[str, Any]:
    events = [
        e
        for e in emitted["events"]
        if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.clean"
    ]
    assert len(events) == 1, [(e.get("eventType"), e["job"]["name"]) for e in emitted["events"]]
    event: dict[str, Any] = events[0]
    return event


def test_the_complete_event_names_the_input_with_its_quality(emitted: dict[str, Any]) -> None:
    """The input dataset as docs/airflow.md names a file (namespace ``file``, its absolute
    path), with the provider-serialised facets of the operator: ``dataQualityMetrics`` (rows,
    empty email cells) and ``dataQualityAssertions`` (the run's quality checks)."""
    event = _complete(emitted)
    assert event["job"]["namespace"] == NAMESPACE
    assert event["run"]["facets"]["parent"]["job"]["name"] == DAG_ID
    (source,) = event["inputs"]
    assert (source["namespace"], source["name"]) == ("file", str(emitted["contacts"]))
    facets = source["inputFacets"]
    metrics = facets["dataQualityMetrics"]
    assert metrics["rowCount"] == 4
    assert metrics["columnMetrics"] == {"email": {"nullCount": 1}}
    assert metrics["_schemaURL"].split("#")[0].endswith("DataQualityMetricsInputDatasetFacet.json")
    checks = emitted["summary"]["quality"]["checks"]
    assert checks
    assertions = facets["dataQualityAssertions"]
    fields = ("assertion", "success", "severity", "description")
    assert [{k: a.get(k) for k in fields} for a in assertions["assertions"]] == [
        {
            "assertion": c["name"],
            "success": bool(c["passed"]),
            "severity": "error",  # quality="fail": a failing check fails the task
            "description": c["description"],
        }
        for c in checks
    ]
    assert assertions["_schemaURL"].split("#")[0].endswith("DataQualityAssertionsDatasetFacet.json")


def test_the_complete_event_names_each_status_file_with_its_rows(emitted: dict[str, Any]) -> None:
    """One output dataset per status file, each with ``outputStatistics``: the rows and bytes of
    the Parquet file the run wrote."""
    event = _complete(emitted)
    out = emitted["out"]
    outputs = {o["name"]: o for o in event["outputs"]}
    assert set(outputs) == {str(out / f"{status}.parquet") for status in STATUSES}
    by_status = emitted["summary"]["rows"]["by_status"]
    for status in STATUSES:
        path = out / f"{status}.parquet"
        output = outputs[str(path)]
        assert output["namespace"] == "file"
        statistics = output["outputFacets"]["outputStatistics"]
        schema = statistics["_schemaURL"].split("#")[0]
        assert schema.endswith("OutputStatisticsOutputDatasetFacet.json")
        assert statistics["rowCount"] == pq.ParquetFile(path).metadata.num_rows
        assert statistics["rowCount"] == by_status.get(status, 0)
        assert statistics["size"] == os.path.getsize(path)
        assert statistics["fileCount"] == 1
    assert outputs[str(out / "valid.parquet")]["outputFacets"]["outputStatistics"]["rowCount"] == 1

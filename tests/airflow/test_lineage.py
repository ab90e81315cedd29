"""Lineage of the operator: the per-status files as Airflow assets (outlets, and the events a
run records with its file and rows), the OpenLineage description of a finished run, and an
XCom bounded in size."""

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from listhygiene.pipeline.quality import STATUSES


def operator(**kwargs: Any) -> Any:
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    return EmailVerificationOperator(**{"task_id": "clean", **kwargs})


def test_outlets_are_the_seven_status_files(airflow_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "clean"
    task = operator(source="contacts.csv", out=str(out))
    assert [asset.uri for asset in task.outlets] == [
        f"file://{out}/{status}.parquet" for status in STATUSES
    ]


def test_a_templated_out_names_the_family_of_files(airflow_home: Path) -> None:
    from airflow.sdk import DAG

    task = operator(source="s3://lists/crm.csv", out="s3://clean/crm/{{ dag_run.run_after | ds }}")
    assert task.outlets[0].uri == "s3://clean/crm/valid.parquet"
    with DAG(dag_id="crm", schedule=None):
        task = operator(source="x.csv", out="{{ params.out_root }}/crm")
        named = operator(source="x.csv", out="{{ params.root }}/x", assets="s3://b/x", task_id="n")
    assert task.outlets[0].uri == "listhygiene://crm/clean/valid.parquet"
    assert named.outlets[-1].uri == "s3://b/x/role.parquet"
    assert operator(source="x.csv", out="/tmp/x", assets=False).outlets == []


def test_openlineage_facets_describe_the_run(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    """The facts the method gives the OpenLineage provider (its ``OperatorLineage``; what the
    provider emits is read in test_openlineage_provider.py), as plain OpenLineage JSON: the input
    with its row count, empty cells and quality assertions, one output per status file with its
    rows and bytes."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from listhygiene_airflow.lineage import lineage_facts

    out = tmp_path / "out"
    task = operator(source=str(contacts), out=str(out))
    assert task.get_openlineage_facets_on_complete(None) is None  # nothing ran yet
    summary = task.execute(context={})

    assert isinstance(task.get_openlineage_facets_on_complete(None), OperatorLineage)
    lineage = lineage_facts(str(contacts), summary)
    (source,) = lineage.inputs
    assert (source["namespace"], source["name"]) == ("file", str(contacts))
    metrics = source["inputFacets"]["dataQualityMetrics"]
    assert metrics == {"rowCount": 4, "columnMetrics": {"email": {"nullCount": 1}}}
    assertions = source["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert assertions == [
        {
            "assertion": check["name"],
            "success": True,
            "severity": "error",
            "description": check["description"],
        }
        for check in summary["quality"]["checks"]
    ]
    assert assertions
    outputs = {Path(o["name"]).stem: o for o in lineage.outputs}
    assert set(outputs) == set(STATUSES)
    for status, output in outputs.items():
        path = out / f"{status}.parquet"
        assert output["namespace"] == "file"
        assert output["name"] == str(path)
        statistics = output["outputFacets"]["outputStatistics"]
        assert statistics["rowCount"] == pq.ParquetFile(path).metadata.num_rows
        assert statistics["rowCount"] == summary["rows"]["by_status"][status]
        assert statistics["size"] == os.path.getsize(path)


def test_database_sources_are_named_without_their_password() -> None:
    from listhygiene_airflow.lineage import dataset_name

    assert dataset_name("postgresql+psycopg://u:secret@db.example:5433/crm", table="public.c") == (
        "postgres://db.example:5433",
        "crm.public.c",
    )
    assert dataset_name("s3://lists/2026/crm.csv") == ("s3://lists", "2026/crm.csv")
    assert dataset_name("file:///data/crm.csv") == ("file", "/data/crm.csv")  # as a local path


def test_the_xcom_is_bounded() -> None:
    from listhygiene_airflow.lineage import bounded_summary

    summary = {
        "output": {"folder": "/data/clean/x"},
        "rows": {"total": 3, "by_status": {"valid": 3}, "by_reason": {"r": 1}},
        "quality": {"passed": False, "checks": [{"name": "a", "passed": False}]},
        "top_domains": [{"domain": f"d{i}.test", "rows": i} for i in range(5000)],
        "politeness": {"sessions": 4, "max_sessions_one_host": 1, "limits_met": 0, "bans": 0},
    }
    assert bounded_summary(summary, limit=10**7) == summary
    small = bounded_summary(summary, limit=4096)
    assert len(json.dumps(small)) <= 4096
    assert small["truncated"] is True
    assert small["summary_path"] == "/data/clean/x/summary.json"
    assert small["rows"] == {"total": 3, "by_status": {"valid": 3}}
    assert small["quality"] == {"passed": False, "failed": ["a"]}
    assert small["politeness"] == summary["politeness"]  # a merge of chunks adds it up


def test_a_run_records_an_asset_event_per_status_file(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    """``dag.test()``: each status asset gets an event whose extra is the run's file and its
    rows, and a DAG scheduled on ``valid.parquet`` is queued by it."""
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.models.dag import DagModel
    from airflow.sdk import DAG, Asset
    from airflow.utils.session import create_session

    out = tmp_path / "out"
    with DAG(dag_id="lineage_clean", schedule=None, start_date=datetime(2025, 1, 1)) as dag:
        operator(source=str(contacts), out=str(out))
    with DAG(
        dag_id="lineage_downstream",
        schedule=[Asset(uri=f"file://{out}/valid.parquet", group="listhygiene")],
        start_date=datetime(2025, 1, 1),
    ) as downstream:
        operator(source=f"{out}/valid.parquet", out=str(tmp_path / "again"), assets=False)
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    bag.bag_dag(downstream)
    sync_bag_to_db(bag, bundle_name="dags-folder", bundle_version=None)
    with create_session() as session:  # DAGs start paused; a paused DAG is not queued
        session.query(DagModel).filter(DagModel.dag_id == "lineage_downstream").update(
            {DagModel.is_paused: False}
        )

    run = dag.test()
    assert run.state == "success"
    with create_session() as session:
        events = {
            uri.rsplit("/", 1)[-1]: extra
            for uri, extra in session.query(AssetModel.uri, AssetEvent.extra)
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetEvent.source_dag_id == "lineage_clean")
        }
        queued = [q.target_dag_id for q in session.query(AssetDagRunQueue)]
    assert set(events) == {f"{status}.parquet" for status in STATUSES}
    assert events["valid.parquet"] == {"path": f"{out}/valid.parquet", "rows": 1}
    assert events["invalid.parquet"]["rows"] == 3
    assert "lineage_downstream" in queued

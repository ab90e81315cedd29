"""What a cleaning task tells Airflow about its data (docs/airflow.md, "Lineage and assets").

- **Assets.** :func:`status_assets`: one Airflow ``Asset`` per status file, the operator's
  default ``outlets``, so a downstream DAG can be scheduled on ``valid.parquet`` of a list. Each
  asset event carries the run's real file and its row count in its ``extra``
  (:func:`asset_extra`): with a templated ``out`` (one folder per day) the asset names the
  family of files, the event the file of that run.
- **OpenLineage.** :func:`lineage_facts` describes the run in OpenLineage's JSON shapes: the
  input dataset (row count, empty email cells, the run's quality checks as assertions) and one
  output dataset per status file (row count, bytes). :func:`operator_lineage` turns them into
  the provider's ``OperatorLineage`` of ``openlineage.client`` datasets and facets
  (``apache-airflow-providers-openlineage``, in the ``airflow`` extra), or, where the provider
  is not installed, returns them as a plain :class:`Lineage` (nothing is sent then).
- **XCom.** :func:`bounded_summary`: the summary, or, past ``limit`` bytes of JSON, its counts
  and the path of ``summary.json``; rows never go to XCom.
"""

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from listhygiene.pipeline import STATUSES

__all__ = [
    "XCOM_LIMIT",
    "Lineage",
    "asset_extra",
    "assets_root",
    "bounded_summary",
    "lineage_facts",
    "operator_lineage",
    "status_assets",
    "status_uri",
]

#: Most bytes of JSON the XCom of one cleaning may hold (Airflow keeps XComs in its database).
XCOM_LIMIT = 48 * 1024
#: Summary keys kept when the whole summary is over the limit (what a merge of chunks adds up).
_ESSENTIAL = (
    "input",
    "output",
    "backend",
    "rows",
    "addresses",
    "credits",
    "health",
    "verdicts",
    "politeness",
)


def _static_part(out: str) -> str:
    """``out`` up to its first template (``/data/clean/{{ ds }}`` gives ``/data/clean``)."""
    return out.split("{{", 1)[0].rstrip("/") if "{{" in out else out.rstrip("/")


def _as_uri(location: str) -> str:
    if "://" in location:
        return location
    return "file://" + os.path.abspath(location)


def assets_root(out: str, *, fallback: str) -> str:
    """The URI the status assets of a task writing into ``out`` sit under: ``out`` itself, or,
    when ``out`` is templated, its part before the first template (naming the family of per-run
    folders); ``fallback`` when nothing precedes the template."""
    static = _static_part(out)
    return _as_uri(static) if static else fallback.rstrip("/")


def status_uri(root: str, status: str) -> str:
    """The asset URI of ``status``'s file under ``root``."""
    return f"{root.rstrip('/')}/{status}.parquet"


def status_assets(root: str) -> list[Any]:
    """The seven per-status Airflow assets under ``root`` (:func:`assets_root`)."""
    from airflow.sdk import Asset

    return [Asset(uri=status_uri(root, status), group="listhygiene") for status in STATUSES]


def asset_extra(summary: Mapping[str, Any], status: str) -> dict[str, Any]:
    """What one asset event says: the run's file of that status and its rows."""
    folder = str(summary.get("output", {}).get("folder", ""))
    rows = int(summary.get("rows", {}).get("by_status", {}).get(status, 0))
    return {"path": f"{folder.rstrip('/')}/{status}.parquet", "rows": rows}


def bounded_summary(summary: Mapping[str, Any], *, limit: int = XCOM_LIMIT) -> dict[str, Any]:
    """The summary as the task's XCom: whole when its JSON fits in ``limit`` bytes, else its
    counts, with ``truncated`` and the path of the full ``summary.json``."""
    whole = dict(summary)
    if len(json.dumps(whole, default=str).encode()) <= limit:
        return whole
    kept = {key: whole[key] for key in _ESSENTIAL if key in whole}
    quality = whole.get("quality") or {}
    kept["quality"] = {
        "passed": quality.get("passed"),
        "failed": [c.get("name") for c in quality.get("checks", []) if not c.get("passed")],
    }
    rows = dict(kept.get("rows") or {})
    rows.pop("by_reason", None)
    kept["rows"] = rows
    folder = str(whole.get("output", {}).get("folder", "")).rstrip("/")
    kept["truncated"] = True
    kept["summary_path"] = f"{folder}/summary.json"
    return kept


# -- OpenLineage -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Lineage:
    """The run's lineage in OpenLineage's JSON shapes (``inputs``, ``outputs``), as the
    operator returns it when the OpenLineage provider is not installed."""

    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    run_facets: dict[str, Any] = dataclasses.field(default_factory=dict)
    job_facets: dict[str, Any] = dataclasses.field(default_factory=dict)


def dataset_name(location: str, *, table: str | None = None) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a file, a bucket object or a database table (never a
    password)."""
    if "://" not in location:
        return "file", os.path.abspath(location)
    parts = urlsplit(location)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme == "file" and not parts.hostname:  # file:///x is the local file /x
        return "file", parts.path
    if scheme in ("s3", "s3a", "gs", "gcs", "abfs", "az", "file"):
        return f"{scheme}://{parts.hostname or ''}", parts.path.lstrip("/") or "/"
    scheme = {"postgresql": "postgres"}.get(scheme, scheme)
    port = f":{parts.port}" if parts.port else ""
    database = parts.path.lstrip("/")
    return f"{scheme}://{parts.hostname or ''}{port}", f"{database}.{table or 'query'}"


#: OpenLineage's severity of a quality check, by the operator's ``quality`` mode: a failing
#: check fails the task (``error``) or is only reported (``warn``).
_SEVERITY = {"fail": "error", "warn": "warn"}


def _assertion(check: Mapping[str, Any], severity: str | None) -> dict[str, Any]:
    """One quality check as an OpenLineage assertion (``dataQualityAssertions``)."""
    assertion: dict[str, Any] = {
        "assertion": str(check.get("name")),
        "success": bool(check.get("passed")),
    }
    if severity:
        assertion["severity"] = severity
    if check.get("description"):
        assertion["description"] = str(check["description"])
    return assertion


def lineage_facts(source: str, summary: Mapping[str, Any], *, table: str | None = None) -> Lineage:
    """The input dataset and the seven output datasets of a finished run."""
    rows = summary.get("rows", {})
    quality = summary.get("quality") or {}
    column = (summary.get("input") or {}).get("email_column") or "email"
    severity = _SEVERITY.get(str(quality.get("mode", "")))
    namespace, name = dataset_name(source, table=table)
    inputs = [
        {
            "namespace": namespace,
            "name": name,
            "facets": {},
            "inputFacets": {
                "dataQualityMetrics": {
                    "rowCount": int(rows.get("total", 0)),
                    "columnMetrics": {column: {"nullCount": int(rows.get("empty_email", 0))}},
                },
                "dataQualityAssertions": {
                    "assertions": [
                        _assertion(check, severity) for check in quality.get("checks", [])
                    ]
                },
            },
        }
    ]
    folder = str((summary.get("output") or {}).get("folder", ""))
    outputs = []
    for status in STATUSES:
        path = f"{folder.rstrip('/')}/{status}.parquet"
        out_namespace, out_name = dataset_name(path)
        statistics: dict[str, Any] = {
            "rowCount": int(rows.get("by_status", {}).get(status, 0)),
            "fileCount": 1,
        }
        if "://" not in path and os.path.exists(path):
            statistics["size"] = os.path.getsize(path)
        outputs.append(
            {
                "namespace": out_namespace,
                "name": out_name,
                "facets": {},
                "outputFacets": {"outputStatistics": statistics},
            }
        )
    return Lineage(inputs=inputs, outputs=outputs)


def operator_lineage(facts: Lineage) -> Any:
    """The provider's ``OperatorLineage`` of ``facts``; ``facts`` itself without the provider."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import InputDataset, OutputDataset
        from openlineage.client.generated.data_quality_assertions_dataset import (
            Assertion,
            DataQualityAssertionsDatasetFacet,
        )
        from openlineage.client.generated.data_quality_metrics_input_dataset import (
            ColumnMetrics,
            DataQualityMetricsInputDatasetFacet,
        )
        from openlineage.client.generated.output_statistics_output_dataset import (
            OutputStatisticsOutputDatasetFacet,
        )
    except ImportError:
        return facts
    inputs = []
    for dataset in facts.inputs:
        metrics = dataset["inputFacets"]["dataQualityMetrics"]
        assertions = dataset["inputFacets"]["dataQualityAssertions"]["assertions"]
        inputs.append(
            InputDataset(
                namespace=dataset["namespace"],
                name=dataset["name"],
                inputFacets={
                    "dataQualityMetrics": DataQualityMetricsInputDatasetFacet(
                        rowCount=metrics["rowCount"],
                        columnMetrics={
                            # quantiles=None: no empty map in the event (the default is {})
                            column: ColumnMetrics(nullCount=m["nullCount"], quantiles=None)
                            for column, m in metrics["columnMetrics"].items()
                        },
                    ),
                    "dataQualityAssertions": DataQualityAssertionsDatasetFacet(
                        assertions=[Assertion(**a) for a in assertions]
                    ),
                },
            )
        )
    outputs = [
        OutputDataset(
            namespace=dataset["namespace"],
            name=dataset["name"],
            outputFacets={
                "outputStatistics": OutputStatisticsOutputDatasetFacet(
                    **dataset["outputFacets"]["outputStatistics"]
                )
            },
        )
        for dataset in facts.outputs
    ]
    return OperatorLineage(
        inputs=inputs,
        outputs=outputs,
        run_facets=dict(facts.run_facets),
        job_facets=dict(facts.job_facets),
    )

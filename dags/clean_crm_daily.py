"""Clean the CRM export every day: one output folder per day, one Parquet file per status.

The ``listhygiene_default`` connection says which backend verifies (the local engine, or a
remote service in form A or form B). The task is deferrable: with a remote backend it submits,
frees its worker while the service works, and a retry resumes the job it already submitted.

Tonight's run verifies only what is new or stale: the verdict store is the ``listhygiene_default``
connection's (its ``verdicts_conn_id`` extra names a Postgres connection), or the ``verdicts``
param (a URL, or ``none``); ``changed.parquet`` lists the rows whose address changed status.

Its outlets are the seven status files as Airflow assets,
``listhygiene://clean_crm_daily/clean_crm_export/valid.parquet`` and so on: a DAG with
``schedule=[Asset("listhygiene://clean_crm_daily/clean_crm_export/valid.parquet")]`` runs after
each cleaning, and the asset event's ``extra`` names that day's file and its rows.

Run it by hand with another input or output root::

    airflow dags trigger clean_crm_daily \\
        --conf '{"source": "/data/crm.csv", "out_root": "/data/clean"}'
"""

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from listhygiene_airflow.operators.verification import EmailVerificationOperator

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data" / "crm_export.csv"

with DAG(
    dag_id="clean_crm_daily",
    description="Verify the addresses of the CRM export, one Parquet file per status",
    schedule="@daily",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={
        "source": Param(str(SAMPLE), type="string", description="The CRM export to clean"),
        "out_root": Param("/tmp/listhygiene", type="string", description="Output root folder"),
        "verdicts": Param(
            "",
            type="string",
            description="Verdict store URL, or none; empty: the connection's verdicts_conn_id",
        ),
        "max_age": Param("", type="string", description="Reuse verdicts this fresh, e.g. 30d"),
    },
    tags=["listhygiene", "example"],
) as dag:
    EmailVerificationOperator(
        task_id="clean_crm_export",
        source="{{ params.source }}",
        # run_after, not ds: a manually triggered run has no logical date (nor ds)
        out="{{ params.out_root }}/crm_export/{{ dag_run.run_after | ds }}",
        listhygiene_conn_id="listhygiene_default",
        verdicts="{{ params.verdicts }}",
        max_age="{{ params.max_age }}",
        deferrable=True,
        poll_interval=30,
    )

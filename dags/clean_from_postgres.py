"""Clean a PostgreSQL table read through the Airflow connection ``crm_postgres``.

The table is read with a server-side cursor in chunks (never whole into memory); the outputs are
one Parquet file per status, plus ``summary.json`` and ``report.html``. The task's XCom is the
summary, so a downstream task can branch on the counts.
"""

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param, task

from listhygiene_airflow.operators.verification import EmailVerificationOperator

with DAG(
    dag_id="clean_from_postgres",
    description="Verify the addresses of a PostgreSQL table",
    schedule="@daily",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={
        "table": Param("crm_contacts", type="string", description="schema.table to read"),
        "email_column": Param("", type="string", description="Empty: found by itself"),
        "out_root": Param("/tmp/listhygiene", type="string", description="Output root folder"),
    },
    tags=["listhygiene", "example"],
) as dag:
    cleaned = EmailVerificationOperator(
        task_id="clean_contacts",
        sql_conn_id="crm_postgres",
        table="{{ params.table }}",
        email_column="{{ params.email_column }}",
        out="{{ params.out_root }}/{{ params.table }}/{{ dag_run.run_after | ds }}",
        listhygiene_conn_id="listhygiene_default",
        deferrable=True,
    )

    @task
    def report(summary: dict) -> dict[str, int]:
        """Log the counts by status (what a downstream branch would look at)."""
        counts = dict(summary["rows"]["by_status"])
        print(f"{summary['rows']['total']} rows: {counts}")
        return counts

    report(cleaned.output)

"""Load what the email service reported (bounces, clicks, replies, ...) into the verdict store
every hour, so that the nightly cleaning (``clean_crm_daily``, same store) applies it: a hard
bounce newer than an address's verdict makes it invalid, a click or reply makes an address of a
catch-all domain valid (docs/feedback.md).

The files are the exports your email service (or a transfer DAG) drops on the worker; the sample
files of ``sample_data/`` stand in for them. Each event is kept once, so a retried or backfilled
run adds nothing twice. With events in a warehouse table instead, give ``FeedbackOperator``
``sql_conn_id`` and ``table`` (the generic shape: ``email, event, at[, bounce_type]``).

    airflow dags trigger feedback_daily \\
        --conf '{"files": ["/data/sendgrid/events.json"], "verdicts": "postgresql://db/hygiene"}'
"""

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from listhygiene_airflow.operators.feedback import FeedbackOperator

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
FILES = [str(SAMPLES / f"feedback_{n}.json") for n in ("sendgrid", "mailgun", "ses", "postmark")]

with DAG(
    dag_id="feedback_daily",
    description="Load the email service's events into the verdict store",
    schedule="@hourly",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={
        "files": Param(FILES, type="array", description="Event exports on the worker"),
        "verdicts": Param(
            "",
            type="string",
            description="Verdict store URL; empty: the listhygiene connection's store",
        ),
    },
    render_template_as_native_obj=True,
    tags=["listhygiene", "example"],
) as dag:
    FeedbackOperator(
        task_id="add_feedback",
        files="{{ params.files }}",
        verdicts="{{ params.verdicts }}",
        listhygiene_conn_id="listhygiene_default",
    )

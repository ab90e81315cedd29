"""A large list on many workers: split it into chunks, verify each chunk in a mapped task (one
per chunk, on whichever Celery or Kubernetes worker is free), then merge the outputs and run the
data-quality checks on the merged result.

Rows are split by domain (all of a domain's addresses in one chunk, balanced by expected SMTP
sessions), so a mail host is probed by one chunk's worker only and a duplicate address is
verified once (docs/deploy.md, "Politeness across workers"). With the connection's
``shared_limits`` extra (``redis://...``: every worker's engine takes its sessions from one
budget per mail host, docs/deploy.md "One budget for the fleet") a giant domain is split across
chunks too, an address in one chunk only. Every chunk
uses the connection's verdict store (a PostgreSQL one when the chunks run on several workers:
they write to it at once), and the merge adds up their reused/verified/changed. The chunk
and output folders must be on storage every worker sees (a shared volume, or object storage for
the outputs).
"""

import json
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from listhygiene_airflow.chunks import SPLIT_MANIFEST, merge_outputs, split_list
from listhygiene_airflow.operators.verification import EmailVerificationOperator

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data" / "crm_export.csv"
# One folder per run, the same on every try: run_after is set on every run, manual ones too
# (which have no logical date, so no ds or ts).
RUN = "{{ params.out_root }}/mapped/{{ dag_run.run_after | ts_nodash }}"

with DAG(
    dag_id="clean_mapped_chunks",
    description="Verify a large list in chunks on separate workers, then merge",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={
        "source": Param(str(SAMPLE), type="string", description="The list to clean"),
        "chunks": Param(4, type="integer", minimum=1, description="How many chunks"),
        "out_root": Param("/tmp/listhygiene", type="string", description="Output root folder"),
    },
    tags=["listhygiene", "example"],
) as dag:

    @task
    def split(run: str, params: dict | None = None) -> list[str]:
        """Write the chunk files; their paths feed the mapped verification. With the
        connection's ``shared_limits`` extra (one politeness budget for every worker) a giant
        domain is split across chunks."""
        from listhygiene_airflow.hooks.verification import ListHygieneHook

        assert params is not None
        return split_list(
            params["source"],
            f"{run}/chunks",
            chunks=int(params["chunks"]),
            shared_limits=ListHygieneHook("listhygiene_default").shared_limits,
        )

    verified = EmailVerificationOperator.partial(
        task_id="verify_chunk",
        out=RUN + "/chunk-{{ ti.map_index }}",
        listhygiene_conn_id="listhygiene_default",
        deferrable=True,
        max_active_tis_per_dag=8,
        assets=False,  # the chunks' folders are intermediate: no assets of their own
    ).expand(source=split(RUN))

    @task
    def merge(summaries: list[dict], run: str) -> dict:
        """Concatenate the chunks' outputs per status, check the merged result, summarise."""
        manifest = json.loads(Path(f"{run}/chunks/{SPLIT_MANIFEST}").read_text())
        return merge_outputs(summaries, f"{run}/merged", expected_rows=manifest["rows"])

    merge(verified.output, RUN)

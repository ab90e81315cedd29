"""The operator's dry run (``dry_run=True``): ``dag.test()`` runs the task, which verifies nothing
and pushes :func:`listhygiene.estimate`'s counts as its XCom; with a form B connection, the key's
balance from the real service (on loopback)."""

from datetime import datetime
from pathlib import Path
from typing import Any

from tests.airflow.test_verdicts import xcom

#: conftest.SMALL: a valid address, a missing mailbox, a blank cell, a syntax error.
ROWS, EMPTY, DISTINCT, INVALID = 4, 1, 3, 1


def dry_run_dag(dag_id: str, contacts: Path, out: Path, **options: Any) -> Any:
    """A one-task DAG, synced to the metadata database as the scheduler would."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG

    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2025, 1, 1)) as dag:
        EmailVerificationOperator(
            task_id="estimate", source=str(contacts), out=str(out), dry_run=True, **options
        )
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, bundle_name="dags-folder", bundle_version=None)
    return dag


def test_a_dry_run_pushes_the_estimate_and_verifies_nothing(
    airflow_home: Path, local_connection: Any, sandbox: Any, contacts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    store = f"sqlite:///{tmp_path / 'verdicts.sqlite'}"
    dag = dry_run_dag("estimate_local", contacts, out, verdicts=store)
    assert dag.get_task("estimate").outlets == []  # a dry run publishes no asset
    queries = sandbox.dns_queries
    run = dag.test()
    assert run.state == "success"
    found = xcom(run, "estimate")
    assert found["estimate"] is True
    assert found["backend"] == "local"
    assert (found["rows"], found["empty_email"], found["distinct"]) == (ROWS, EMPTY, DISTINCT)
    assert (found["invalid_syntax"], found["reused"], found["to_verify"]) == (INVALID, 0, DISTINCT)
    assert found["verdict_store"] == store
    assert found["credits"] is None
    assert found["time"]["domains"] == 1
    assert sandbox.dns_queries == queries  # nothing looked up
    assert not out.exists()  # nothing written


def test_a_dry_run_on_form_b_says_the_credits(
    airflow_home: Path, form_b_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    key, store = form_b_connection
    dag = dry_run_dag("estimate_form_b", contacts, tmp_path / "out", verdicts="none")
    run = dag.test()
    assert run.state == "success"
    found = xcom(run, "estimate")
    assert found["backend"] == "form-b"
    assert found["credits"] == {"needed": DISTINCT, "balance": 5_000, "enough": True}
    row = store.authenticate(key)
    assert row is not None
    assert row.credits_balance == 5_000  # nothing spent

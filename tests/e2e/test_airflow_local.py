"""Airflow with LocalExecutor, as docs/airflow.md runs it: PostgreSQL metadata, the API server,
scheduler, DAG processor and triggerer as four processes, the example DAGs of ``dags/``
triggered by hand from the CLI, and form B jobs on a ``listhygiene serve`` process."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.airflow_stack import SERVICES, AirflowDeployment, airflow_env
from tests.e2e.outputs import read_run_folder
from tests.e2e.processes import Processes, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SAMPLE_ROWS = 1000  # sample_data/crm_export.csv


@pytest.fixture(scope="module")
def deployment(
    e2e_env: dict[str, str],
    mail_world: dict[str, str],
    airflow_database: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AirflowDeployment]:
    root = tmp_path_factory.mktemp("airflow-local")
    database = airflow_database()  # migrated once per session (conftest.py)
    # The local engine of the tasks verifies against the sample world (its LISTHYGIENE_*).
    env = {**e2e_env, **mail_world, **airflow_env(root / "home", database)}
    processes = Processes(root / "logs", env)
    try:
        stack = AirflowDeployment(processes, database)
        stack.start(*SERVICES)
        stack.wait_until_ready()
        yield stack
    finally:
        processes.stop_all()


@pytest.fixture(scope="module")
def service(
    e2e_env: dict[str, str], mail_world: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Processes]]:
    """``listhygiene serve`` on the sample world: (base URL of form B, database URL, its
    processes). A greylisted address of the sample waits 20 s for its retry, so a job of the
    sample stays running long enough to be deferred on."""
    root = tmp_path_factory.mktemp("service")
    db = f"sqlite:///{root / 'service.db'}"
    port = free_port()
    processes = Processes(
        root / "logs", {**e2e_env, **mail_world, "LISTHYGIENE_RETRY_DELAYS": "20"}
    )
    try:
        processes.start(
            "serve",
            ["listhygiene", "serve", "--db", db, "--host", "127.0.0.1", "--port", str(port)],
        )
        processes.wait_for("the service", lambda: _listening(port), timeout=60)
        yield f"http://127.0.0.1:{port}/b/v1", db, processes
    finally:
        processes.stop_all()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_manual_trigger_cleans_the_crm_export(
    deployment: AirflowDeployment, tmp_path: Path
) -> None:
    """``airflow dags trigger clean_crm_daily --conf '{"out_root": ...}'``: a run with no
    logical date writes the day's folder, one Parquet file per status."""
    deployment.set_connection(
        "listhygiene_default", {"conn_type": "listhygiene", "extra": {"backend": "local"}}
    )
    run_id = deployment.trigger("clean_crm_daily", {"out_root": str(tmp_path)})
    deployment.wait_for_run("clean_crm_daily", run_id)

    (day,) = (tmp_path / "crm_export").iterdir()
    summary = read_run_folder(day)
    assert summary["rows"]["total"] == SAMPLE_ROWS
    assert summary["health"]["domains_unreachable"] == 0
    assert summary["rows"]["by_status"]["valid"] > 0


def test_mapped_chunks_merge_into_one_folder(deployment: AirflowDeployment, tmp_path: Path) -> None:
    """``clean_mapped_chunks`` with two chunks: two mapped verification tasks, and one merged
    folder holding every input row once."""
    deployment.set_connection(
        "listhygiene_default", {"conn_type": "listhygiene", "extra": {"backend": "local"}}
    )
    run_id = deployment.trigger("clean_mapped_chunks", {"out_root": str(tmp_path), "chunks": 2})
    deployment.wait_for_run("clean_mapped_chunks", run_id)

    chunks = [t for t in deployment.tasks("clean_mapped_chunks", run_id) if t[0] == "verify_chunk"]
    assert [(t[1], t[2]) for t in chunks] == [(0, "success"), (1, "success")]
    (run,) = (tmp_path / "mapped").iterdir()
    merged = read_run_folder(run / "merged")
    assert merged["rows"]["total"] == SAMPLE_ROWS
    parts = [read_run_folder(run / f"chunk-{i}")["rows"]["total"] for i in range(2)]
    assert sum(parts) == SAMPLE_ROWS
    assert all(parts)


def test_deferred_form_b_job_survives_a_triggerer_restart(
    deployment: AirflowDeployment, service: tuple[str, str, Processes], tmp_path: Path
) -> None:
    """The deferrable operator on a form B service: the triggerer is killed while the task is
    deferred and started again; the same try finishes, and the service holds one job."""
    base_url, db, service_processes = service
    key = service_processes.run(
        ["listhygiene", "keys", "create", "--db", db, "--name", "airflow", "--credits", "5000"]
    ).strip()
    deployment.set_connection(
        "listhygiene_default",
        {
            "conn_type": "listhygiene",
            "host": base_url,
            "password": key,
            "extra": {"backend": "form-b"},
        },
    )
    run_id = deployment.trigger("clean_crm_daily", {"out_root": str(tmp_path)})

    def deferred_in_a_triggerer() -> bool:
        rows = deployment.sql(
            "SELECT ti.state, t.triggerer_id FROM task_instance ti"
            " LEFT JOIN trigger t ON t.id = ti.trigger_id WHERE ti.run_id = %s",
            run_id,
        )
        assert rows[0][0] not in ("success", "failed", "up_for_retry"), rows
        return rows[0][0] == "deferred" and rows[0][1] is not None

    deployment.processes.wait_for("the task to defer", deferred_in_a_triggerer, timeout=180)
    deployment.processes.kill("triggerer")
    ((state,),) = deployment.sql("SELECT state FROM task_instance WHERE run_id = %s", run_id)
    assert state == "deferred"
    deployment.start("triggerer")
    deployment.wait_for_run("clean_crm_daily", run_id, timeout=300)

    ((task_id, _, state, try_number, _),) = deployment.tasks("clean_crm_daily", run_id)
    assert (task_id, state, try_number) == ("clean_crm_export", "success", 1)
    (day,) = (tmp_path / "crm_export").iterdir()
    assert read_run_folder(day)["rows"]["total"] == SAMPLE_ROWS
    with create_engine(db).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1

"""Airflow with CeleryExecutor, as docs/deploy.md lays it out: the same four processes on
PostgreSQL metadata, the machine's Redis as the broker, PostgreSQL as Celery's result backend,
and two ``airflow celery worker`` processes serving the deployment's queue. The mapped-chunks
DAG spreads its chunks over both workers; with the connection's ``shared_limits`` their engines
share one politeness budget (tests/e2e/fleet.py)."""

import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import REDIS_URL, empty_redis
from tests.e2e.airflow_stack import SERVICES, AirflowDeployment, airflow_env
from tests.e2e.fleet import (
    FleetWorld,
    assert_chunks_overlapped,
    assert_hosts_not_pushed,
    assert_merged_polite,
    assert_same_as_single,
    assert_split_cut_the_giant,
)
from tests.e2e.outputs import read_run_folder
from tests.e2e.processes import Processes, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

#: Two domains of the sample world whose mail hosts keep a chunk busy for seconds (a silent host:
#: one SMTP time-out; a banner after 3 s), one per chunk of the mapped run.
SLOW = ("nobody@fourth-coffee.test", "travel@margie-travel.test")
SLOW_ROWS = 6
WORKERS = ("worker-1", "worker-2")


@pytest.fixture(scope="module")
def deployment(
    e2e_env: dict[str, str],
    mail_world: dict[str, str],
    airflow_database: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AirflowDeployment]:
    root = tmp_path_factory.mktemp("airflow-celery")
    database = airflow_database()  # migrated once per session (conftest.py)
    backend = make_url(database).set(drivername="db+postgresql+psycopg")
    # A queue of this run only: other deployments on the same Redis never take its tasks.
    queue = f"verification-{secrets.token_hex(4)}"
    env = {
        **e2e_env,
        **mail_world,
        **airflow_env(
            root / "home",
            database,
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__CELERY__BROKER_URL=f"{REDIS_URL}/0",
            AIRFLOW__CELERY__RESULT_BACKEND=backend.render_as_string(hide_password=False),
            AIRFLOW__OPERATORS__DEFAULT_QUEUE=queue,
        ),
    }
    processes = Processes(root / "logs", env)
    try:
        stack = AirflowDeployment(processes, database)
        stack.start(*SERVICES)
        for name in WORKERS:
            # One task at a time each, every worker with its own log server port.
            worker = ["airflow", "celery", "worker", "--celery-hostname", f"{name}@%h"]
            processes.start(
                name,
                [*worker, "--queues", queue, "--concurrency", "1"],
                AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            )
        stack.wait_until_ready()
        for name in WORKERS:
            processes.wait_for(
                f"{name} to join", lambda n=name: " ready." in processes.tail(n, 200), timeout=180
            )
        yield stack
    finally:
        processes.stop_all()


def workers_of(
    deployment: AirflowDeployment, dag_id: str, run_id: str
) -> dict[tuple[str, int], list[str]]:
    """The workers each task of the run went to, by (task_id, map_index): those whose log says
    they received its Celery task."""
    received = {
        name: set(re.findall(r"Task execute_workload\[([0-9a-f-]+)\] received", log))
        for name in WORKERS
        if (log := (deployment.processes.logs / f"{name}.log").read_text(errors="replace"))
    }
    return {
        (task_id, map_index): [name for name, ids in received.items() if celery_id in ids]
        for task_id, map_index, _, _, celery_id in deployment.tasks(dag_id, run_id)
    }


def test_mapped_chunks_run_on_two_celery_workers(
    deployment: AirflowDeployment, tmp_path: Path
) -> None:
    """Two chunks, two workers of one task each: each worker verifies one chunk, and the merge
    holds every input row once.

    Each chunk is held in flight for seconds by the sample world's slow hosts (a silent one, and
    a 3 s banner), so the two are queued while both workers would still be busy: a worker runs
    one task at a time and takes no second one meanwhile (prefetch 1, late acks), and a fast
    first chunk cannot be done before the second is queued."""
    deployment.set_connection(
        "listhygiene_default", {"conn_type": "listhygiene", "extra": {"backend": "local"}}
    )
    source = tmp_path / "slow-domains.csv"
    source.write_text("email\n" + "".join(f"{SLOW[i % 2]}\n" for i in range(SLOW_ROWS)))
    run_id = deployment.trigger(
        "clean_mapped_chunks", {"out_root": str(tmp_path), "chunks": 2, "source": str(source)}
    )
    deployment.wait_for_run("clean_mapped_chunks", run_id)

    ran_on = workers_of(deployment, "clean_mapped_chunks", run_id)
    # Every task went through Celery to exactly one of the two workers.
    assert all(len(names) == 1 for names in ran_on.values()), ran_on
    chunk_workers = {ran_on[("verify_chunk", i)][0] for i in range(2)}
    assert chunk_workers == set(WORKERS), ran_on

    (run,) = (tmp_path / "mapped").iterdir()
    assert read_run_folder(run / "merged")["rows"]["total"] == SLOW_ROWS


def test_mapped_chunks_share_one_politeness_budget(
    deployment: AirflowDeployment,
    fleet_world: FleetWorld,
    fleet_single: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """Issue 26's fleet on Airflow: the connection's ``shared_limits`` extra (a Redis database)
    makes the split cut the giant domain across both chunks and the two workers' engines take
    their SMTP sessions from one budget: verifying at once, they meet no limit of the hosts
    that count a client's connections, and the merge is one run's folder."""
    store = empty_redis(9)
    extra = {"backend": "local", "shared_limits": store, **fleet_world.engine()}
    deployment.set_connection("listhygiene_default", {"conn_type": "listhygiene", "extra": extra})
    before = fleet_world.defences()
    run_id = deployment.trigger(
        "clean_mapped_chunks",
        {"out_root": str(tmp_path), "chunks": 2, "source": str(fleet_world.source)},
    )
    deployment.wait_for_run("clean_mapped_chunks", run_id)
    assert_hosts_not_pushed(before, fleet_world.defences())

    (run,) = (tmp_path / "mapped").iterdir()
    chunks = [read_run_folder(run / f"chunk-{i}") for i in range(2)]
    assert_split_cut_the_giant(run / "chunks", chunks)
    # one chunk a worker, both verifying at the same time
    ran_on = workers_of(deployment, "clean_mapped_chunks", run_id)
    assert {ran_on[("verify_chunk", i)][0] for i in range(2)} == set(WORKERS), ran_on
    assert_chunks_overlapped(chunks)

    merged = read_run_folder(run / "merged")
    assert_merged_polite(merged)
    assert_same_as_single(run / "merged", merged, *fleet_single)

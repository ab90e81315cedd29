"""An Airflow deployment as docs/airflow.md ("Running the services") sets one up: a PostgreSQL
metadata database, ``airflow db migrate``, then the API server, scheduler, DAG processor and
triggerer as four processes (plus Celery workers with CeleryExecutor), every one with the same
settings. Connections, unpausing and triggering go through the REST API (``/api/v2``, a token
from ``/auth/token``) as the docs show them with curl; a few details (a deferred task's
triggerer, a Celery task's id) are read from the metadata database.
"""

import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
from sqlalchemy.engine import make_url

from tests.e2e.processes import REPO, Processes, free_port

#: The four processes of a LocalExecutor deployment (docs/airflow.md).
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
FINISHED = {"success", "failed"}


def airflow_env(home: Path, database_url: str, **more: str) -> dict[str, str]:
    """The settings every process of one deployment shares (``AIRFLOW__SECTION__KEY``)."""
    api_port = free_port()
    sync_url = make_url(database_url).set(drivername="postgresql+psycopg")
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sync_url.render_as_string(hide_password=False),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # One secret for every process: the API server signs the tasks' tokens with it.
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        # Unpausing a @daily DAG would also start today's scheduled run; the tests trigger
        # their runs by hand only.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # A killed triggerer's triggers go to a live one after this long without a heartbeat
        # (30 s by default; its heartbeat comes every 5 s).
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
        # Free ports for the log servers, so two deployments on one machine never collide.
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        **more,
    }


class AirflowDeployment:
    """One deployment's processes, its CLI and a read-only look at its metadata database."""

    def __init__(self, processes: Processes, database_url: str) -> None:
        self.processes = processes
        self.database_url = database_url
        self._token: str | None = None

    def airflow(self, *args: str, timeout: float = 180) -> str:
        return self.processes.run(["airflow", *args], timeout=timeout)

    def start(self, *services: str) -> None:
        for service in services:
            self.processes.start(service, ["airflow", service])

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        url = make_url(self.database_url)
        with psycopg.connect(
            host=url.host, port=url.port or 5432, user=url.username, dbname=url.database
        ) as conn:
            return list(conn.execute(query, params).fetchall())

    def wait_until_ready(self) -> None:
        """The API server answering, every DAG of ``dags/`` parsed (the DAG processor) and a
        live scheduler."""
        self.processes.wait_for("the API server", self._api_up, timeout=180)
        self.processes.wait_for(
            "the DAG processor to parse dags/",
            lambda: len(self.sql("SELECT dag_id FROM dag")) >= 3,
            timeout=240,
        )
        self.processes.wait_for(
            "a scheduler heartbeat",
            lambda: self.sql(
                "SELECT 1 FROM job WHERE job_type = 'SchedulerJob' AND state = 'running'"
            ),
            timeout=120,
        )

    def _api_up(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/api/v2/version", timeout=5).is_success
        except httpx.TransportError:
            return False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.processes.env['AIRFLOW__API__PORT']}"

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One REST API call with a token of the simple auth manager's ``admin`` user (its
        password is in the file the API server generates in ``AIRFLOW_HOME``)."""
        if self._token is None:
            home = Path(self.processes.env["AIRFLOW_HOME"])
            passwords = json.loads(
                (home / "simple_auth_manager_passwords.json.generated").read_text()
            )
            login = {"username": "admin", "password": passwords["admin"]}
            response = httpx.post(f"{self.api_url}/auth/token", json=login, timeout=60)
            response.raise_for_status()
            self._token = response.json()["access_token"]
        response = httpx.request(
            method,
            f"{self.api_url}/api/v2{path}",
            json=body,
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=60,
        )
        if response.is_error:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def set_connection(self, conn_id: str, value: dict[str, Any]) -> None:
        """(Re)define a connection: ``DELETE`` then ``POST /api/v2/connections``."""
        if self.sql("SELECT 1 FROM connection WHERE conn_id = %s", conn_id):
            self.api("DELETE", f"/connections/{conn_id}")
        body = {**value, "connection_id": conn_id}
        if "extra" in body:
            body["extra"] = json.dumps(body["extra"])
        self.api("POST", "/connections", body)

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause the DAG and trigger a run with ``conf`` and no logical date (a user's manual
        run); returns the run id."""
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        assert run["logical_date"] is None, run
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")["state"]

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float = 300) -> None:
        """Wait for the run to end; fail with the task logs when it did not succeed."""
        state = self.processes.wait_for(
            f"run {run_id} of {dag_id} to finish",
            lambda: s if (s := self.run_state(dag_id, run_id)) in FINISHED else None,
            timeout=timeout,
            every=2,
        )
        if state != "success":
            raise AssertionError(f"{dag_id} {run_id}: {state}\n{self.task_logs(dag_id, run_id)}")

    def tasks(self, dag_id: str, run_id: str) -> list[tuple[Any, ...]]:
        """(task_id, map_index, state, try_number, external_executor_id) of the run's tasks."""
        return self.sql(
            "SELECT task_id, map_index, state, try_number, external_executor_id"
            " FROM task_instance WHERE dag_id = %s AND run_id = %s ORDER BY task_id, map_index",
            dag_id,
            run_id,
        )

    def task_logs(self, dag_id: str, run_id: str) -> str:
        home = Path(self.processes.env["AIRFLOW_HOME"])
        folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
        parts = []
        for path in sorted(folder.rglob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-40:]
            parts.append(f"--- {path.relative_to(folder)} ---\n" + "\n".join(lines))
        return "\n".join(parts) + "\n" + self.processes.tails()

"""Killing the task: ``on_kill`` (Airflow calls it from the task's SIGTERM handler, or on an
execution timeout) stops the local engine at once, abandons a form A or form B job the service
cannot cancel, cancels a form B job when the service accepts ``DELETE``, and leaves the work
folder for the retry to resume.

The task runs on a thread here, and ``on_kill`` is called from the test's thread, as a signal
handler would call it in the task's process."""

import asyncio
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from listhygiene.sandbox import Sandbox
from tests.airflow.conftest import SMALL, jobs_of, set_connection


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


class TaskThread(threading.Thread):
    """``execute`` of one operator, as a worker runs it; keeps what it returned or raised."""

    def __init__(self, task: Any) -> None:
        super().__init__(daemon=True)
        self.task = task
        self.outcome: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.outcome = self.task.execute(context={})
        except BaseException as exc:
            self.error = exc


def operator(source: Path, out: Path, **kwargs: Any) -> Any:
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    return EmailVerificationOperator(task_id="clean", source=str(source), out=str(out), **kwargs)


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / ".listhygiene" / "manifest.json").read_text())


def _recorded_jobs(out: Path) -> list[Any]:
    """The jobs the run's work folder records so far (none before its manifest is written)."""
    try:
        return list(manifest(out).get("jobs") or [])
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_on_kill_stops_the_local_engine_at_once(
    airflow_home: Path, tarpit: Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowException

    extras = {
        "backend": "local",
        "dns_server": tarpit.dns_server,
        "smtp_port": tarpit.smtp_port,
        "allow_private_mx": True,
        "helo": "verifier.test",
        "smtp_timeout": 600,
    }
    set_connection(monkeypatch, "listhygiene_default", "listhygiene", extra=extras)
    source = tmp_path / "list.txt"
    source.write_text("ann@slow.test\n")
    out = tmp_path / "out"
    stats = tarpit.stats("mx.slow.test")
    task = TaskThread(operator(source, out))
    task.start()
    wait_for("the probe's connection", lambda: stats.active == 1)

    task.task.on_kill()
    task.join(timeout=60)  # the banner would come after 120 s
    assert not task.is_alive()
    assert isinstance(task.error, AirflowException), task.error
    assert "kept for a retry to resume" in str(task.error)
    wait_for("the probe's connection to close", lambda: stats.active == 0)
    assert stats.connections == 1
    assert stats.mail_commands == 0
    # nothing published; the work folder is there for the retry
    assert not (out / "summary.json").exists()
    assert manifest(out)["stage"] == "verifying"


def test_on_kill_abandons_a_form_b_job_and_the_retry_resumes_it(
    airflow_home: Path, service: Any, form_b_connection: Any, tmp_path: Path
) -> None:
    """The project's service has no ``DELETE`` for jobs (form B's spec names none): the job
    is abandoned, stays recorded, and the retry reads its results instead of submitting again."""
    from airflow.sdk.exceptions import AirflowException

    _, _, engine = service
    key, store = form_b_connection
    source = tmp_path / "contacts.csv"
    source.write_text(SMALL)
    out = tmp_path / "out"
    engine.gate.clear()  # the job cannot end while the task runs
    try:
        task = TaskThread(operator(source, out, deferrable=False, poll_interval=1))
        task.start()
        submitted = wait_for("the job", lambda: jobs_of(store, key))
        # killed once the run has recorded the job (the service has it a moment before the
        # run reads its answer): a job the run never heard of is not the run's to abandon
        wait_for("the job recorded", lambda: _recorded_jobs(out))
        task.task.on_kill()
        task.join(timeout=60)
        assert not task.is_alive()
        assert isinstance(task.error, AirflowException), task.error
        assert f"{submitted[0]}': 'abandoned'" in str(task.error), task.error
        assert [j["done"] for j in manifest(out)["jobs"]] == [False]
    finally:
        engine.gate.set()
    summary = operator(source, out, deferrable=False, poll_interval=1).execute(context={})
    assert jobs_of(store, key) == submitted  # the same job, read; nothing submitted again
    assert summary["rows"]["total"] == 4


class DeletingService(BaseHTTPRequestHandler):
    """A form B service that accepts ``DELETE /verify/bulk/{job_id}``; records the calls."""

    calls: ClassVar[list[tuple[str, str, str | None]]] = []

    def do_DELETE(self) -> None:
        self.calls.append(("DELETE", self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"deleted": true}')

    def log_message(self, *args: Any) -> None:
        pass


def test_a_form_b_job_is_cancelled_where_the_service_allows_it(
    service: Any, form_b_connection: Any, tmp_path: Path
) -> None:
    """A job recorded by a real submission; the service that accepts DELETE cancels it, and
    the work folder forgets it, so a resume submits its addresses again."""
    from listhygiene.clients import ClientSettings
    from listhygiene.pipeline.cancel import cancel_jobs, recorded_jobs
    from listhygiene.pipeline.run import submit
    from listhygiene_airflow.hooks.verification import ListHygieneHook

    _, _, engine = service
    source = tmp_path / "contacts.csv"
    source.write_text(SMALL)
    out = tmp_path / "out"
    engine.gate.clear()
    try:
        hook = ListHygieneHook()
        (job,) = submit(str(source), str(out), backend=hook.get_backend(), verdicts="none")
    finally:
        engine.gate.set()
    assert [j.job_id for j in recorded_jobs(str(out))] == [job.job_id]

    server = ThreadingHTTPServer(("127.0.0.1", 0), DeletingService)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = ClientSettings(
            base_url=f"http://127.0.0.1:{server.server_address[1]}/b/v1", api_key="lh_key"
        )
        fate = asyncio.run(cancel_jobs(str(out), recorded_jobs(str(out)), settings))
    finally:
        server.shutdown()
    assert fate == {job.job_id: "cancelled"}
    assert DeletingService.calls == [("DELETE", f"/b/v1/verify/bulk/{job.job_id}", "Bearer lh_key")]
    assert recorded_jobs(str(out)) == []
    assert [j["done"] for j in manifest(out)["jobs"]] == [True]

"""The operator outside a DAG run: the deferrable path step by step against the service in
form B, and a retried task that resumes the job it submitted instead of submitting again."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import jobs_of, set_connection


def first_event(trigger: Any) -> Any:
    async def one() -> Any:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger yielded nothing")

    return asyncio.run(one())


def operator(contacts: Path, out: Path, **kwargs: Any) -> Any:
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    return EmailVerificationOperator(
        task_id="clean", source=str(contacts), out=str(out), deferrable=True, **kwargs
    )


def test_a_retried_task_resumes_its_job_instead_of_submitting_again(
    airflow_home: Path, service: Any, form_b_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    _, _, engine = service
    key, store = form_b_connection
    out = tmp_path / "out"
    engine.gate.clear()  # the job cannot end before the trigger is asked
    try:
        with pytest.raises(TaskDeferred) as first:
            operator(contacts, out).execute(context={})
        submitted = jobs_of(store, key)
        assert len(submitted) == 1
        # the worker died; Airflow retries the task: a new operator, the same arguments
        with pytest.raises(TaskDeferred) as retried:
            operator(contacts, out).execute(context={})
        assert jobs_of(store, key) == submitted  # found in the work folder, not submitted again
        trigger = retried.value.trigger
        assert [j["job_id"] for j in trigger.jobs] == [str(j) for j in submitted]
        assert [j["job_id"] for j in first.value.trigger.jobs] == [str(j) for j in submitted]
        assert retried.value.method_name == "execute_complete"
        # what the triggerer stores and rebuilds: JSON only
        path, kwargs = trigger.serialize()
        assert path == "listhygiene_airflow.triggers.verification.VerificationJobTrigger"
        json.dumps(kwargs)
    finally:
        engine.gate.set()
    event = first_event(trigger)
    assert event.payload["status"] == "success", event.payload
    summary = operator(contacts, out).execute_complete(context={}, event=event.payload)
    assert jobs_of(store, key) == submitted
    assert summary["backend"]["name"] == "form-b"
    assert summary["rows"]["total"] == 4
    assert summary["quality"]["passed"]
    assert (out / "summary.json").exists()


def test_a_failed_trigger_event_fails_the_task(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowException

    event = {"status": "timeout", "message": "job j1 still running at the deadline", "jobs": []}
    with pytest.raises(AirflowException, match="still running"):
        operator(contacts, tmp_path / "out").execute_complete(context={}, event=event)


def test_deferrable_with_the_local_engine_just_cleans(
    airflow_home: Path, local_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    summary = operator(contacts, tmp_path / "out").execute(context={})
    assert summary["backend"]["name"] == "local"
    by_status = summary["rows"]["by_status"]
    assert by_status["valid"] == 1
    assert by_status["invalid"] == 3  # not a mailbox, blank, bad syntax


def test_hook_builds_each_backend_from_its_connection(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from listhygiene.pipeline.backends import LocalBackend
    from listhygiene.pipeline.backends.remote import FormABackend, FormBBackend
    from listhygiene_airflow.hooks.verification import ListHygieneHook

    set_connection(
        monkeypatch,
        "lh_local",
        "listhygiene",
        extra={"dns_server": "127.0.0.1:53", "helo": "h.test"},
    )
    set_connection(
        monkeypatch,
        "lh_a",
        "listhygiene",
        host="https://verify.example/a/v1",
        password="k-a",
        extra={"backend": "form-a", "api_key_header": "X-Key"},
    )
    set_connection(
        monkeypatch,
        "lh_b",
        "listhygiene",
        password="k-b",
        extra={"extra__listhygiene__backend": "form-b", "base_url": "http://b.example/v1"},
    )
    local = ListHygieneHook("lh_local").get_backend()
    assert isinstance(local, LocalBackend)
    assert local.engine.settings.dns_server == "127.0.0.1:53"
    assert local.engine.settings.helo == "h.test"
    form_a = ListHygieneHook("lh_a").get_backend()
    assert isinstance(form_a, FormABackend)
    assert form_a.settings.base_url == "https://verify.example/a/v1"
    assert form_a.settings.api_key == "k-a"
    assert form_a.settings.api_key_header == "X-Key"
    form_b = ListHygieneHook("lh_b").get_backend()
    assert isinstance(form_b, FormBBackend)
    assert form_b.settings.base_url == "http://b.example/v1"
    assert ListHygieneHook.is_terminal("completed")
    assert ListHygieneHook.is_terminal("failed")
    assert not ListHygieneHook.is_terminal("processing")


def test_sensor_pokes_an_existing_job(
    airflow_home: Path, service: Any, form_b_connection: Any, tmp_path: Path
) -> None:
    from listhygiene.clients import ClientSettings, FormBClient
    from listhygiene_airflow.sensors.verification import VerificationJobSensor

    url, _, engine = service
    key, _ = form_b_connection
    with FormBClient(ClientSettings(base_url=f"{url}/b/v1", api_key=key)) as client:
        engine.gate.clear()
        try:
            job = client.submit_bulk(["natalie.roberts@riverbend-foods.test"], smtp_check=False)
            sensor = VerificationJobSensor(task_id="wait", job_id=job.job_id, poke_interval=1)
            assert sensor.poke(context={}) is False
        finally:
            engine.gate.set()
    deferred = VerificationJobSensor(
        task_id="wait_deferred", job_id=job.job_id, deferrable=True, poke_interval=1
    )
    event = first_event(deferred_trigger(deferred))
    assert event.payload["status"] == "success"
    deferred.execute_complete(context={}, event=event.payload)
    assert sensor.poke(context={}) is True


def deferred_trigger(sensor: Any) -> Any:
    """The trigger the sensor defers to (built as execute() builds it)."""
    import time

    from listhygiene_airflow.triggers.verification import VerificationJobTrigger

    return VerificationJobTrigger(
        listhygiene_conn_id=sensor.listhygiene_conn_id,
        jobs=[sensor._job()],
        deadline=time.time() + 60,
        poll_interval=1,
    )


def test_a_deferred_form_a_file_job(
    airflow_home: Path,
    service: Any,
    monkeypatch: pytest.MonkeyPatch,
    contacts: Path,
    tmp_path: Path,
) -> None:
    """Form A through a file job: the operator defers, the trigger sees the job end, and
    ``execute_complete`` (another backend instance, as on a triggerer-resumed task) reads the
    result file instead of uploading again."""
    from airflow.sdk.exceptions import TaskDeferred

    url, store, engine = service
    key, _ = store.create_key("airflow-a", 5_000)
    set_connection(
        monkeypatch,
        "listhygiene_default",
        "listhygiene",
        host=f"{url}/a/v1",
        password=key,
        extra={"backend": "form-a", "file_threshold": 0},
    )
    out = tmp_path / "out"
    engine.gate.clear()
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator(contacts, out).execute(context={})
    finally:
        engine.gate.set()
    (job,) = deferred.value.trigger.jobs
    assert job["backend"] == "form-a"
    assert job["data"] == {"mode": "file"}
    event = first_event(deferred.value.trigger)
    assert event.payload["status"] == "success", event.payload
    summary = operator(contacts, out).execute_complete(context={}, event=event.payload)
    assert jobs_of(store, key) == [job["job_id"]]  # one upload
    assert summary["backend"]["name"] == "form-a"
    assert summary["rows"]["by_status"]["valid"] == 1
    assert summary["rows"]["total"] == 4
    row = store.authenticate(key)
    assert summary["credits"]["used"] == store.credits(row.id).consumed > 0  # what it charged


def test_the_trigger_watching_an_event_store(
    airflow_home: Path, service: Any, form_b_connection: Any, contacts: Path, tmp_path: Path
) -> None:
    """With an event store, the trigger waits on it; an event that comes before the service's
    status says so does not make it ask the service in a tight loop."""
    import threading

    from airflow.sdk.exceptions import TaskDeferred
    from sqlalchemy import func, select

    from listhygiene.clients import EventStore
    from listhygiene.service.store.models import RateWindow
    from listhygiene_airflow.triggers.verification import VerificationJobTrigger

    _, _, engine = service
    key, store = form_b_connection
    events = EventStore(tmp_path / "events.db")
    engine.gate.clear()
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator(contacts, tmp_path / "out").execute(context={})
        (job,) = deferred.value.trigger.jobs
        events.record("b", "bulk.completed", job["job_id"], {"event": "bulk.completed"}, "x")
        _, kwargs = deferred.value.trigger.serialize()
        trigger = VerificationJobTrigger(
            **{**kwargs, "events_path": str(events.path), "poll_interval": 0.5}
        )
        threading.Timer(1.5, engine.gate.set).start()  # the job ends a while after its event
        event = first_event(trigger)
    finally:
        engine.gate.set()
    assert event.payload["status"] == "success", event.payload
    row = store.authenticate(key)
    with store.transaction() as conn:
        requests = conn.execute(
            select(func.sum(RateWindow.count)).where(RateWindow.api_key_id == row.id)
        ).scalar_one()
    assert requests < 40  # a loop on the store's immediate answer makes hundreds


def test_the_trigger_does_not_check_before_the_deferral_is_recorded(
    airflow_home: Path,
    service: Any,
    form_b_connection: Any,
    contacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job that ends just after the operator's own check: a trigger that asks at once fires
    before the scheduler has handled the deferred try's exit, and Airflow fails that try. The
    trigger's first check waits ``first_check_after`` from the deferral instead."""
    import time

    from airflow.sdk.exceptions import TaskDeferred

    from listhygiene_airflow.hooks.verification import ListHygieneHook

    _, _, engine = service
    engine.gate.clear()
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator(contacts, tmp_path / "out").execute(context={})
    finally:
        engine.gate.set()
    deferred_at = time.time()
    (job,) = deferred.value.trigger.jobs
    hook = ListHygieneHook()
    while not hook.job_status_sync(job).is_terminal:  # the job ends before the trigger runs
        time.sleep(0.05)
    checks: list[float] = []
    original = ListHygieneHook.job_status

    async def timed(self: ListHygieneHook, job: Any) -> Any:
        checks.append(time.time())
        return await original(self, job)

    monkeypatch.setattr(ListHygieneHook, "job_status", timed)
    _, kwargs = deferred.value.trigger.serialize()
    from listhygiene_airflow.triggers.verification import VerificationJobTrigger

    event = first_event(VerificationJobTrigger(**kwargs))  # as the triggerer rebuilds it
    assert event.payload["status"] == "success"
    assert checks[0] - deferred_at >= VerificationJobTrigger.first_check_after - 0.5
    assert VerificationJobTrigger.first_check_after == 3.0  # the tests' (conftest.py)


def test_a_job_ended_by_the_operators_check_is_read_without_deferring(
    airflow_home: Path,
    service: Any,
    form_b_connection: Any,
    contacts: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the job has ended by the time the operator checks it, the task goes straight to
    ``execute_complete`` with the event the trigger would have sent."""
    import time

    from listhygiene_airflow.hooks.verification import ListHygieneHook
    from listhygiene_airflow.operators.verification import EmailVerificationOperator

    key, store = form_b_connection
    original = ListHygieneHook.job_status_sync

    def ended(self: ListHygieneHook, job: Any) -> Any:
        while not (state := original(self, job)).is_terminal:
            time.sleep(0.05)
        return state

    completed: list[dict[str, Any]] = []
    complete = EmailVerificationOperator.execute_complete

    def recorded(self: Any, context: Any, event: Any = None) -> Any:
        completed.append(dict(event))
        return complete(self, context, event)

    monkeypatch.setattr(ListHygieneHook, "job_status_sync", ended)
    monkeypatch.setattr(EmailVerificationOperator, "execute_complete", recorded)
    summary = operator(contacts, tmp_path / "out").execute(context={})
    assert [e["status"] for e in completed] == ["success"]
    assert summary["rows"]["total"] == 4
    row = store.authenticate(key)
    assert summary["credits"]["used"] == store.credits(row.id).consumed

"""``clean`` through a remote service in form A and form B: the project's own service on loopback
(real HTTP), verifying against the sandbox, compared with the local engine's verdicts."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from sqlalchemy import func, select

import listhygiene
from listhygiene.clients import ClientSettings
from listhygiene.engine import Engine, EngineSettings
from listhygiene.pipeline.backends import JobRef
from listhygiene.pipeline.backends.remote import FormABackend, FormBBackend
from listhygiene.pipeline.run import STATUSES, PipelineError
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene.service.store.models import Job
from tests.conftest import sandbox_settings, write_contacts
from tests.service.live import LiveServer, a

# The services here run in the test's process, some with client time-outs of 1 s
pytestmark = pytest.mark.usefixtures("gx_imported")


def mx(host: str) -> list[dict[str, Any]]:
    return [{"preference": 10, "host": host}]


WORLD = {
    "domains": {
        "acme.test": {
            "mx": mx("mx.acme.test"),
            "mailboxes": ["alice", "bob", "info"],
            "full": ["carol"],
        },
        "catchall.test": {"mx": mx("mx.catchall.test"), "catch_all": True},
        "slow.test": {"mx": mx("mx.slow.test"), "mailboxes": [f"p{i}" for i in range(40)]},
        "mailinator.com": {"mx": mx("mx.mailinator.com"), "catch_all": True},
        "broken.test": {"dns": "servfail"},
        # slower than a synchronous request may take: greylisting that names its delay, a
        # mail host that never speaks
        "grey.test": {"mx": mx("mx.grey.test"), "mailboxes": ["g0", "g1", "g2"]},
        "silent.test": {"mx": mx("mx.silent.test"), "mailboxes": ["s"]},
        # a nameserver slower than the client's patience (and under the engine's DNS time-out)
        "lag.test": {"mx": mx("mx.acme.test"), "mailboxes": ["l"], "dns_latency_ms": 700},
    },
    "hosts": {
        "mx.acme.test": {},
        "mx.catchall.test": {},
        "mx.slow.test": {"latency_ms": 100},
        "mx.mailinator.com": {},
        "mx.grey.test": {"greylist_delay_ms": 2500, "greylist_names_delay": True},
        "mx.silent.test": {"behaviour": "silent"},
    },
}
CSV = """id,name,Email
1,Alice,alice@acme.test
2,Alice again, ALICE@Acme.Test
3,Bob,bob@acme.test
4,Nobody,nobody@acme.test
5,Info,info@acme.test
6,Carol,carol@acme.test
7,Anyone,anyone@catchall.test
8,Temp,temp@mailinator.com
9,Broken,x@broken.test
10,Blank,
11,Typo,alice@@acme.test
"""
DISTINCT = 9  # the cells with something in them, ALICE@Acme.Test being alice@acme.test


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture(scope="module")
def service(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """(base URL, store) of the service on loopback."""
    path = tmp_path_factory.mktemp("remote") / "service.db"
    with Store(f"sqlite:///{path}") as store:
        app = create_app(store, Engine(sandbox_settings(sandbox)))
        with LiveServer(app) as url:
            yield url, store


@pytest.fixture(scope="module")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_contacts(tmp_path_factory.mktemp("input"), CSV)


@pytest.fixture(scope="module")
def local(sandbox: Sandbox, contacts: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The statuses the local engine gives each row: what every backend must agree with."""
    out = tmp_path_factory.mktemp("local") / "out"
    listhygiene.clean(contacts, out, settings=sandbox_settings(sandbox))
    return statuses(out)


def statuses(out: Path) -> dict[str, tuple[str, Any]]:
    frames = [pd.read_parquet(out / f"{s}.parquet") for s in STATUSES]
    rows = pd.concat([f for f in frames if len(f)])
    return {str(r["id"]): (r["status"], r["reason"]) for _, r in rows.iterrows()}


def settings_for(service: Any, key: str, **changes: Any) -> ClientSettings:
    url, _ = service
    form = changes.pop("form", "a")
    return ClientSettings(base_url=f"{url}/{form}/v1", api_key=key, **changes)


def jobs_of(store: Store, key: str) -> list[Any]:
    row = store.authenticate(key)
    assert row is not None
    with store.transaction() as conn:
        return list(conn.execute(select(Job.id, Job.kind).where(Job.api_key_id == row.id)).all())


#: A remote backend's ``politeness`` in the summary (docs/pipeline.md, "Politeness").
NOT_KNOWN = {"sessions": 0, "max_sessions_one_host": 0, "limits_met": 0, "bans": 0}


def test_form_a_small_list_through_verify_bulk(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    _, store = service
    key, row = store.create_key("form-a bulk", 100)
    backend = FormABackend(settings_for(service, key))
    result = listhygiene.clean(contacts, tmp_path / "out", backend=backend)
    assert statuses(tmp_path / "out") == local
    assert result.summary["backend"]["name"] == "form-a"
    # the service opened the SMTP sessions: nothing to count here, the keys are there all the same
    assert result.summary["politeness"] == NOT_KNOWN
    assert jobs_of(store, key) == []  # no file job for ten addresses
    unknown = sum(1 for status, _ in local.values() if status == "unknown")
    assert store.credits(row.id).consumed == DISTINCT - unknown


def test_form_a_large_list_through_a_file_job(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    _, store = service
    key, row = store.create_key("form-a file", 100)
    backend = FormABackend(settings_for(service, key), file_threshold=0, poll_seconds=0.1)
    result = listhygiene.clean(contacts, tmp_path / "out", backend=backend)
    assert statuses(tmp_path / "out") == local
    assert [kind for _, kind in jobs_of(store, key)] == ["file"]
    # a result file has no credits column: the summary reports what the job charged
    unknown = sum(1 for status, _ in local.values() if status == "unknown")
    assert store.credits(row.id).consumed == DISTINCT - unknown
    assert result.summary["credits"]["used"] == DISTINCT - unknown


class SmallJobs(FormBBackend):
    max_job_size = 4


def test_form_b_in_several_bulk_jobs(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    _, store = service
    key, _ = store.create_key("form-b", 100)
    backend = SmallJobs(settings_for(service, key, form="b"), poll_seconds=0.1)
    result = listhygiene.clean(contacts, tmp_path / "out", backend=backend)
    assert statuses(tmp_path / "out") == local
    assert result.summary["backend"]["name"] == "form-b"
    assert result.summary["politeness"] == NOT_KNOWN
    assert len(jobs_of(store, key)) == math.ceil(DISTINCT / 4)


@pytest.mark.parametrize("form", ["a", "b"])
def test_credits_are_checked_before_anything_is_spent(
    service: Any, contacts: Path, tmp_path: Path, form: str
) -> None:
    _, store = service
    key, row = store.create_key("poor", 3)
    settings = settings_for(service, key, form=form)
    backend = FormABackend(settings) if form == "a" else FormBBackend(settings)
    with pytest.raises(PipelineError, match=f"needs up to {DISTINCT} credits") as raised:
        listhygiene.clean(contacts, tmp_path / "out", backend=backend)
    assert "has 3" in str(raised.value)
    assert "nothing was submitted" in str(raised.value)
    assert store.credits(row.id).balance == 3
    assert jobs_of(store, key) == []
    assert not (tmp_path / "out" / "summary.json").exists()


class FailsAfterSubmitting(FormBBackend):
    """Dies right after the service accepted the job, before reading anything of it."""

    async def results(self, job: JobRef) -> AsyncIterator[Any]:
        raise RuntimeError("killed")
        yield  # pragma: no cover


def test_a_run_that_died_after_submitting_reads_its_job_instead_of_submitting_again(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    _, store = service
    key, row = store.create_key("resume", 100)
    settings = settings_for(service, key, form="b")
    with pytest.raises(RuntimeError, match="killed"):
        listhygiene.clean(contacts, tmp_path / "out", backend=FailsAfterSubmitting(settings))
    assert len(jobs_of(store, key)) == 1
    result = listhygiene.clean(
        contacts, tmp_path / "out", backend=FormBBackend(settings, poll_seconds=0.1)
    )
    assert len(jobs_of(store, key)) == 1  # the same job, read, not submitted again
    assert result.summary["addresses"]["resumed"] is True
    assert statuses(tmp_path / "out") == local
    unknown = sum(1 for status, _ in local.values() if status == "unknown")
    assert store.credits(row.id).consumed == DISTINCT - unknown  # paid once
    assert result.summary["credits"]["used"] == DISTINCT - unknown  # and reported


def recorded_jobs(manifest: Path) -> list[Any]:
    """The jobs a run has recorded in its work folder (written whole: replaced, never edited)."""
    try:
        return list(json.loads(manifest.read_text()).get("jobs") or [])
    except (FileNotFoundError, ValueError):
        return []


def test_cli_killed_after_submission_resumes_the_remote_job(
    service: Any, sandbox: Sandbox, tmp_path: Path
) -> None:
    """The command line, SIGKILLed while its form B job runs on the service, then run again."""
    url, store = service
    key, row = store.create_key("cli", 100)
    path = tmp_path / "slow.csv"
    path.write_text("Email\n" + "".join(f"p{i}@slow.test\n" for i in range(40)))
    env = {**os.environ, "REMOTE_KEY": key}
    command = [
        *(sys.executable, "-m", "listhygiene.cli", "clean", str(path)),
        *("--out", str(tmp_path / "out"), "--backend", "form-b"),
        *("--base-url", f"{url}/b/v1", "--api-key-env", "REMOTE_KEY"),
    ]
    first = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    manifest = tmp_path / "out" / ".listhygiene" / "manifest.json"
    # Killed once the run has recorded the job: a kill between the service accepting it and
    # the answer arriving is the window no client of the two forms can close (docs/backends.md)
    while not recorded_jobs(manifest):
        assert time.monotonic() < deadline, "no job was recorded"
        assert first.poll() is None, first.stderr
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert len(jobs_of(store, key)) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"]["by_status"]["valid"] == 40
    assert store.credits(row.id).consumed == 40
    assert summary["credits"]["used"] == 40
    assert summary["addresses"]["resumed"] is True


def test_cli_errors_of_a_remote_backend(service: Any, contacts: Path, tmp_path: Path) -> None:
    url, _ = service
    base = [sys.executable, "-m", "listhygiene.cli", "clean", str(contacts)]
    base += ["--out", str(tmp_path / "out"), "--backend", "form-a"]
    no_url = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert no_url.returncode == 2
    assert "--base-url" in no_url.stderr
    env = {k: v for k, v in os.environ.items() if k != "LISTHYGIENE_API_KEY"}
    no_key = subprocess.run(
        [*base, "--base-url", f"{url}/a/v1"], capture_output=True, text=True, env=env, timeout=60
    )
    assert no_key.returncode == 2
    assert "LISTHYGIENE_API_KEY" in no_key.stderr
    wrong = subprocess.run(
        [*base, "--base-url", f"{url}/a/v1"],
        capture_output=True,
        text=True,
        env={**env, "LISTHYGIENE_API_KEY": "lh_wrong"},
        timeout=60,
    )
    assert wrong.returncode == 4  # PRODUCT.md: the backend refused
    assert "Invalid or missing API key" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_submit_without_waiting_then_clean_reads_the_jobs(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    """What a deferrable orchestrator does: submit, release the worker, later read."""
    from listhygiene.pipeline.run import submit

    _, store = service
    key, _ = store.create_key("deferred", 100)
    settings = settings_for(service, key, form="b")
    jobs = submit(contacts, tmp_path / "out", backend=SmallJobs(settings))
    assert len(jobs) == math.ceil(DISTINCT / 4)
    assert {j.backend for j in jobs} == {"form-b"}
    again = submit(contacts, tmp_path / "out", backend=SmallJobs(settings))
    assert [j.job_id for j in again] == [j.job_id for j in jobs]  # nothing submitted twice
    assert len(jobs_of(store, key)) == len(jobs)
    listhygiene.clean(contacts, tmp_path / "out", backend=SmallJobs(settings, poll_seconds=0.1))
    assert len(jobs_of(store, key)) == len(jobs)
    assert statuses(tmp_path / "out") == local


def test_submit_with_the_local_engine_submits_nothing(
    sandbox: Sandbox, contacts: Path, tmp_path: Path
) -> None:
    from listhygiene.pipeline.run import submit

    assert submit(contacts, tmp_path / "out", settings=sandbox_settings(sandbox)) == []


def test_waiting_on_webhooks_through_the_real_receiver(
    sandbox: Sandbox, contacts: Path, local: Any, tmp_path: Path
) -> None:
    """The service delivers ``bulk.completed`` to a receiver on loopback, which verifies and
    records it; the run waits on the event store, never polling (its poll interval is an hour)."""
    from listhygiene.clients import EventStore, WebhookReceiver

    secret = "whsec_pipeline"
    events = EventStore(tmp_path / "events.db")
    receiver = WebhookReceiver(events, secret=secret, form="b")
    with Store(f"sqlite:///{tmp_path / 'hooks.db'}") as store:
        app = create_app(
            store,
            Engine(sandbox_settings(sandbox)),
            allow_http_webhooks=True,
            allow_private_webhooks=True,
        )
        app.state.webhook_outbox.poll_interval = 0.05
        key, _ = store.create_key("hooked", 100)
        with LiveServer(app) as url, LiveServer(receiver.app) as hook_url:
            settings = ClientSettings(base_url=f"{url}/b/v1", api_key=key)
            registered = httpx.post(
                f"{url}/b/v1/webhooks",
                headers={"Authorization": f"Bearer {key}"},
                json={"url": f"{hook_url}/", "events": ["bulk.completed"], "secret": secret},
            )
            assert registered.status_code == 200, registered.text
            # Without the event the run would sit out an hour (and the test's time-out).
            backend = FormBBackend(
                settings, events=events, poll_seconds=3600, webhook_fallback=3600
            )
            listhygiene.clean(contacts, tmp_path / "out", backend=backend)
            (job_id,) = [job for job, _ in jobs_of(store, key)]
    assert statuses(tmp_path / "out") == local
    recorded = events.events()
    assert [(e.event, e.job_id) for e in recorded] == [("bulk.completed", job_id)]


class FormAFailsAfterSubmitting(FormABackend):
    async def results(self, job: JobRef) -> AsyncIterator[Any]:
        raise RuntimeError("killed")
        yield  # pragma: no cover


def test_a_resumed_form_a_file_job_is_read_from_its_result_file(
    service: Any, sandbox: Sandbox, tmp_path: Path
) -> None:
    """A run that resumes has only the result file to match rows to addresses, and the service
    escaped the cells that start like a formula (``-dash@...`` comes back as ``'-dash@...``)."""
    _, store = service
    key, row = store.create_key("resume-file", 100)
    path = tmp_path / "dash.csv"
    path.write_text("Email\n-dash@acme.test\nalice@acme.test\n+plus@acme.test\n")
    settings = settings_for(service, key)
    with pytest.raises(RuntimeError, match="killed"):
        listhygiene.clean(
            path, tmp_path / "out", backend=FormAFailsAfterSubmitting(settings, file_threshold=0)
        )
    assert [kind for _, kind in jobs_of(store, key)] == ["file"]
    resumed = FormABackend(settings, file_threshold=0, poll_seconds=0.1)
    result = listhygiene.clean(path, tmp_path / "out", backend=resumed)
    assert [kind for _, kind in jobs_of(store, key)] == ["file"]  # read, not submitted again
    rows = pd.concat([f for f in result.frames.values() if len(f)])
    found = dict(zip(rows["Email"], rows["status"], strict=True))
    assert found == {
        "-dash@acme.test": "invalid",
        "alice@acme.test": "valid",
        "+plus@acme.test": "invalid",
    }
    assert store.credits(row.id).consumed == 3
    assert result.summary["credits"]["used"] == 3


async def test_an_event_before_the_status_catches_up_does_not_make_the_wait_spin(
    service: Any, tmp_path: Path
) -> None:
    """A service may announce a job before its status says so. The wait must then poll at its
    pace, not ask the store (which answers at once) and the service in a tight loop."""
    import pyarrow as pa

    from listhygiene.clients import EventStore
    from listhygiene.service.store.models import RateWindow

    _, store = service
    key, row = store.create_key("early event", 100)
    events = EventStore(tmp_path / "events.db")
    backend = FormBBackend(settings_for(service, key, form="b"), events=events, poll_seconds=0.2)
    addresses = [f"p{i}@slow.test" for i in range(40)]
    try:
        job = await backend.submit(pa.array(addresses), check_smtp=True)
        events.record("b", "bulk.completed", job.job_id, {"event": "bulk.completed"}, "early")
        tables = [table async for table in backend.results(job)]
    finally:
        await backend.aclose()
    assert sum(len(t) for t in tables) == 40
    with store.transaction() as conn:
        requests = conn.execute(
            select(func.sum(RateWindow.count)).where(RateWindow.api_key_id == row.id)
        ).scalar_one()
    assert requests < 40  # a spinning wait makes hundreds


def test_a_result_file_carries_the_credits_its_job_charged() -> None:
    """A result file has no credits column: one credit per result that is not unknown, unless
    the job's status says it charged another number, which is then what the rows add up to."""
    from listhygiene.pipeline.backends.remote import _file_results

    data = (
        b"id,email,status,score,reason,is_deliverable,is_disposable,is_catchall,is_role,"
        b"is_free,smtp_check\n"
        b"0,a@x.test,valid,0.95,,true,false,false,false,false,true\n"
        b"1,b@x.test,unknown,0.3,smtp_timeout,false,false,false,false,false,true\n"
        b"2,c@x.test,invalid,0.0,mailbox_not_found,false,false,false,false,false,true\n"
    )

    def used(charged: int | None) -> list[int]:
        table = _file_results(data, None, charged=charged)
        return table.column("credits_used").to_pylist()

    assert used(None) == [1, 0, 1]
    assert used(2) == [1, 0, 1]
    assert used(3) == [1, 1, 1]  # a service that charges unknown results too
    assert used(1) == [1, 0, 0]
    assert sum(used(0)) == 0


# -- slow batches: form A's synchronous requests are bounded in time ---------------------------

SLOW_LIST = "Email\n" + "".join(
    f"{e}\n"
    for e in (
        "alice@acme.test",
        "nobody@acme.test",
        "g0@grey.test",
        "bob@acme.test",
        "g1@grey.test",
        "s@silent.test",
        "g2@grey.test",
        "ALICE@acme.test",
    )
)
#: What each address ends with once verified without a time limit: greylisted mailboxes are
#: valid once the named delay has passed; the silent host's address is genuinely unknown.
SLOW_VERDICTS = {
    "alice@acme.test": ("valid", None),
    "nobody@acme.test": ("invalid", "mailbox_not_found"),
    "g0@grey.test": ("valid", None),
    "bob@acme.test": ("valid", None),
    "g1@grey.test": ("valid", None),
    "s@silent.test": ("unknown", "smtp_timeout"),
    "g2@grey.test": ("valid", None),
    "ALICE@acme.test": ("valid", None),
}
SLOW_BILLABLE = 6  # distinct addresses whose verdict is not unknown (nobody@ is invalid)


def slow_service(sandbox: Sandbox, path: Path, sync_deadline: float) -> tuple[Store, Any]:
    store = Store(f"sqlite:///{path}")
    # The engine retries greylisting at the delay the host names (2.5 s): longer than a
    # synchronous request may take on this service
    settings = sandbox_settings(sandbox, retry_delays=(1.0,))
    app = create_app(store, Engine(settings), sync_deadline=sync_deadline)
    return store, app


def warm_uploads(store: Store, url: str) -> None:
    """Have the service read one upload (from another key), so that the next one, seconds
    later, finds its parse machinery started: the first upload after a rest starts a forkserver
    and its imports (docs/security.md), longer than a client's 1 s time-out on a loaded
    machine."""
    key, _ = store.create_key("warm-up", 10)
    answer = httpx.post(
        f"{url}/a/v1/verify/file",
        headers=a(key),
        files={"file": ("warm.csv", b"email\nalice@acme.test\n")},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text


def verdicts(out: Path) -> dict[str, tuple[str, Any]]:
    frames = [pd.read_parquet(out / f"{s}.parquet") for s in STATUSES]
    rows = pd.concat([f for f in frames if len(f)])
    return {
        str(r["Email"]): (r["status"], None if pd.isna(r["reason"]) else r["reason"])
        for _, r in rows.iterrows()
    }


def test_form_a_sends_what_a_batch_had_no_time_for_to_a_file_job(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A batch cut by the service's deadline (1 s) answers the greylisted and silent addresses
    unknown / smtp_timeout, free: they are verified again in one file job, where the greylisted
    ones get their real verdict; every address is charged once."""
    path = tmp_path / "slow.csv"
    path.write_text(SLOW_LIST)
    store, app = slow_service(sandbox, tmp_path / "service.db", sync_deadline=1)
    with store, LiveServer(app) as url:
        key, row = store.create_key("deadline", 100)
        settings = ClientSettings(base_url=f"{url}/a/v1", api_key=key)
        backend = FormABackend(settings, poll_seconds=0.1)
        result = listhygiene.clean(path, tmp_path / "out", backend=backend)
        assert verdicts(tmp_path / "out") == SLOW_VERDICTS
        assert sum(result.summary["rows"]["by_status"].values()) == len(SLOW_VERDICTS)
        assert [kind for _, kind in jobs_of(store, key)] == ["file"]
        assert store.credits(row.id).consumed == SLOW_BILLABLE  # once per address
        assert result.summary["credits"] == {"used": SLOW_BILLABLE}


def test_a_batch_that_times_out_on_the_client_is_not_sent_again_but_verified_in_a_file_job(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The client gives up on a batch (its time-out, 1 s, is shorter than the service's work):
    no ReadTimeout ends the run, the batch is not sent again (the service may have charged it),
    its addresses are verified in a file job, and the summary says how many credits the lost
    request may have taken."""
    path = tmp_path / "slow.csv"
    path.write_text(SLOW_LIST)
    store, app = slow_service(sandbox, tmp_path / "service.db", sync_deadline=20)
    with store, LiveServer(app) as url:
        key, row = store.create_key("client time-out", 100)
        warm_uploads(store, url)  # the file job is sent with the same 1 s time-out
        settings = ClientSettings(base_url=f"{url}/a/v1", api_key=key, timeout=1)
        backend = FormABackend(settings, poll_seconds=0.1)
        result = listhygiene.clean(path, tmp_path / "out", backend=backend)
        assert verdicts(tmp_path / "out") == SLOW_VERDICTS
        assert [kind for _, kind in jobs_of(store, key)] == ["file"]  # sent once, as a job
        lost = len(SLOW_VERDICTS) - 1  # the one batch, its distinct addresses
        assert result.summary["credits"] == {"used": SLOW_BILLABLE, "uncertain": lost}
        # The file job charged each address once; the lost batch took at most its addresses
        # (it may still be running on the service)
        consumed = store.credits(row.id).consumed
        assert SLOW_BILLABLE <= consumed <= SLOW_BILLABLE + lost
        (job_id,) = [job for job, _ in jobs_of(store, key)]
        with store.transaction() as conn:
            charged = conn.execute(select(Job.credits_used).where(Job.id == job_id)).scalar_one()
        assert charged == SLOW_BILLABLE


class KilledWaitingForItsFileJob(FormABackend):
    """Dies once its slow addresses' file job is accepted (and recorded), before reading it."""

    async def _file(self, job: JobRef, emails: list[str] | None) -> Any:
        raise RuntimeError("killed")


def test_a_run_killed_while_its_slow_batch_file_job_runs_reads_that_job_when_rerun(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    path = tmp_path / "slow.csv"
    path.write_text(SLOW_LIST)
    store, app = slow_service(sandbox, tmp_path / "service.db", sync_deadline=1)
    with store, LiveServer(app) as url:
        key, row = store.create_key("killed", 100)
        settings = ClientSettings(base_url=f"{url}/a/v1", api_key=key)
        with pytest.raises(RuntimeError, match="killed"):
            listhygiene.clean(path, tmp_path / "out", backend=KilledWaitingForItsFileJob(settings))
        assert [kind for _, kind in jobs_of(store, key)] == ["file"]
        result = listhygiene.clean(
            path, tmp_path / "out", backend=FormABackend(settings, poll_seconds=0.1)
        )
        assert [kind for _, kind in jobs_of(store, key)] == ["file"]  # read, not sent again
        assert result.summary["addresses"]["resumed"] is True
        assert verdicts(tmp_path / "out") == SLOW_VERDICTS
        assert store.credits(row.id).consumed == SLOW_BILLABLE


def test_without_smtp_a_batch_that_times_out_is_unknown_and_free_not_sent_again(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """No file job without SMTP (a file job always probes): the lost batch's addresses are
    unknown / smtp_timeout, free, as the service answers addresses it had no time for; the
    credits its request may have taken are reported, and nothing is sent twice."""
    path = tmp_path / "lag.csv"
    path.write_text("Email\nl@lag.test\ninfo@lag.test\n")
    store, app = slow_service(sandbox, tmp_path / "service.db", sync_deadline=20)
    with store, LiveServer(app) as url:
        key, row = store.create_key("no smtp", 100)
        settings = ClientSettings(base_url=f"{url}/a/v1", api_key=key, timeout=0.3)
        result = listhygiene.clean(
            path, tmp_path / "out", backend=FormABackend(settings), check_smtp=False
        )
        assert verdicts(tmp_path / "out") == {
            "l@lag.test": ("unknown", "smtp_timeout"),
            "info@lag.test": ("unknown", "smtp_timeout"),
        }
        assert result.summary["credits"] == {"used": 0, "uncertain": 2}
        assert jobs_of(store, key) == []
        assert store.credits(row.id).consumed <= 2  # the lost request, once


class GatewayTimesOutOnBatches(httpx.AsyncBaseTransport):
    """A proxy in front of the service that passes every request on, but answers a batch with
    504 once the service has done it (and charged it): the answer is lost on the way."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if not request.url.path.endswith("/verify/bulk"):
            return response
        await response.aread()
        await response.aclose()
        return httpx.Response(504, text="<html>504 Gateway Time-out</html>", request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_batch_a_gateway_answers_504_is_verified_in_a_file_job(
    service: Any, contacts: Path, local: Any, tmp_path: Path
) -> None:
    _, store = service
    key, row = store.create_key("gateway", 100)
    settings = settings_for(service, key, transport=GatewayTimesOutOnBatches())
    result = listhygiene.clean(
        contacts, tmp_path / "out", backend=FormABackend(settings, poll_seconds=0.1)
    )
    assert statuses(tmp_path / "out") == local
    assert [kind for _, kind in jobs_of(store, key)] == ["file"]
    unknown = sum(1 for status, _ in local.values() if status == "unknown")
    assert result.summary["credits"] == {"used": DISTINCT - unknown, "uncertain": DISTINCT}
    # the batch behind the gateway was charged, and the file job once more: reported, not hidden
    assert store.credits(row.id).consumed == 2 * (DISTINCT - unknown)


class CountsBatches(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.batches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.batches += request.url.path.endswith("/verify/bulk")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_once_a_batch_is_cut_the_batches_not_yet_sent_go_into_the_file_job(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Three batches, one at a time: the first comes back cut by the deadline, so the other two
    are never sent synchronously; they and the cut addresses make one file job."""
    addresses = ["g0@grey.test", "g1@grey.test"] + [f"n{i}@acme.test" for i in range(120)]
    path = tmp_path / "list.csv"
    path.write_text("Email\n" + "\n".join(addresses) + "\n")
    store, app = slow_service(sandbox, tmp_path / "service.db", sync_deadline=1)
    with store, LiveServer(app) as url:
        key, row = store.create_key("switch", 1_000)
        counter = CountsBatches()
        settings = ClientSettings(base_url=f"{url}/a/v1", api_key=key, transport=counter)
        backend = FormABackend(settings, poll_seconds=0.1, bulk_concurrency=1)
        result = listhygiene.clean(path, tmp_path / "out", backend=backend)
        assert counter.batches == 1
        assert [kind for _, kind in jobs_of(store, key)] == ["file"]
        found = verdicts(tmp_path / "out")
        assert len(found) == len(addresses)
        assert found["g0@grey.test"] == found["g1@grey.test"] == ("valid", None)
        assert {found[a] for a in addresses[2:]} == {("invalid", "mailbox_not_found")}
        assert store.credits(row.id).consumed == len(addresses)  # each once
        assert result.summary["credits"] == {"used": len(addresses)}


def test_an_smtp_list_longer_than_one_round_of_batches_goes_as_a_file_job(
    service: Any, tmp_path: Path
) -> None:
    """SMTP-heavy by size: over 200 addresses (four batches of 50 in flight), a file job at once;
    without SMTP, batches whatever the length (a file job always probes)."""
    from listhygiene.pipeline.backends.remote import FILE_THRESHOLD

    _, store = service
    path = tmp_path / "list.csv"
    path.write_text("Email\n" + "".join(f"m{i}@acme.test\n" for i in range(FILE_THRESHOLD + 1)))
    for check_smtp, kinds, batches in ((True, ["file"], 0), (False, [], 5)):
        key, _ = store.create_key(f"threshold {check_smtp}", 1_000)
        counter = CountsBatches()
        settings = settings_for(service, key, transport=counter)
        backend = FormABackend(settings, poll_seconds=0.1)
        out = tmp_path / f"out-{check_smtp}"
        listhygiene.clean(path, out, backend=backend, check_smtp=check_smtp)
        assert [kind for _, kind in jobs_of(store, key)] == kinds
        assert counter.batches == batches
        assert len(verdicts(out)) == FILE_THRESHOLD + 1


# -- the one backend factory and the one wait loop (pipeline.backends, issue 16) ------------------


def test_make_backend_builds_every_kind_and_refuses_what_cannot_work(tmp_path: Path) -> None:
    import asyncio

    from listhygiene.clients import EventStore
    from listhygiene.errors import ConfigurationError
    from listhygiene.pipeline.backends import LocalBackend, make_backend

    base = EngineSettings(helo="base.test")
    local = make_backend("local", settings=base, engine_overrides={"smtp_port": 2525})
    assert isinstance(local, LocalBackend)
    assert (local.engine.settings.helo, local.engine.settings.smtp_port) == ("base.test", 2525)
    assert make_backend(local) is local
    a = make_backend("form-a", base_url="http://x/a/v1", api_key="k", api_key_header="X-Key")
    assert isinstance(a, FormABackend)
    assert (a.settings.api_key, a.settings.api_key_header) == ("k", "X-Key")
    b = make_backend(
        "form-b",
        client_settings=ClientSettings(base_url="http://x/b/v1", api_key="k"),
        events=str(tmp_path / "events.db"),
        poll_seconds=0.5,
    )
    assert isinstance(b, FormBBackend)
    assert isinstance(b.events, EventStore)
    assert b.poll_seconds == 0.5
    with pytest.raises(ConfigurationError, match=r"unknown backend 'form-c' \(known: local"):
        make_backend("form-c")
    with pytest.raises(ConfigurationError, match="needs a base URL and an API key"):
        make_backend("form-b", base_url="http://x/b/v1")
    for backend in (local, a, b):
        asyncio.run(backend.aclose())


class _Job:
    def __init__(self, status: str) -> None:
        self.status = status


def _statuses(script: dict[str, list[str]]) -> tuple[Any, dict[str, int]]:
    """A ``status`` that gives each job the next state of its script (the last one repeats)."""
    reads: dict[str, int] = dict.fromkeys(script, 0)

    async def status(job_id: str) -> _Job:
        states = script[job_id]
        reads[job_id] += 1
        return _Job(states[min(reads[job_id], len(states)) - 1])

    return status, reads


async def test_wait_until_done_polls_until_every_job_completed() -> None:
    from listhygiene.pipeline.backends import wait_until_done

    status, reads = _statuses(
        {"j1": ["pending", "processing", "completed"], "j2": ["processing", "completed"]}
    )
    states = await wait_until_done(["j1", "j2"], status, poll_seconds=0.01)
    assert {j: s.status for j, s in states.items()} == {"j1": "completed", "j2": "completed"}
    assert reads == {"j1": 3, "j2": 2}  # an ended job is not read again


async def test_wait_until_done_stops_at_the_first_failed_job() -> None:
    from listhygiene.pipeline.backends import wait_until_done

    status, reads = _statuses({"j1": ["processing"], "j2": ["failed"], "j3": ["processing"]})
    states = await wait_until_done(["j1", "j2", "j3"], status, poll_seconds=0.01)
    assert states["j2"].status == "failed"
    assert reads == {"j1": 1, "j2": 1, "j3": 0}


async def test_wait_until_done_raises_at_its_wall_clock_deadline() -> None:
    from listhygiene.pipeline.backends import WaitTimeout, wait_until_done

    status, _ = _statuses({"j1": ["processing"]})
    with pytest.raises(WaitTimeout, match="j1 still running") as raised:
        await wait_until_done(["j1"], status, deadline=time.time() - 1)
    assert raised.value.states["j1"].status == "processing"


async def test_wait_until_done_wakes_on_the_jobs_webhook_event(tmp_path: Path) -> None:
    # Polling is an hour apart: only the recorded event can end the wait within the test's bound.
    import asyncio

    from listhygiene.clients import EventStore
    from listhygiene.pipeline.backends import wait_until_done
    from listhygiene.vocabulary import JOB_EVENTS

    store = EventStore(tmp_path / "events.db")
    done = {"j1": False}

    async def status(job_id: str) -> _Job:
        return _Job("completed" if done[job_id] else "processing")

    async def deliver() -> None:
        await asyncio.sleep(0.2)
        done["j1"] = True
        store.record("b", "bulk.completed", "j1", {}, "digest-1")

    delivery = asyncio.ensure_future(deliver())
    states = await asyncio.wait_for(
        wait_until_done(
            ["j1"],
            status,
            events=store,
            event_names=lambda _: JOB_EVENTS["b"],
            poll_seconds=3600,
            event_timeout=3600,
        ),
        timeout=30,
    )
    await delivery
    assert states["j1"].status == "completed"

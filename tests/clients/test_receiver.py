"""The webhook receiver and its event store: verification over ASGI, the store shared by threads
and processes, and deliveries from the real service (uvicorn on loopback, the sandbox engine) to
the receiver served by uvicorn too.

Deliveries are built as our service builds them, signed with the service's own ``sign`` and
``form_b_payload_signature``.
"""

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from listhygiene.clients.events import Event, EventStore
from listhygiene.clients.receiver import Delivery, WebhookReceiver, WebhookRejected
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.delivery import USER_AGENT, form_b_payload_signature, sign
from listhygiene.service.store import Store
from tests.service.live import LiveServer, a, b, engine_for

SECRET = "whsec_receiver-test-secret"
NOW = 1_750_000_000.0  # the receivers' clock in the unit tests
DAY = 86_400.0
REPO = Path(__file__).resolve().parents[2]


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def payload(
    form: str,
    *,
    job_id: str = "job-1",
    at: float = NOW,
    secret: str | None = SECRET,
    event: str | None = None,
) -> dict[str, Any]:
    """A payload as the service queues it (form B's signed in its ``signature`` field)."""
    if form == "a":
        data: dict[str, Any] = {"job_id": job_id, "file_name": "résumé.csv", "valid_emails": 3}
        event = event or "file.completed"
    else:
        data = {"job_id": job_id, "status": "completed", "total": 3, "valid": 2}
        event = event or "bulk.completed"
    body: dict[str, Any] = {"event": event, "timestamp": iso(at), "data": data}
    if form == "b" and secret is not None:
        body["signature"] = form_b_payload_signature(body, secret)
    return body


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def headers(raw: bytes, secret: str | None = SECRET, event: str = "x") -> dict[str, str]:
    sent = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Webhook-Event": event,
        "X-Webhook-Timestamp": str(int(NOW)),
    }
    if secret is not None:
        sent["X-Webhook-Signature"] = sign(raw, secret)
    return sent


@pytest.fixture
def events(tmp_path: Path) -> EventStore:
    return EventStore(tmp_path / "events.db")


MakeReceiver = Callable[..., WebhookReceiver]


@pytest.fixture
def make(events: EventStore) -> MakeReceiver:
    def build(form: str, secret: str | None = SECRET, **options: Any) -> WebhookReceiver:
        options.setdefault("clock", lambda: NOW)
        return WebhookReceiver(events, secret=secret, form=form, **options)  # type: ignore[arg-type]

    return build


async def post(
    receiver: WebhookReceiver | Starlette,
    content: Any,
    sent: dict[str, Any] | None = None,
    path: str = "/",
) -> httpx.Response:
    app = receiver.app if isinstance(receiver, WebhookReceiver) else receiver
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as client:
        return await client.post(path, content=content, headers=sent or {})


def refused(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.json()["received"] is False
    assert isinstance(response.json()["error"], str)


# -- good deliveries ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["a", "b"])
async def test_good_delivery_is_recorded(make: MakeReceiver, events: EventStore, form: str) -> None:
    body = payload(form)
    raw = encode(body)
    response = await post(make(form), raw, headers(raw))
    assert response.status_code == 200, response.text
    assert response.json() == {"received": True}
    found = events.find("job-1")
    assert found is not None
    assert (found.form, found.event, found.job_id) == (form, body["event"], "job-1")
    assert found.payload == body
    assert found.data == body["data"]
    assert found.received_at == datetime.fromtimestamp(NOW, UTC)


@pytest.mark.parametrize("signed_by", ["header", "field"])
async def test_form_b_needs_only_one_of_its_signatures(
    make: MakeReceiver, events: EventStore, signed_by: str
) -> None:
    body = payload("b", secret=SECRET if signed_by == "field" else None)
    raw = encode(body)
    sent = headers(raw, SECRET if signed_by == "header" else None)
    response = await post(make("b"), raw, sent)
    assert response.status_code == 200, response.text
    assert events.find("job-1", ["bulk.completed"]) is not None


@pytest.mark.parametrize("form", ["a", "b"])
async def test_unsigned_is_accepted_without_a_secret(
    make: MakeReceiver, events: EventStore, form: str
) -> None:
    # e.g. form B's webhook_url with no webhook registered for it
    raw = encode(payload(form, secret=None))
    response = await post(make(form, secret=None), raw, headers(raw, None))
    assert response.status_code == 200, response.text
    assert events.find("job-1") is not None


async def test_any_path_and_mounted(make: MakeReceiver, events: EventStore) -> None:
    receiver = make("a")
    raw = encode(payload("a", job_id="deep"))
    assert (await post(receiver, raw, headers(raw), "/hooks/deep/path")).status_code == 200
    outer = Starlette(routes=[Mount("/webhooks/a", app=receiver.app)])
    raw = encode(payload("a", job_id="mounted"))
    response = await post(outer, raw, headers(raw), "/webhooks/a/")
    assert response.status_code == 200, response.text
    assert {e.job_id for e in events.events()} == {"deep", "mounted"}


# -- signatures --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["a", "b"])
async def test_bad_signature_is_401(make: MakeReceiver, events: EventStore, form: str) -> None:
    raw = encode(payload(form, secret="another-secret"))
    refused(await post(make(form), raw, headers(raw, "another-secret")), 401)
    assert events.events() == []


@pytest.mark.parametrize("form", ["a", "b"])
async def test_missing_signature_with_a_secret_is_401(
    make: MakeReceiver, events: EventStore, form: str
) -> None:
    raw = encode(payload(form, secret=None))
    refused(await post(make(form), raw, headers(raw, None)), 401)
    # form A: a signature field in the payload does not stand in for the header
    raw = encode({**payload("a", secret=None), "signature": sign(b"", SECRET)})
    refused(await post(make("a"), raw, headers(raw, None)), 401)
    assert events.events() == []


@pytest.mark.parametrize("form", ["a", "b"])
async def test_tampered_body_is_401(make: MakeReceiver, events: EventStore, form: str) -> None:
    raw = encode(payload(form))
    sent = headers(raw)
    tampered = raw.replace(b'"job-1"', b'"job-2"')
    assert tampered != raw
    refused(await post(make(form), tampered, sent), 401)
    refused(await post(make(form), raw + b" ", sent), 401)  # even insignificant white space
    assert events.events() == []


async def test_form_b_both_signatures_must_verify(make: MakeReceiver, events: EventStore) -> None:
    receiver = make("b")
    # a good header over a body whose signature field is wrong
    raw = encode(payload("b", secret="another-secret"))
    refused(await post(receiver, raw, headers(raw)), 401)
    # the payload changed after signing, re-sent without the header: the field no longer matches
    body = payload("b")
    body["data"]["valid"] = 3
    raw = encode(body)
    refused(await post(receiver, raw, headers(raw, None)), 401)
    # a signature field that is not a string
    raw = encode({**payload("b", secret=None), "signature": 12})
    refused(await post(receiver, raw, headers(raw, None)), 401)
    assert events.events() == []


async def test_non_ascii_signature_header_is_401_not_500(make: MakeReceiver) -> None:
    raw = encode(payload("a"))
    sent = {**headers(raw), "X-Webhook-Signature": "sha256=é".encode()}
    refused(await post(make("a"), raw, sent), 401)


# -- freshness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "status"),
    [
        (NOW - DAY - 1, 400),  # stale
        (NOW - 5 * 3600, 200),  # a late retry of the service (its last is about 4.4 h after)
        (NOW + 301, 400),  # from the future
        (NOW + 60, 200),  # a clock a little ahead
    ],
)
@pytest.mark.parametrize("form", ["a", "b"])
async def test_timestamp_window(make: MakeReceiver, form: str, at: float, status: int) -> None:
    raw = encode(payload(form, at=at))
    response = await post(make(form), raw, headers(raw))
    assert response.status_code == status, response.text


async def test_freshness_is_the_body_timestamp_not_the_header(
    make: MakeReceiver, events: EventStore
) -> None:
    raw = encode(payload("a", at=NOW - 2 * DAY))
    refused(await post(make("a"), raw, headers(raw)), 400)  # the header says NOW
    fresh = encode(payload("a", job_id="fresh"))
    sent = {**headers(fresh), "X-Webhook-Timestamp": str(int(NOW - 2 * DAY))}
    assert (await post(make("a"), fresh, sent)).status_code == 200
    assert [e.job_id for e in events.events()] == ["fresh"]


async def test_max_age_is_a_setting(make: MakeReceiver) -> None:
    raw = encode(payload("b", at=NOW - 120))
    refused(await post(make("b", max_age=60), raw, headers(raw)), 400)


# -- malformed, oversized, wrong method --------------------------------------------------------


def _without(key: str) -> bytes:
    body = payload("a")
    del body[key]
    return encode(body)


def _data(data: object) -> bytes:
    return encode({**payload("a"), "data": data})


MALFORMED = {
    "not json": b"{not json",
    "not utf-8": b'{"event": "\xff"}',
    "a list": b"[1, 2]",
    "empty": b"",
    "no event": _without("event"),
    "empty event": encode({**payload("a"), "event": ""}),
    "no data": _without("data"),
    "data not an object": _data(["job-1"]),
    "no job_id": _data({"file_name": "x.csv"}),
    "job_id not a string": _data({"job_id": None}),
    "no timestamp": _without("timestamp"),
    "bad timestamp": encode({**payload("a"), "timestamp": "yesterday"}),
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_malformed_signed_body_is_400(
    make: MakeReceiver, events: EventStore, name: str
) -> None:
    raw = MALFORMED[name]
    refused(await post(make("a"), raw, headers(raw)), 400)
    refused(await post(make("a", secret=None), raw, headers(raw, None)), 400)
    assert events.events() == []


@pytest.mark.parametrize("form", ["a", "b"])
async def test_malformed_unsigned_body_with_a_secret_is_401(make: MakeReceiver, form: str) -> None:
    # nothing is said about a body before its sender is authenticated
    refused(await post(make(form), b"{not json", headers(b"", None)), 401)


async def test_integer_job_id_is_taken_as_a_string(make: MakeReceiver, events: EventStore) -> None:
    raw = _data({"job_id": 42})
    assert (await post(make("a"), raw, headers(raw))).status_code == 200
    assert events.find("42") is not None


async def test_oversized_body_is_413(make: MakeReceiver, events: EventStore) -> None:
    receiver = make("a")
    body = payload("a")
    body["data"]["padding"] = "x" * (1024 * 1024)
    raw = encode(body)
    refused(await post(receiver, raw, headers(raw)), 413)  # told by Content-Length

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the stream is capped
        for start in range(0, len(raw), 64 * 1024):
            yield raw[start : start + 64 * 1024]

    refused(await post(receiver, chunks(), headers(raw)), 413)
    assert events.events() == []
    small = make("a", max_body=100)
    raw = encode(payload("a"))
    refused(await post(small, raw, headers(raw)), 413)


async def test_wrong_method_is_405(make: MakeReceiver) -> None:
    transport = httpx.ASGITransport(app=make("a").app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as client:
        for method in ("GET", "PUT", "DELETE"):
            response = await client.request(method, "/")
            refused(response, 405)
            assert "POST" in response.headers["allow"]


# -- replays -----------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["a", "b"])
async def test_replay_is_acknowledged_and_recorded_once(
    make: MakeReceiver, events: EventStore, form: str
) -> None:
    receiver = make(form)
    raw = encode(payload(form))
    first = await post(receiver, raw, headers(raw))
    assert first.json() == {"received": True}
    # a retry of the service: the same body, a new sending time
    again = await post(receiver, raw, {**headers(raw), "X-Webhook-Timestamp": str(int(NOW) + 30)})
    assert again.status_code == 200, again.text
    assert again.json() == {"received": True, "duplicate": True}
    assert len(events.events()) == 1
    # the same event queued anew (another timestamp) is another delivery
    raw = encode(payload(form, at=NOW + 1))
    assert (await post(receiver, raw, headers(raw))).json() == {"received": True}
    assert len(events.events()) == 2


async def test_a_re_serialised_form_b_delivery_is_the_same_event(
    make: MakeReceiver, events: EventStore
) -> None:
    """A proxy that re-encodes JSON (other spacing, key order, escapes) changes the raw body but
    not the signed event: form B's payload signature still verifies, and it is one event."""
    receiver = make("b")
    body = payload("b")
    compact = encode(body)
    spaced = json.dumps(dict(reversed(body.items())), indent=2, ensure_ascii=True).encode()
    assert compact != spaced
    for raw in (compact, spaced):
        sent = {k: v for k, v in headers(raw).items() if k != "X-Webhook-Signature"}
        assert (await post(receiver, raw, sent)).status_code == 200
    assert len(events.events()) == 1


# -- without HTTP ------------------------------------------------------------------------------


def test_verify_and_accept_without_http(make: MakeReceiver, events: EventStore) -> None:
    receiver = make("b")
    raw = encode(payload("b"))
    delivery = receiver.verify(raw)  # the payload's signature alone
    assert isinstance(delivery, Delivery)
    assert (delivery.event, delivery.job_id) == ("bulk.completed", "job-1")
    assert events.events() == []  # verify records nothing
    assert receiver.accept(raw, sign(raw, SECRET))[1] is True
    assert receiver.accept(raw)[1] is False
    with pytest.raises(WebhookRejected) as caught:
        receiver.verify(raw, sign(raw, "wrong"))
    assert caught.value.status == 401


def test_settings_are_checked(events: EventStore) -> None:
    with pytest.raises(ValueError, match="form"):
        WebhookReceiver(events, secret=SECRET, form="c")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty secret"):
        WebhookReceiver(events, secret="", form="a")
    with pytest.raises(ValueError, match="max_age"):
        WebhookReceiver(events, secret=None, form="a", max_age=0)


def test_importing_the_receiver_does_not_import_starlette() -> None:
    code = (
        "import sys, listhygiene.clients.receiver, listhygiene.clients.events\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'fastapi'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


# -- the event store ---------------------------------------------------------------------------


def test_find_the_latest_matching(events: EventStore) -> None:
    assert events.find("j") is None
    assert events.record("b", "bulk.failed", "j", {"n": 1}, "d1")
    assert events.record("b", "bulk.completed", "j", {"n": 2}, "d2")
    assert events.record("b", "bulk.completed", "other", {"n": 3}, "d3")
    latest = events.find("j")
    assert latest is not None
    assert latest.payload == {"n": 2}
    failed = events.find("j", ["bulk.failed"])
    assert failed is not None
    assert failed.payload == {"n": 1}
    named = events.find("j", "bulk.failed")  # one name, not its letters
    assert named == failed
    assert events.find("j", ["credits.low"]) is None
    assert events.find("j", []) is None


def test_events_since(events: EventStore) -> None:
    for n in range(5):
        events.record("a", "file.completed", f"j{n}", {"n": n}, f"d{n}")
    everything = events.events()
    assert [e.job_id for e in everything] == [f"j{n}" for n in range(5)]
    assert [e.job_id for e in events.events(everything[2].id)] == ["j3", "j4"]
    assert [e.job_id for e in events.events(limit=2)] == ["j0", "j1"]
    assert isinstance(everything[0], Event)
    assert len({*everything}) == 5  # hashable, though the payload is a dict
    with pytest.raises(AttributeError):
        everything[0].event = "x"  # type: ignore[misc]


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    import sqlite3

    EventStore(tmp_path / "wal.db")
    with sqlite3.connect(tmp_path / "wal.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_wait_sees_a_record_from_another_process(events: EventStore) -> None:
    waiting = asyncio.create_task(events.wait("job-x", ["bulk.completed"], timeout=30, poll=0.05))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    code = (
        "import sys\n"
        "from listhygiene.clients.events import EventStore\n"
        "store = EventStore(sys.argv[1])\n"
        "store.record('b', 'bulk.failed', 'job-x', {'n': 0}, 'digest-0')\n"
        "print(store.record('b', 'bulk.completed', 'job-x', {'n': 1}, 'digest-1'))\n"
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, events.path],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert done.stdout.strip() == "True"
    event = await asyncio.wait_for(waiting, 10)
    assert (event.event, event.payload) == ("bulk.completed", {"n": 1})
    # a waiter that starts after the event still sees it, in the same way from a thread
    assert events.wait_sync("job-x", ["bulk.failed"], timeout=1).payload == {"n": 0}


async def test_wait_times_out(events: EventStore) -> None:
    events.record("a", "file.failed", "job-y", {}, "d")
    with pytest.raises(TimeoutError, match=r"file\.completed"):
        await events.wait("job-y", ["file.completed"], timeout=0.2, poll=0.05)
    with pytest.raises(TimeoutError):
        events.wait_sync("job-y", ["file.completed"], timeout=0.2, poll=0.05)


def test_threads_recording_one_digest_make_one_row(events: EventStore) -> None:
    count = 8
    barrier = threading.Barrier(count)
    results: list[bool] = []
    lock = threading.Lock()

    def record(n: int) -> None:
        barrier.wait()
        outcome = events.record("b", "bulk.completed", "job-t", {"thread": n}, "same-digest")
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * (count - 1) + [True]
    assert len(events.events()) == 1


# -- end to end, with the real service ---------------------------------------------------------

VALID = "alice.johnson@acme-corp.test"
NO_MAILBOX = "nobody.here@acme-corp.test"


class Later:
    """An ASGI app that forwards to one given later: the receiver's URL (its port) must be known
    to register the webhook, and form A's secret is only known once it is registered."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "the receiver was not set before the server started"
        await self.app(scope, receive, send)


@pytest.fixture
def service(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    with Store(f"sqlite:///{tmp_path / 'service.db'}") as store:
        app = create_app(
            store, engine_for(sandbox), allow_http_webhooks=True, allow_private_webhooks=True
        )
        app.state.webhook_outbox.poll_interval = 0.05  # the Outbox's setting: deliver at once
        with LiveServer(app) as url:
            yield url, store


async def test_form_b_bulk_job_end_to_end(service: tuple[str, Store], events: EventStore) -> None:
    base_url, store = service
    key, _ = store.create_key("receiver-b", 100)
    later = Later()
    server = LiveServer(later)
    hook_url = f"http://127.0.0.1:{server.port}/"
    later.app = WebhookReceiver(events, secret=SECRET, form="b").app
    with server:
        async with httpx.AsyncClient(base_url=f"{base_url}/b/v1", headers=b(key)) as client:
            created = await client.post(
                "/webhooks", json={"url": hook_url, "events": ["bulk.completed"], "secret": SECRET}
            )
            assert created.status_code == 200, created.text
            submitted = await client.post(
                "/verify/bulk", json={"emails": [VALID, NO_MAILBOX], "webhook_url": hook_url}
            )
            assert submitted.status_code == 200, submitted.text
            job_id = submitted.json()["job_id"]
            event = await events.wait(job_id, ["bulk.completed"], timeout=30, poll=0.05)
    assert event.form == "b"
    assert event.data["job_id"] == job_id
    assert event.data["status"] == "completed"
    assert event.data["total"] == 2
    assert event.payload["signature"].startswith("sha256=")


async def test_form_a_file_job_end_to_end(service: tuple[str, Store], events: EventStore) -> None:
    base_url, store = service
    key, _ = store.create_key("receiver-a", 100)
    later = Later()
    server = LiveServer(later)
    hook_url = f"http://127.0.0.1:{server.port}/"
    async with httpx.AsyncClient(base_url=f"{base_url}/a/v1", headers=a(key)) as client:
        created = await client.post(
            "/webhooks", json={"url": hook_url, "events": ["file.completed"]}
        )
        assert created.status_code == 200, created.text
        secret = created.json()["data"]["secret"]
        later.app = WebhookReceiver(events, secret=secret, form="a").app
        with server:
            content = f"email\n{VALID}\n{NO_MAILBOX}\n".encode()
            uploaded = await client.post(
                "/verify/file", files={"file": ("list.csv", content)}, timeout=30
            )
            assert uploaded.status_code == 200, uploaded.text
            job_id = uploaded.json()["data"]["task_id"]
            event = await events.wait(job_id, ["file.completed"], timeout=30, poll=0.05)
    assert event.form == "a"
    assert event.data["job_id"] == job_id
    assert event.data["file_name"] == "list.csv"
    assert event.data["total_emails"] == 2

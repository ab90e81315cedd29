"""Webhooks over real HTTP: uvicorn on loopback, a SQLite store, deliveries to a local HTTPS
receiver with a self-signed certificate for 127.0.0.1 that the Outbox is made to trust."""

import asyncio
import datetime as dt
import hashlib
import hmac
import ipaddress
import json
import secrets
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from listhygiene.engine import Engine, EngineSettings
from listhygiene.service.app import create_app
from listhygiene.service.delivery import (
    UnsafeURL,
    check_url,
    form_b_payload_signature,
    notify,
    sign,
)
from listhygiene.service.outbox import Outbox
from listhygiene.service.store import Store
from listhygiene.service.store import webhooks as webhook_store
from tests.service.live import LiveServer, a, b

#: One server per module, on the store of tests/service/conftest.py, on SQLite.
STORE_BACKENDS = ("sqlite",)

ENVELOPE = {"success", "code", "message", "data"}
ERROR_A = {"success", "code", "message", "error"}
A_HOOK = {"id", "url", "events", "is_active", "created_at", "updated_at"}
B_HOOK = {"id", "url", "events", "is_active", "created_at"}


# -- the HTTPS receiver ------------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Receiver:
    """An HTTPS server recording every request; a path can be made to answer 500 first."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_first: dict[str, int] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.requests.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                        }
                    )
                    failing = receiver.fail_first.get(self.path, 0)
                    if failing:
                        receiver.fail_first[self.path] = failing - 1
                status = 500 if failing else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.base = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"{self.base}/hook/{secrets.token_hex(6)}"

    def at(self, url: str) -> list[dict[str, Any]]:
        path = httpx.URL(url).path
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def wait(self, url: str, count: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.at(url)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{len(self.at(url))} deliveries to {url}, wanted {count}")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def receiver(certificate: tuple[Path, Path]) -> Iterator[Receiver]:
    running = Receiver(*certificate)
    yield running
    running.close()


# -- the service -------------------------------------------------------------------------------


SCHEDULE = (0.3, 0.6, 1.0, 2.0, 4.0)


@pytest.fixture(scope="module")
def base_url(store: Store, certificate: tuple[Path, Path]) -> Iterator[str]:
    app = create_app(store, Engine(EngineSettings()), allow_private_webhooks=True)
    outbox = app.state.webhook_outbox
    assert outbox in app.state.services
    outbox.verify = str(certificate[0])  # the test hook: trust the receiver's certificate
    outbox.poll_interval = 0.05
    outbox.schedule = SCHEDULE
    with LiveServer(app) as url:
        yield url


def new_key(store: Store) -> tuple[str, str]:
    key, row = store.create_key("test", 100)
    return key, row.id


def assert_a_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == ERROR_A
    assert body["success"] is False
    assert body["code"] == code
    assert body["error"]["code"] == code


def assert_b_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)


def verify_header(body: bytes, secret: str, header: str) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


# -- registration ------------------------------------------------------------------------------


def test_a_create_list_delete(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    key, _ = new_key(store)
    url = receiver.url()
    created = client.post(
        "/a/v1/webhooks",
        json={"url": url, "events": ["file.completed", "file.failed"]},
        headers=a(key),
    )
    assert created.status_code == 200, created.text
    body = created.json()
    assert set(body) == ENVELOPE
    assert body["success"] is True
    hook = body["data"]
    assert set(hook) == A_HOOK | {"secret"}
    assert hook["url"] == url
    assert hook["events"] == ["file.completed", "file.failed"]
    assert hook["is_active"] is True
    assert isinstance(hook["secret"], str)
    assert len(hook["secret"]) >= 32
    assert hook["created_at"].endswith("Z")

    listed = client.get("/a/v1/webhooks", headers=a(key))
    assert listed.status_code == 200, listed.text
    data = listed.json()["data"]
    assert set(data) == {"webhooks", "total"}
    assert data["total"] == 1
    assert set(data["webhooks"][0]) == A_HOOK  # no secret
    assert data["webhooks"][0]["id"] == hook["id"]

    deleted = client.delete(f"/a/v1/webhooks/{hook['id']}", headers=a(key))
    assert deleted.status_code == 200, deleted.text
    data = deleted.json()["data"]
    assert set(data) == {"message", "webhook_id"}
    assert data["webhook_id"] == hook["id"]
    assert client.get("/a/v1/webhooks", headers=a(key)).json()["data"] == {
        "webhooks": [],
        "total": 0,
    }
    assert_a_error(client.delete(f"/a/v1/webhooks/{hook['id']}", headers=a(key)), 404, "4040")


def test_b_create_list_delete(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    key, _ = new_key(store)
    url = receiver.url()
    created = client.post(
        "/b/v1/webhooks",
        json={"url": url, "events": ["bulk.completed"], "secret": "s3cret-value"},
        headers=b(key),
    )
    assert created.status_code == 200, created.text
    hook = created.json()
    assert set(hook) == B_HOOK  # the secret is not echoed
    assert "s3cret-value" not in created.text
    assert hook["url"] == url
    assert hook["events"] == ["bulk.completed"]
    assert hook["is_active"] is True

    listed = client.get("/b/v1/webhooks", headers=b(key))
    assert listed.status_code == 200
    assert listed.json() == {"webhooks": [hook], "total": 1}

    deleted = client.delete(f"/b/v1/webhooks/{hook['id']}", headers=b(key))
    assert deleted.status_code == 200
    assert deleted.json() == {"id": hook["id"], "deleted": True}
    assert client.get("/b/v1/webhooks", headers=b(key)).json() == {"webhooks": [], "total": 0}


def test_bad_requests(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    key, _ = new_key(store)
    http_url = "http://127.0.0.1:9/hook"
    assert_a_error(
        client.post(
            "/a/v1/webhooks", json={"url": http_url, "events": ["file.completed"]}, headers=a(key)
        ),
        400,
        "4000",
    )
    assert_a_error(
        client.post(
            "/a/v1/webhooks", json={"url": receiver.url(), "events": ["nope"]}, headers=a(key)
        ),
        400,
        "4000",
    )
    # form B's events are not form A's
    assert_a_error(
        client.post(
            "/a/v1/webhooks",
            json={"url": receiver.url(), "events": ["bulk.completed"]},
            headers=a(key),
        ),
        400,
        "4000",
    )
    assert_a_error(
        client.post("/a/v1/webhooks", json={"url": receiver.url()}, headers=a(key)), 400, "4000"
    )
    bad_b = [
        {"url": http_url, "events": ["bulk.completed"], "secret": "x"},
        {"url": receiver.url(), "events": ["file.completed"], "secret": "x"},
        {"url": receiver.url(), "events": [], "secret": "x"},
        {"url": receiver.url(), "events": ["bulk.completed"]},
    ]
    for body in bad_b:
        assert_b_error(
            client.post("/b/v1/webhooks", json=body, headers=b(key)), 400, "INVALID_REQUEST"
        )


def test_other_keys_ids(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    owner, _ = new_key(store)
    other, _ = new_key(store)
    hook_a = client.post(
        "/a/v1/webhooks", json={"url": receiver.url(), "events": ["file.failed"]}, headers=a(owner)
    ).json()["data"]
    hook_b = client.post(
        "/b/v1/webhooks",
        json={"url": receiver.url(), "events": ["credits.low"], "secret": "x"},
        headers=b(owner),
    ).json()
    assert client.get("/a/v1/webhooks", headers=a(other)).json()["data"]["total"] == 0
    assert client.get("/b/v1/webhooks", headers=b(other)).json()["total"] == 0
    assert_a_error(client.delete(f"/a/v1/webhooks/{hook_a['id']}", headers=a(other)), 404, "4040")
    assert_b_error(
        client.delete(f"/b/v1/webhooks/{hook_b['id']}", headers=b(other)), 404, "NOT_FOUND"
    )
    assert_a_error(client.delete("/a/v1/webhooks/unknown", headers=a(owner)), 404, "4040")
    assert_b_error(client.delete("/b/v1/webhooks/unknown", headers=b(owner)), 404, "NOT_FOUND")
    # a form's webhooks are not the other form's
    assert_b_error(
        client.delete(f"/b/v1/webhooks/{hook_a['id']}", headers=b(owner)), 404, "NOT_FOUND"
    )
    assert client.get("/a/v1/webhooks", headers=a(owner)).json()["data"]["total"] == 1


def test_private_urls_refused_without_the_flag(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'strict.db'}") as strict_store:
        key, _ = strict_store.create_key("test", 10)
        app = create_app(strict_store, Engine(EngineSettings()))
        with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            for private in (
                "https://127.0.0.1/hook",
                "https://10.1.2.3/hook",
                "https://169.254.169.254/latest",
                "https://[::1]/hook",
                "https://localhost/hook",
            ):
                assert_a_error(
                    client.post(
                        "/a/v1/webhooks",
                        json={"url": private, "events": ["file.completed"]},
                        headers=a(key),
                    ),
                    400,
                    "4000",
                )
                assert_b_error(
                    client.post(
                        "/b/v1/webhooks",
                        json={"url": private, "events": ["bulk.completed"], "secret": "x"},
                        headers=b(key),
                    ),
                    400,
                    "INVALID_REQUEST",
                )


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://[::ffff:169.254.169.254]/", "private"),  # IPv4-mapped
        ("https://[2002:a9fe:a9fe::]/", "private"),  # 6to4
        ("https://[2002:0a00:0001::1]/", "private"),  # 6to4 of 10.0.0.1
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "private"),  # Teredo, client 192.0.2.45
        ("https://[64:ff9b::a9fe:a9fe]/", "private"),  # NAT64, well-known prefix
        ("https://[64:ff9b:1::a9fe:a9fe]/", "private"),  # NAT64, local-use prefix
        ("https://[::a9fe:a9fe]/", "private"),  # IPv4-compatible (deprecated)
        ("https://93.184.215.14:70000/", "port"),
        ("https://93.184.215.14:0/", "port"),
    ],
)
def test_the_guard_unpacks_embedded_ipv4_and_checks_ports(url: str, why: str) -> None:
    with pytest.raises(UnsafeURL, match=why):
        asyncio.run(check_url(url))


def test_the_guard_lets_public_addresses_through() -> None:
    for url in ("https://93.184.215.14/hook", "https://[2606:4700::1111]:8443/hook"):
        assert asyncio.run(check_url(url)) is None  # a literal: connected to as it is


# -- delivery ----------------------------------------------------------------------------------


def test_a_delivery_signed(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    key, key_id = new_key(store)
    url = receiver.url()
    hook = client.post(
        "/a/v1/webhooks", json={"url": url, "events": ["file.completed"]}, headers=a(key)
    ).json()["data"]
    data = {"job_id": "job1", "file_name": "list.csv", "total_emails": 3}
    asyncio.run(notify(store, key_id, "a", "file.failed", data))  # not subscribed
    asyncio.run(notify(store, key_id, "a", "file.completed", data))
    [request] = receiver.wait(url)
    assert request["method"] == "POST"
    headers = request["headers"]
    assert headers["x-webhook-event"] == "file.completed"
    assert headers["user-agent"] == "ListHygiene-Webhook/1.0"
    assert abs(int(headers["x-webhook-timestamp"]) - time.time()) < 60
    assert headers["content-type"] == "application/json"
    assert verify_header(request["body"], hook["secret"], headers["x-webhook-signature"])
    assert not verify_header(request["body"] + b" ", hook["secret"], headers["x-webhook-signature"])
    payload = json.loads(request["body"])
    assert set(payload) == {"event", "timestamp", "data"}
    assert payload["event"] == "file.completed"
    assert payload["data"] == data
    assert payload["timestamp"].endswith("Z")
    time.sleep(0.5)
    assert len(receiver.at(url)) == 1


def test_b_delivery_payload_signature(
    client: httpx.Client, store: Store, receiver: Receiver
) -> None:
    key, key_id = new_key(store)
    url, secret = receiver.url(), "b-secret-" + secrets.token_hex(8)
    client.post(
        "/b/v1/webhooks",
        json={"url": url, "events": ["bulk.completed"], "secret": secret},
        headers=b(key),
    ).raise_for_status()
    data = {
        "job_id": "j",
        "status": "completed",
        "total": 2,
        "valid": 1,
        "invalid": 1,
        "unknown": 0,
    }
    # the URL both registered and given as webhook_url: one delivery
    asyncio.run(notify(store, key_id, "b", "bulk.completed", data, extra_url=url))
    [request] = receiver.wait(url)
    assert request["headers"]["x-webhook-event"] == "bulk.completed"
    assert verify_header(request["body"], secret, request["headers"]["x-webhook-signature"])
    payload = json.loads(request["body"])
    assert set(payload) == {"event", "timestamp", "data", "signature"}
    canonical = json.dumps(
        {k: v for k, v in payload.items() if k != "signature"},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    expected = "sha256=" + hmac.new(secret.encode(), canonical, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(expected, payload["signature"])
    assert form_b_payload_signature(payload, secret) == payload["signature"]
    time.sleep(0.5)
    assert len(receiver.at(url)) == 1


def test_b_webhook_url_unregistered_is_unsigned(store: Store, receiver: Receiver) -> None:
    _, key_id = new_key(store)
    url = receiver.url()
    asyncio.run(notify(store, key_id, "b", "bulk.failed", {"job_id": "j"}, extra_url=url))
    [request] = receiver.wait(url)
    assert "x-webhook-signature" not in request["headers"]
    assert set(json.loads(request["body"])) == {"event", "timestamp", "data"}


def test_retried_after_500(client: httpx.Client, store: Store, receiver: Receiver) -> None:
    key, key_id = new_key(store)
    url = receiver.url()
    receiver.fail_first[httpx.URL(url).path] = 2
    client.post(
        "/b/v1/webhooks",
        json={"url": url, "events": ["credits.low"], "secret": "k"},
        headers=b(key),
    ).raise_for_status()
    [delivery_id] = asyncio.run(notify(store, key_id, "b", "credits.low", {"balance": 5}))
    requests = receiver.wait(url, 3)
    assert len({r["body"] for r in requests}) == 1  # the same body each time
    deadline = time.monotonic() + 5
    while (row := webhook_store.get_delivery(store, delivery_id)).delivered_at is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert row.attempts == 3
    time.sleep(0.5)
    assert len(receiver.at(url)) == 3


def test_gives_up_after_the_schedule(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'give_up.db'}") as own:
        delivery_id = webhook_store.enqueue(
            own, url="https://127.0.0.1:9/closed", event="e", payload="{}", secret=None
        )
        outbox = Outbox(own, schedule=(0.05, 0.05), poll_interval=0.02, allow_private=True)

        async def run() -> None:
            await outbox.start()
            try:
                deadline = time.monotonic() + 10
                while webhook_store.get_delivery(own, delivery_id).attempts < 3:  # type: ignore[union-attr]
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.3)
            finally:
                await outbox.stop()

        asyncio.run(run())
        row = webhook_store.get_delivery(own, delivery_id)
        assert row is not None
        assert row.attempts == 3
        assert row.delivered_at is None
        assert row.next_attempt_at == webhook_store.GAVE_UP
        assert row.last_error


def test_outbox_survives_a_restart(
    tmp_path: Path, receiver: Receiver, certificate: tuple[Path, Path]
) -> None:
    path = tmp_path / "restart.db"
    url = receiver.url()
    with Store(f"sqlite:///{path}") as first:
        key_id = first.create_key("test", 10)[1].id
        webhook_store.create(first, key_id, "a", url, ["file.completed"], "sec")

        async def before() -> None:
            outbox = Outbox(
                first, poll_interval=0.05, verify=str(certificate[0]), allow_private=True
            )
            await outbox.start()
            await outbox.stop()  # the server goes down before the delivery is made
            await notify(first, key_id, "a", "file.completed", {"job_id": "x"})

        asyncio.run(before())
    time.sleep(0.3)
    assert receiver.at(url) == []

    with Store(f"sqlite:///{path}") as second:

        async def after() -> None:
            outbox = Outbox(
                second, poll_interval=0.05, verify=str(certificate[0]), allow_private=True
            )
            await outbox.start()
            try:
                await asyncio.to_thread(receiver.wait, url)
                await asyncio.sleep(0.5)
            finally:
                await outbox.stop()

        asyncio.run(after())
    [request] = receiver.at(url)
    assert verify_header(request["body"], "sec", request["headers"]["x-webhook-signature"])


def test_sign() -> None:
    assert sign(b"body", "key") == (
        "sha256=" + hmac.new(b"key", b"body", hashlib.sha256).hexdigest()
    )


async def _attempted_once(
    outbox: Outbox, store: Store, delivery_id: int, seconds: float = 10
) -> webhook_store.OutboxRow:
    """The delivery once the started outbox's own polls have attempted it (whichever of its
    polls claims it; a test's own ``run_once`` beside them would race them for the claim)."""
    await outbox.start()
    try:
        deadline = time.monotonic() + seconds
        while True:
            row = await asyncio.to_thread(webhook_store.get_delivery, store, delivery_id)
            assert row is not None
            if row.attempts:
                return row
            assert time.monotonic() < deadline, "the delivery was not attempted"
            await asyncio.sleep(0.02)
    finally:
        await outbox.stop()


def test_a_delivery_goes_to_the_address_that_was_checked(tmp_path: Path) -> None:
    """DNS rebinding: the name is resolved once, for the check, and the request is sent to that
    address, with the name in ``Host`` and the TLS SNI; a later answer (a private address) is
    never asked for. The resolver and the transport are injected: no public name resolves here."""
    answers = iter([["93.184.216.34"], ["10.0.0.5"]])  # the second answer would be private
    asked: list[str] = []
    sent: list[httpx.Request] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(f"{host}:{port}")
        return next(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    with Store(f"sqlite:///{tmp_path / 'pinned.db'}") as own:
        delivery_id = webhook_store.enqueue(
            own, url="https://hooks.example.com:8443/in?x=1", event="e", payload="{}", secret=None
        )
        outbox = Outbox(own, resolve=resolve, transport=httpx.MockTransport(answer))
        row = asyncio.run(_attempted_once(outbox, own, delivery_id))
        assert row.delivered_at is not None
    assert asked == ["hooks.example.com:8443"]  # resolved once
    (request,) = sent
    assert request.url.host == "93.184.216.34"
    assert (request.url.port, request.url.path, request.url.query) == (8443, "/in", b"x=1")
    assert request.headers["host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"


def test_a_name_resolving_to_a_private_address_is_refused_before_sending(tmp_path: Path) -> None:
    sent: list[httpx.Request] = []

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "192.168.1.10"]  # one private answer is enough to refuse

    with Store(f"sqlite:///{tmp_path / 'refused.db'}") as own:
        delivery_id = webhook_store.enqueue(
            own, url="https://hooks.example.com/in", event="e", payload="{}", secret=None
        )
        outbox = Outbox(
            own, resolve=resolve, transport=httpx.MockTransport(lambda r: sent.append(r))
        )
        row = asyncio.run(_attempted_once(outbox, own, delivery_id))
    assert sent == []
    assert row.last_error is not None
    assert "private" in row.last_error

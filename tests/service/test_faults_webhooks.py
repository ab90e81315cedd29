"""The webhook outbox across a crash: a delivery that is still pending when ``listhygiene serve``
is SIGKILLed (its first attempt refused, its retry not yet due) is delivered by the server started
after it, once (docs/service.md, Faults)."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from listhygiene.service.store.models import WebhookOutbox
from tests.service.live import SLOW_ADDRESSES as ADDRESSES
from tests.service.live import SLOW_WORLD, Server, b

SANDBOX_WORLD = SLOW_WORLD
WEBHOOK_ARGS = (
    *("--stale-after", "1", "--concurrency", "2"),
    *("--allow-http-webhooks", "--allow-private-webhooks"),
)


class Receiver:
    """An HTTP endpoint on loopback that records every POST and answers 503 to the first
    ``refuse`` of them, 200 after."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.seen: list[tuple[str, dict[str, Any], int]] = []
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    answer = 503 if len(receiver.seen) < receiver.refuse else 200
                    event = self.headers.get("X-Webhook-Event", "")
                    receiver.seen.append((event, json.loads(body), answer))
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver(refuse=1)
    yield running
    running.close()


def _outbox(db: str) -> list[tuple[int, Any]]:
    """``(attempts, delivered_at)`` of every queued delivery."""
    with Store(db, migrate=False) as store, store.transaction() as conn:
        rows = conn.execute(select(WebhookOutbox.attempts, WebhookOutbox.delivered_at))
        return [(int(attempts), delivered) for attempts, delivered in rows]


def _wait(condition: Callable[[], Any], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.timeout(150)
def test_a_pending_delivery_is_delivered_once_after_a_crash(
    empty_db_url: str, sandbox: Sandbox, receiver: Receiver, tmp_path: Path
) -> None:
    db = empty_db_url
    with Store(db) as store:
        key, _ = store.create_key("hooks", 100)
    first = Server(db, sandbox, args=WEBHOOK_ARGS, log=tmp_path / "first.log")
    try:
        response = httpx.post(
            f"{first.root}/b/v1/verify/bulk",
            headers=b(key),
            json={"emails": ADDRESSES[:2], "webhook_url": receiver.url},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        job_id = response.json()["job_id"]
        # The first attempt is refused; its retry is due 30 s later (delivery.py's schedule).
        _wait(lambda: _outbox(db) == [(1, None)], "the first attempt was not made")
    finally:
        first.kill()
    assert [(event, answer) for event, _, answer in receiver.seen] == [("bulk.completed", 503)]

    second = Server(db, sandbox, args=WEBHOOK_ARGS, log=tmp_path / "second.log")
    try:
        _wait(lambda: [d for _, d in _outbox(db) if d is not None], "never delivered")
    finally:
        second.stop()  # a clean stop: nothing else is sent after it
    seen = receiver.seen
    assert [(event, answer) for event, _, answer in seen] == [
        ("bulk.completed", 503),
        ("bulk.completed", 200),  # by the second server: the first was dead
    ]
    assert seen[1][1] == seen[0][1]  # the very body queued when the job closed
    assert seen[1][1]["data"]["job_id"] == job_id
    assert seen[1][1]["data"]["valid"] == 2
    assert [attempts for attempts, _ in _outbox(db)] == [2]

"""What one request may cost, against ``listhygiene serve`` as users run it (docs/security.md):
header size and count, JSON body sizes per endpoint, keys with whitespace, and an access log
that never holds a query string. Raw sockets where a client library would refuse to send."""

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.guards import MAX_HEAD_BYTES, MAX_HEADER_COUNT
from listhygiene.service.store import Store
from tests.service.live import Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    folder = tmp_path_factory.mktemp("limits")
    db = f"sqlite:///{folder / 'service.db'}"
    with Store(db) as store:
        key, _ = store.create_key("limits", 1000)
    server = Server(db, sandbox, log=folder / "server.log")
    try:
        yield server, key
    finally:
        server.stop()


def raw(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send ``head`` (and ``body``) on a fresh connection; what came back before it closed."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        # the server may close while we are still sending: a refusal too
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head + body)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return received


def status_of(answer: bytes) -> int | None:
    if not answer.startswith(b"HTTP/1.1 "):
        return None  # closed without an answer
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> dict:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


def get(path: str, headers: list[str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "Connection: close", "", ""]
    return "\r\n".join(lines).encode()


def test_a_megabyte_header_line_is_refused(served: tuple) -> None:
    server, key = served
    answer = raw(
        server.port,
        get("/a/v1/credits", [f"LISTHYGIENE-API-KEY: {key}", "X-Big: " + "a" * 1_000_000]),
    )
    assert status_of(answer) in (431, None), answer[:200]  # 431, or a closed connection
    if answer:
        assert body_of(answer)["code"] == "4000"


def test_twenty_thousand_headers_are_refused(served: tuple) -> None:
    server, key = served
    many = [f"X-H{i}: v" for i in range(20_000)]
    answer = raw(server.port, get("/b/v1/credits", [f"Authorization: Bearer {key}", *many]))
    assert status_of(answer) in (431, None), answer[:200]
    if answer:
        assert body_of(answer)["error"]["code"] == "INVALID_REQUEST"


def test_too_many_small_headers_are_431_in_the_forms_body(served: tuple) -> None:
    server, key = served
    extra = [f"X-H{i}: v" for i in range(MAX_HEADER_COUNT + 1)]
    assert sum(len(h) + 2 for h in extra) < MAX_HEAD_BYTES  # under the byte bound: the count
    a = raw(server.port, get("/a/v1/credits", [f"LISTHYGIENE-API-KEY: {key}", *extra]))
    assert status_of(a) == 431
    assert body_of(a)["code"] == "4000"
    b = raw(server.port, get("/b/v1/credits", [f"Authorization: Bearer {key}", *extra]))
    assert status_of(b) == 431
    assert body_of(b)["error"]["code"] == "INVALID_REQUEST"
    # and an ordinary request on the same server is served
    fine = raw(server.port, get("/a/v1/credits", [f"LISTHYGIENE-API-KEY: {key}"]))
    assert status_of(fine) == 200


def post(path: str, headers: list[str], body: bytes, *, chunked: bool = False) -> bytes:
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [*headers, length, "Connection: close", "", ""]
    if chunked:
        body = (
            b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + 65536]), body[i : i + 65536])
                for i in range(0, len(body), 65536)
            )
            + b"0\r\n\r\n"
        )
    return "\r\n".join(lines).encode() + body


def test_json_bodies_are_bounded_per_endpoint(served: tuple) -> None:
    server, key = served
    padded = json.dumps({"email": "alice@example.com", "pad": "x" * 20_000}).encode()
    a = raw(server.port, post("/a/v1/verify/single", [f"LISTHYGIENE-API-KEY: {key}"], padded))
    assert status_of(a) == 413
    assert body_of(a)["code"] == "4130"
    b = raw(
        server.port,
        post("/b/v1/verify", [f"Authorization: Bearer {key}"], padded, chunked=True),
    )
    assert status_of(b) == 413  # no Content-Length to go by: counted as it streams
    assert body_of(b)["error"]["code"] == "INVALID_REQUEST"
    # the spec's own limit still fits: form B's 10,000 addresses of 254 characters
    big = {"emails": [f"{i:06d}{'x' * 230}@example-{i % 7}.com" for i in range(10_000)]}
    with httpx.Client(base_url=server.root, timeout=60) as client:
        response = client.post(
            "/b/v1/verify/bulk",
            json={**big, "smtp_check": False, "emails": big["emails"]},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert response.status_code != 413, response.text


def test_whitespace_around_a_key_is_one_rule_for_both_forms(served: tuple) -> None:
    server, key = served
    for header in (f"LISTHYGIENE-API-KEY: {key}  ", f"LISTHYGIENE-API-KEY:\t{key}\t"):
        assert status_of(raw(server.port, get("/a/v1/credits", [header]))) == 200, header
    for header in (f"Authorization: Bearer {key}  ", f"Authorization: Bearer\t{key} "):
        assert status_of(raw(server.port, get("/b/v1/credits", [header]))) == 200, header


def test_the_access_log_has_no_query_strings(served: tuple, tmp_path: Path) -> None:
    server, key = served
    secret = "lh_secret_in_the_query_string"
    with httpx.Client(base_url=server.root, timeout=10) as client:
        client.get("/a/v1/credits", params={"api_key": secret})
        client.get(
            "/b/v1/credits", params={"key": secret}, headers={"Authorization": f"Bearer {key}"}
        )
    log = server.stderr()
    assert '"GET /a/v1/credits HTTP/1.1" 401' in log  # the request is logged, its path only
    assert secret not in log

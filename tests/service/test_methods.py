"""A method a resource does not take: ``405`` in the form's own error body, with ``Allow`` naming
the methods it does take (RFC 9110, section 15.5.6: "The origin server MUST generate an Allow
header field in a 405 response"). Real HTTP to a live server, SQLite and PostgreSQL stores."""

import httpx
import pytest

from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from tests.service.live import LiveServer, engine_for


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/a/v1/verify/single", {"POST"}),
        ("DELETE", "/a/v1/verify/bulk", {"POST"}),
        ("POST", "/a/v1/credits", {"GET"}),
        ("PUT", "/b/v1/verify", {"POST"}),
        ("POST", "/b/v1/credits", {"GET"}),
        ("PATCH", "/b/v1/webhooks", {"GET", "POST"}),
        ("GET", "/b/v1/webhooks/wh_1", {"DELETE"}),
    ],
)
def test_a_405_says_which_methods_the_resource_takes(
    sandbox: Sandbox, store: Store, method: str, path: str, allowed: set[str]
) -> None:
    app = create_app(store, engine_for(sandbox), run_jobs=False)
    with LiveServer(app) as root, httpx.Client(base_url=root, timeout=30) as client:
        response = client.request(method, path)
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} == allowed
    body = response.json()
    assert "detail" not in body or body["detail"] != "Method Not Allowed"  # the form's own body

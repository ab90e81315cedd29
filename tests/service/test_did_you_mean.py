"""Form B's ``/verify`` over real HTTP carries ``did_you_mean`` when the domain looks like a
typo, and omits the key otherwise (issue 19, item 1; docs/results.md, "Extra columns"); the
status stays the address's own."""

import httpx

from listhygiene.service.store import Store
from tests.service.live import b

STORE_BACKENDS = ("sqlite",)
SANDBOX_WORLD = {
    "domains": {
        # a typo of a big provider that exists and takes mail: advice only
        "outlok.com": {"mx": [{"preference": 10, "host": "mx.outlok.com"}], "mailboxes": ["ann"]},
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["ann"]},
    },
    "hosts": {"mx.outlok.com": {}, "mx.acme.test": {}},
}


def test_did_you_mean_only_with_a_suggestion(base_url: str, store: Store) -> None:
    key, _ = store.create_key("typos", 10)
    with httpx.Client(base_url=base_url, timeout=30) as client:
        typo = client.post("/b/v1/verify", json={"email": "ann@outlok.com"}, headers=b(key))
        plain = client.post("/b/v1/verify", json={"email": "ann@acme.test"}, headers=b(key))
    assert typo.status_code == 200, typo.text
    body = typo.json()
    assert body["did_you_mean"] == "ann@outlook.com"
    assert (body["email"], body["status"], body["reason"]) == ("ann@outlok.com", "valid", None)
    assert plain.status_code == 200, plain.text
    assert list(plain.json()) == ["email", "status", "result", "score", "reason", "credits_used"]

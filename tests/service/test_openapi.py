"""Form A's OpenAPI document: valid OpenAPI 3.0, served at ``/a/v1/openapi.json``, and true.

"True" is checked with schemathesis against the real service (uvicorn on loopback, a SQLite store,
the engine on the sandbox) for the operations that exist: every response must be documented
(status, content type, headers, body schema) and none may be a server error.
"""

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from listhygiene.results import FORM_A_BATCH_FIELDS, FORM_A_FIELDS
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.openapi_a import document, document_bytes
from listhygiene.service.store import Store
from listhygiene.statuses import Status
from tests.service.live import LiveServer, engine_for

KEY_HEADER = "LISTHYGIENE-API-KEY"
ALL_OPERATIONS = {
    ("POST", "/verify/single"),
    ("POST", "/verify/bulk"),
    ("POST", "/verify/file"),
    ("GET", "/verify/file/{job_id}"),
    ("GET", "/verify/file/{job_id}/results"),
    ("GET", "/credits"),
    ("POST", "/webhooks"),
    ("GET", "/webhooks"),
    ("DELETE", "/webhooks/{webhook_id}"),
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Sandbox addresses giving every status and most reasons (sample_data/world.json).
WORLD = [
    "alice.johnson@acme-corp.test",  # valid
    "nobody.here@acme-corp.test",  # invalid, mailbox_not_found
    "evan.price@adventure-works.test",  # invalid, mailbox_disabled
    "max.mustermann@defunct-startup.test",  # invalid, no_mail_server (NXDOMAIN)
    "jordan.blake@parked-brand.test",  # invalid, no_mail_server (null MX)
    "nina.patel@fabrikam.test",  # catchall
    "dana.cole@litware.test",  # risky, mailbox_full
    "info@contoso.test",  # role
    "quicktest.4821@mailinator.com",  # disposable
    "claire.dupont@humongous-insurance.test",  # unknown, dns_error (SERVFAIL)
    "sven.berg@alpine-ski-house.test",  # unknown, DNS timeout
    "liam.oconnor@margie-travel.test",  # unknown, SMTP timeout (tarpit)
    "anna.schmidt@bücher.test",  # IDN domain
    "josé@lucerne-publishing.test",  # UTF-8 local part
    "bad@@x",  # invalid, invalid_syntax
]
HIGH_LIMITS = {
    "a_single_per_minute": 1_000_000,
    "a_bulk_per_minute": 1_000_000,
    "a_file_per_minute": 1_000_000,
    "a_other_per_minute": 1_000_000,
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("openapi") / "store.db"
    with Store(f"sqlite:///{path}") as opened:
        yield opened


@pytest.fixture(scope="module")
def base_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    engine = engine_for(sandbox, smtp_timeout=1, retry_delays=(0.1,))
    with LiveServer(create_app(store, engine)) as url:
        yield url


@pytest.fixture(scope="module")
def api_key(store: Store) -> str:
    key, _ = store.create_key("openapi", 10_000_000, limits=HIGH_LIMITS)
    return key


# -- the document ------------------------------------------------------------------------------


def test_document_is_valid_openapi_30() -> None:
    doc = document()
    assert doc["openapi"] == "3.0.3"
    assert doc["servers"] == [{"url": "/a/v1"}]
    schemathesis.openapi.from_dict(copy.deepcopy(doc)).validate()  # raises when invalid
    broken = copy.deepcopy(doc)
    broken["paths"]["/credits"]["get"]["responses"] = "nothing"
    with pytest.raises(ValueError):  # noqa: PT011 - the validator's own error type
        schemathesis.openapi.from_dict(broken).validate()


def test_document_covers_form_a() -> None:
    doc = document()
    found = {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert found == ALL_OPERATIONS
    assert doc["components"]["securitySchemes"] == {
        "ApiKey": {"type": "apiKey", "in": "header", "name": KEY_HEADER}
    }
    assert doc["security"] == [{"ApiKey": []}]
    schemas = doc["components"]["schemas"]
    assert list(schemas["VerificationResult"]["properties"]) == list(FORM_A_FIELDS)
    assert list(schemas["BatchResultItem"]["properties"]) == list(FORM_A_BATCH_FIELDS)
    assert schemas["VerificationResult"]["properties"]["reason"]["nullable"] is True
    bulk = schemas["VerifyBulkRequest"]["properties"]["emails"]
    assert (bulk["minItems"], bulk["maxItems"]) == (1, 50)
    assert "secret" not in schemas["Webhook"]["properties"]
    assert "secret" in schemas["WebhookCreated"]["required"]
    results = doc["paths"]["/verify/file/{job_id}/results"]["get"]
    assert list(results["responses"]["200"]["content"]) == ["text/csv"]
    upload = doc["paths"]["/verify/file"]["post"]["requestBody"]["content"]
    assert list(upload) == ["multipart/form-data"]
    # every error response is the envelope with the code PRODUCT.md assigns to its status
    responses = doc["components"]["responses"]
    codes = {"400": "4000", "401": "4010", "402": "4020", "403": "4030", "404": "4040"}
    codes |= {"413": "4130", "429": "4290", "500": "1000"}
    for path, item in doc["paths"].items():
        for operation in item.values():
            for status, response in operation["responses"].items():
                if status == "200":
                    continue
                name = response["$ref"].rsplit("/", 1)[1]
                example = responses[name]["content"]["application/json"]["example"]
                assert example["code"] == example["error"]["code"] == codes[status], path
    assert responses["RateLimited"]["headers"]["Retry-After"]["required"] is True


def test_document_served(base_url: str) -> None:
    response = httpx.get(f"{base_url}/a/v1/openapi.json")  # no key needed
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == document_bytes()
    assert response.json() == json.loads(
        (Path(__file__).parents[2] / "src/listhygiene/service/openapi/form-a.json").read_text()
    )


# -- the document against the server -----------------------------------------------------------

# The packaged document, which test_document_served shows is what the server serves.
schema = schemathesis.openapi.from_file(document_bytes().decode())


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_server_conforms(case: Any, base_url: str, api_key: str) -> None:
    case.call_and_validate(
        base_url=f"{base_url}/a/v1",
        headers={KEY_HEADER: api_key},
        timeout=30,
        checks=CHECKS,
    )


@pytest.mark.parametrize("check_smtp", [True, False])
def test_world_results_conform(base_url: str, api_key: str, check_smtp: bool) -> None:
    """Real verdicts of every kind (not only the invalid-syntax results that fuzzing yields)."""
    statuses = set()
    single = schema["/verify/single"]["POST"]
    for email in WORLD:
        case = single.Case(body={"email": email, "check_smtp": check_smtp})
        response = case.call_and_validate(
            base_url=f"{base_url}/a/v1", headers={KEY_HEADER: api_key}, timeout=30, checks=CHECKS
        )
        statuses.add(response.json()["data"]["status"])
    if check_smtp:
        assert statuses == {status.value for status in Status}
    bulk = schema["/verify/bulk"]["POST"].Case(body={"emails": WORLD, "check_smtp": check_smtp})
    response = bulk.call_and_validate(
        base_url=f"{base_url}/a/v1", headers={KEY_HEADER: api_key}, timeout=30, checks=CHECKS
    )
    assert response.json()["data"]["total_emails"] == len(WORLD)

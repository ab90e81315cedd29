"""Both forms' OpenAPI documents: valid OpenAPI 3.0, served at ``/a/v1/openapi.json`` and
``/b/v1/openapi.json``, and true.

"True" is checked with schemathesis against the real service (uvicorn on loopback, a SQLite store,
the engine on the sandbox) for every operation of each form, with all of schemathesis' checks:
every response documented (status, content type, headers, body schema), no server error, every
schema-valid request accepted (but for the key, an unknown id, a rate limit, and the refusals no
schema can state, documented per operation), every schema-invalid one rejected, 405 with
``Allow`` for an undocumented method, authentication enforced. The fuzzing is bounded
(``max_examples`` per operation) so that the file runs in well under a minute, and seeded.
"""

import copy
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import positive_data_acceptance

from listhygiene.results import FORM_A_BATCH_FIELDS, FORM_A_FIELDS
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.openapi_docs import Form, document, document_bytes
from listhygiene.service.store import Store
from listhygiene.statuses import Status
from tests.service.live import LiveServer, b, engine_for

#: One server per module, on the store of tests/service/conftest.py, on SQLite.
STORE_BACKENDS = ("sqlite",)

KEY_HEADER = "LISTHYGIENE-API-KEY"
ALL_OPERATIONS_A = {
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
ALL_OPERATIONS_B = {
    ("POST", "/verify"),
    ("GET", "/credits"),
    ("POST", "/verify/bulk"),
    ("GET", "/verify/bulk/{job_id}"),
    ("GET", "/verify/bulk/{job_id}/results"),
    ("POST", "/webhooks"),
    ("GET", "/webhooks"),
    ("DELETE", "/webhooks/{webhook_id}"),
}


def not_a_server_error_but_a_timeout(ctx: Any, response: Any, case: Any) -> bool | None:
    """``not_a_server_error``, except form B's 504 ``TIMEOUT``: a ``/verify`` over its own
    ``timeout`` (1 ms is a valid one), documented (PRODUCT.md), not a fault."""
    if response.status_code == 504 and response.json()["error"]["code"] == "TIMEOUT":
        return None
    return not_a_server_error(ctx, response, case)


def positive_data_acceptance_but_state(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance``, except the 400s that depend on what no schema can state,
    each documented for its operation (the descriptions in the documents say so): a webhook URL
    whose host does not resolve, or resolves to a private address; a job's results asked for
    before the job has completed; an uploaded file whose bytes are no table with an email column.
    """
    if response.status_code == 400 and _refused_for_what_no_schema_states(case, response):
        return None
    return positive_data_acceptance(ctx, response, case)


#: Form A's upload refusals that the schema does state (part name, extension, empty file): a
#: schema-valid upload must never get one of these.
STATED_UPLOAD_REFUSALS = ("Unsupported file type", "No file", "email_column must be", " is empty")


def _refused_for_what_no_schema_states(case: Any, response: Any) -> bool:
    details = json.dumps(response.json().get("error", {}))
    if case.method == "POST" and case.path in {"/webhooks", "/verify/bulk"}:
        return "webhook URL refused: the URL" in details and "resolve" in details
    if case.method == "GET" and case.path.endswith("/results"):
        return "not completed" in details
    if case.method == "POST" and case.path == "/verify/file":
        return not any(refusal in details for refusal in STATED_UPLOAD_REFUSALS)
    return False


#: Every check schemathesis has (``checks=None``: all the built-ins the config enables, which is
#: all of them), with two refined: ``not_a_server_error`` (form B's documented 504) and
#: ``positive_data_acceptance`` (the two state-dependent 400s).
EXCLUDED = [not_a_server_error, positive_data_acceptance]
ADDITIONAL = [not_a_server_error_but_a_timeout, positive_data_acceptance_but_state]
#: A schema-valid request may be refused only for a documented reason that is no property of the
#: request: the key (401, 402 credits in form A, 403 disabled key or form B's credits), an unknown
#: id (404), a rate limit (429); 5xx are the business of ``not_a_server_error``.
ACCEPTED = ["2xx", "401", "402", "403", "404", "429", "5xx"]
#: Deterministic in CI: one seed for schemathesis' generation and for the hypothesis tests here;
#: ``LISTHYGIENE_OPENAPI_SEED=<n>`` explores other cases.
SEED = int(os.environ.get("LISTHYGIENE_OPENAPI_SEED", "27"))
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {"mode": "all"},
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
    }
)
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
    "b_per_hour": 1_000_000,
    "b_per_day": 10_000_000,
}
#: The one webhook host with a (public) address: every other name does not resolve.
HOOK_HOST = "hooks.example.com"


async def resolve(host: str, port: int) -> list[str]:
    """Webhook URLs resolve here, not through the system's DNS: no test waits on it."""
    if host == HOOK_HOST:
        return ["93.184.215.14"]
    raise OSError(f"{host} does not resolve")


@pytest.fixture(scope="module")
def base_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    engine = engine_for(sandbox, smtp_timeout=1, retry_delays=(0.1,))
    with LiveServer(create_app(store, engine, webhook_resolver=resolve)) as url:
        yield url


@pytest.fixture(scope="module")
def api_key(store: Store) -> str:
    key, _ = store.create_key("openapi", 10_000_000, limits=HIGH_LIMITS)
    return key


@pytest.fixture(scope="module")
def b_key(store: Store) -> str:
    """Form B's key: its own, so that fuzzing one form does not touch the other's windows."""
    key, _ = store.create_key("openapi-b", 10_000_000, "enterprise", limits=HIGH_LIMITS)
    return key


# -- the document ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["a", "b"])
def test_document_is_valid_openapi_30(form: Form) -> None:
    doc = document(form)
    assert doc["openapi"] == "3.0.3"
    assert doc["servers"] == [{"url": f"/{form}/v1"}]
    schemathesis.openapi.from_dict(copy.deepcopy(doc)).validate()  # raises when invalid
    broken = copy.deepcopy(doc)
    broken["paths"]["/credits"]["get"]["responses"] = "nothing"
    with pytest.raises(ValueError):  # noqa: PT011 - the validator's own error type
        schemathesis.openapi.from_dict(broken).validate()


def test_document_covers_form_a() -> None:
    doc = document("a")
    found = {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert found == ALL_OPERATIONS_A
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
    codes |= {"413": "4130", "429": "4290", "500": "1000", "503": "1000"}
    for path, item in doc["paths"].items():
        for operation in item.values():
            # the database away: 503 with Retry-After (docs/service.md, Faults)
            assert "503" in operation["responses"], path
            for status, response in operation["responses"].items():
                if status == "200":
                    continue
                name = response["$ref"].rsplit("/", 1)[1]
                example = responses[name]["content"]["application/json"]["example"]
                assert example["code"] == example["error"]["code"] == codes[status], path
    assert responses["RateLimited"]["headers"]["Retry-After"]["required"] is True
    assert responses["ServiceUnavailable"]["headers"]["Retry-After"]["required"] is True


def test_document_covers_form_b() -> None:
    doc = document("b")
    found = {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert found == ALL_OPERATIONS_B
    assert doc["components"]["securitySchemes"] == {
        "BearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "The API key (`lh_...`) as a bearer token.",
        }
    }
    assert doc["security"] == [{"BearerAuth": []}]
    schemas = doc["components"]["schemas"]
    single = schemas["VerifyRequest"]["properties"]
    assert (single["timeout"]["minimum"], single["timeout"]["maximum"]) == (1, 30_000)
    assert single["timeout"]["default"] == 5_000
    bulk = schemas["BulkRequest"]["properties"]
    assert (bulk["emails"]["minItems"], bulk["emails"]["maxItems"]) == (1, 10_000)
    assert bulk["webhook_url"]["maxLength"] == 2048
    assert "secret" not in schemas["Webhook"]["properties"]
    parameters = doc["paths"]["/verify/bulk/{job_id}/results"]["get"]["parameters"]
    limit = next(p["schema"] for p in parameters if p["name"] == "limit")
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 1000, 100)
    # every error response's example has a code its status may carry (PRODUCT.md)
    codes = {
        "400": {"INVALID_REQUEST", "INVALID_EMAIL"},
        "401": {"INVALID_API_KEY"},
        "403": {"INSUFFICIENT_CREDITS"},
        "404": {"JOB_NOT_FOUND", "NOT_FOUND"},
        "413": {"INVALID_REQUEST"},
        "429": {"RATE_LIMIT_EXCEEDED"},
        "431": {"INVALID_REQUEST"},
        "500": {"INTERNAL_ERROR"},
        "503": {"SERVICE_UNAVAILABLE"},
        "504": {"TIMEOUT"},
    }
    responses = doc["components"]["responses"]
    rate_headers = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
    for path, item in doc["paths"].items():
        for operation in item.values():
            statuses = set(operation["responses"])
            assert {"200", "400", "401", "429", "431", "500", "503"} <= statuses, path
            for status, response in operation["responses"].items():
                if status == "200":  # a known key: its window's headers
                    assert set(response["headers"]) == rate_headers, path
                    continue
                name = response["$ref"].rsplit("/", 1)[1]
                example = responses[name]["content"]["application/json"]["example"]
                assert example["error"]["code"] in codes[status], (path, status)
    for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"):
        assert doc["components"]["headers"][name]["required"] is True
    assert "Retry-After" in responses["RateLimited"]["headers"]
    assert "headers" not in responses["Unauthorized"]  # no key, no window
    limited = schemas["ErrorRateLimited"]["allOf"][1]["properties"]["error"]
    assert limited["required"] == ["retry_after"]


@pytest.mark.parametrize("form", ["a", "b"])
def test_document_served(base_url: str, form: Form) -> None:
    response = httpx.get(f"{base_url}/{form}/v1/openapi.json")  # no key needed
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == document_bytes(form)
    assert response.json() == json.loads(
        (
            Path(__file__).parents[2] / f"src/listhygiene/service/openapi/form-{form}.json"
        ).read_text()
    )


# -- the document against the server -----------------------------------------------------------

# The packaged documents, which test_document_served shows are what the server serves.
schema_a = schemathesis.openapi.from_file(document_bytes("a").decode(), config=CONFIG)
schema_b = schemathesis.openapi.from_file(document_bytes("b").decode(), config=CONFIG)
#: Bounded: cases per operation (and per generation mode), so the whole file stays well under a
#: minute on two busy cores.
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def conforms(case: Any, url: str, headers: dict[str, str]) -> Any:
    return case.call_and_validate(
        base_url=url,
        headers=headers,
        timeout=30,
        excluded_checks=EXCLUDED,
        additional_checks=ADDITIONAL,
    )


@schema_a.parametrize()
@FUZZ
def test_form_a_server_conforms(case: Any, base_url: str, api_key: str) -> None:
    conforms(case, f"{base_url}/a/v1", {KEY_HEADER: api_key})


@schema_b.parametrize()
@FUZZ
def test_form_b_server_conforms(case: Any, base_url: str, b_key: str) -> None:
    conforms(case, f"{base_url}/b/v1", b(b_key))


@pytest.fixture(scope="module")
def completed_job(base_url: str, b_key: str) -> str:
    """A completed form B job over the world's addresses, for the fuzzing of its pages."""
    url, headers = f"{base_url}/b/v1", b(b_key)
    submitted = httpx.post(f"{url}/verify/bulk", json={"emails": WORLD * 3}, headers=headers)
    job_id: str = submitted.json()["job_id"]
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/verify/bulk/{job_id}", headers=headers).json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return job_id


@given(data=st.data())
@FUZZ
@seed(SEED)
def test_form_b_pages_of_a_completed_job_conform(
    data: st.DataObject, base_url: str, b_key: str, completed_job: str
) -> None:
    """The fuzzing above only meets unknown job ids: here ``limit``, ``offset`` and ``status``,
    valid and not (an ``offset`` of 2^63 or 1e30 was a 500), over a real job's results."""
    operation = schema_b["/verify/bulk/{job_id}/results"]["GET"]
    mode = data.draw(st.sampled_from([GenerationMode.POSITIVE, GenerationMode.NEGATIVE]))
    job = {"job_id": completed_job}
    headers = b(b_key)
    case = data.draw(operation.as_strategy(mode, path_parameters=job, headers=headers))
    case.path_parameters = job  # negative cases may have mangled it
    # ... and when the job id was the only invalid part, the case is now a valid one
    meta = case.meta
    assert meta is not None
    repaired = mode is GenerationMode.NEGATIVE and not any(
        component.mode.is_negative
        for location, component in meta.components.items()
        if location is not ParameterLocation.PATH
    )
    if repaired:  # its own check: negative_data_rejection would call it invalid
        response = case.call(base_url=f"{base_url}/b/v1", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return
    response = conforms(case, f"{base_url}/b/v1", headers)
    if mode is GenerationMode.POSITIVE:
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("check_smtp", [True, False])
def test_form_a_world_results_conform(base_url: str, api_key: str, check_smtp: bool) -> None:
    """Real verdicts of every kind (not only the invalid-syntax results that fuzzing yields)."""
    statuses = set()
    single = schema_a["/verify/single"]["POST"]
    for email in WORLD:
        case = single.Case(body={"email": email, "check_smtp": check_smtp})
        response = conforms(case, f"{base_url}/a/v1", {KEY_HEADER: api_key})
        statuses.add(response.json()["data"]["status"])
    if check_smtp:
        assert statuses == {status.value for status in Status}
    bulk = schema_a["/verify/bulk"]["POST"].Case(body={"emails": WORLD, "check_smtp": check_smtp})
    response = conforms(bulk, f"{base_url}/a/v1", {KEY_HEADER: api_key})
    assert response.json()["data"]["total_emails"] == len(WORLD)


@pytest.mark.parametrize("smtp_check", [True, False])
def test_form_b_world_results_conform(base_url: str, b_key: str, smtp_check: bool) -> None:
    """Form B's real verdicts, a completed job's pages and the webhooks' 200s (fuzzing mostly
    meets unknown jobs and refused URLs)."""
    url, headers = f"{base_url}/b/v1", b(b_key)
    statuses = set()
    for email in WORLD[:-1]:  # the last is INVALID_EMAIL, below
        case = schema_b["/verify"]["POST"].Case(body={"email": email, "smtp_check": smtp_check})
        statuses.add(conforms(case, url, headers).json()["status"])
    if smtp_check:
        assert statuses == {"valid", "invalid", "unknown", "accept_all"}
    invalid = schema_b["/verify"]["POST"].Case(body={"email": WORLD[-1]})
    assert conforms(invalid, url, headers).json()["error"]["code"] == "INVALID_EMAIL"
    # a mail host answering 50 ms late, an address no earlier request verified
    slow = {"email": f"late.{smtp_check}@lamna-healthcare.test", "timeout": 1}
    late = schema_b["/verify"]["POST"].Case(body=slow)
    assert conforms(late, url, headers).status_code == 504

    hook = {"url": f"https://{HOOK_HOST}/b", "events": ["bulk.completed"], "secret": "s3cret"}
    created = conforms(schema_b["/webhooks"]["POST"].Case(body=hook), url, headers).json()
    assert conforms(schema_b["/webhooks"]["GET"].Case(), url, headers).json()["total"] >= 1
    delete = schema_b["/webhooks/{webhook_id}"]["DELETE"]
    assert conforms(delete.Case(path_parameters={"webhook_id": created["id"]}), url, headers)
    gone = conforms(delete.Case(path_parameters={"webhook_id": created["id"]}), url, headers)
    assert gone.status_code == 404

    submit = schema_b["/verify/bulk"]["POST"].Case(body={"emails": WORLD, "smtp_check": smtp_check})
    job_id = conforms(submit, url, headers).json()["job_id"]
    job = schema_b["/verify/bulk/{job_id}"]["GET"].Case(path_parameters={"job_id": job_id})
    results = schema_b["/verify/bulk/{job_id}/results"]["GET"]
    early = results.Case(path_parameters={"job_id": job_id})
    deadline = time.monotonic() + 30
    while (shown := conforms(job, url, headers).json())["status"] != "completed":
        assert time.monotonic() < deadline, shown
        conforms(early, url, headers)  # 400 INVALID_REQUEST while not completed (or a page)
        time.sleep(0.2)
    assert shown["processed"] == shown["total"] == len(WORLD)
    for query in [
        {},
        {"limit": 3, "offset": 2},
        {"offset": 2**63},
        *({"status": s} for s in ("valid", "invalid", "unknown", "accept_all")),
    ]:
        page = conforms(results.Case(path_parameters={"job_id": job_id}, query=query), url, headers)
        assert page.status_code == 200, page.text
    assert conforms(schema_b["/credits"]["GET"].Case(), url, headers).status_code == 200


def test_form_b_refusals_conform(base_url: str, store: Store, b_key: str) -> None:
    """The refusals fuzzing does not reach: 401, 403, 413, 429 and 431, as documented."""
    url = f"{base_url}/b/v1"
    verify, credits = schema_b["/verify"]["POST"], schema_b["/credits"]["GET"]
    assert conforms(credits.Case(), url, {"Authorization": "Bearer nope"}).status_code == 401
    broke, _ = store.create_key("openapi-broke", 0)
    refused = conforms(verify.Case(body={"email": WORLD[0]}), url, b(broke))
    assert refused.json()["error"]["code"] == "INSUFFICIENT_CREDITS"
    big = verify.Case(body={"email": "x" * 9_000})
    assert conforms(big, url, b(b_key)).status_code == 413
    many = {f"x-filler-{n}": "1" for n in range(120)}
    assert conforms(credits.Case(), url, {**b(b_key), **many}).status_code == 431
    once, _ = store.create_key("openapi-once", 10, limits={"b_per_hour": 1})
    assert conforms(credits.Case(), url, b(once)).status_code == 200
    limited = conforms(credits.Case(), url, b(once))
    assert limited.status_code == 429
    assert limited.json()["error"]["retry_after"] >= 1


#: Numbers at and past the edges of 64 bits, which random cases reach only now and then.
EDGES: list[Any] = [2**63 - 1, 2**63, 2**64, 10**30, "1e30", -(2**63), -1, 0, 1.5, "NaN"]


def test_form_b_numeric_edges_conform(base_url: str, b_key: str, completed_job: str) -> None:
    """Every numeric query or body field of form B: its 400 or the documented empty page, never
    500 (an ``offset`` of 2^63 or 1e30 was an SQLite integer overflow)."""
    url, headers = f"{base_url}/b/v1", b(b_key)
    results = schema_b["/verify/bulk/{job_id}/results"]["GET"]
    verify = schema_b["/verify"]["POST"]
    for edge in EDGES:
        for name in ("limit", "offset"):
            case = results.Case(path_parameters={"job_id": completed_job}, query={name: edge})
            response = conforms(case, url, headers)
            in_range = isinstance(edge, int) and (
                edge >= 0 if name == "offset" else 1 <= edge <= 1000
            )
            assert response.status_code == (200 if in_range else 400), (name, edge)
            if name == "offset" and in_range and edge > len(WORLD) * 3:
                assert response.json()["results"] == []
        case = verify.Case(body={"email": WORLD[0], "smtp_check": False, "timeout": edge})
        assert conforms(case, url, headers).status_code == 400, ("timeout", edge)

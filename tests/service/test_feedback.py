"""Feedback in the service (docs/feedback.md, "In the service"): a real ``listhygiene serve``
process given ``--verdicts`` applies the store's events to what it verifies, in form B's
``/verify`` and bulk jobs and in form A, while the sandbox's catch-all domain accepts every
address. Without ``--verdicts`` nothing changes."""

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from listhygiene.pipeline import add_feedback
from listhygiene.sandbox import Sandbox
from listhygiene.service.store import Store
from tests.service.live import Server, a, b

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_data"))
import make_feedback  # noqa: E402

ENGAGED = make_feedback.CATCHALL_ENGAGED  # nina.patel@fabrikam.test: a click
BOUNCED = make_feedback.CATCHALL_BOUNCED  # j.morrison@fabrikam.test: a hard bounce
SILENT = "someone.else@fabrikam.test"  # the catch-all domain, no events
VERIFIED_SINCE = make_feedback.VALID_BOUNCED  # bounced before this verification: still valid


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("service-feedback")
    verdicts = f"sqlite:///{folder / 'verdicts.sqlite'}"
    exports = make_feedback.write(folder / "events", base=datetime.now(UTC))
    result = add_feedback(list(exports.values()), verdicts=verdicts)
    assert result.added == 24
    db = f"sqlite:///{folder / 'service.db'}"
    with Store(db) as store:
        key, _ = store.create_key("feedback", 1000)
    with (
        Server(db, sandbox, args=("--verdicts", verdicts), log=folder / "with.log") as server,
    ):
        yield {"server": server, "key": key, "folder": folder, "db": db}


def verify_b(served: dict[str, Any], email: str) -> dict[str, Any]:
    server = served["server"]
    response = httpx.post(
        f"{server.root}/b/v1/verify", json={"email": email}, headers=b(served["key"]), timeout=30
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_form_b_verify_a_catch_alls_engaged_address_is_valid(served: dict[str, Any]) -> None:
    answer = verify_b(served, ENGAGED)
    assert answer["status"] == "valid"
    assert answer["reason"] is None
    assert answer["result"]["catchall"] is True  # the flag stays as measured


def test_form_b_verify_a_catch_alls_hard_bounced_address_is_invalid(served: dict[str, Any]) -> None:
    answer = verify_b(served, BOUNCED)
    assert (answer["status"], answer["reason"]) == ("invalid", "bounced")
    assert answer["result"]["deliverable"] is False


def test_form_b_other_addresses_are_as_verified(served: dict[str, Any]) -> None:
    assert verify_b(served, SILENT)["status"] == "accept_all"
    assert verify_b(served, VERIFIED_SINCE)["status"] == "valid"


def test_form_b_bulk_job(served: dict[str, Any]) -> None:
    server, headers = served["server"], b(served["key"])
    emails = [ENGAGED, BOUNCED, SILENT, VERIFIED_SINCE]
    job = httpx.post(
        f"{server.root}/b/v1/verify/bulk", json={"emails": emails}, headers=headers, timeout=30
    ).json()
    deadline = time.monotonic() + 120
    while True:
        status = httpx.get(
            f"{server.root}/b/v1/verify/bulk/{job['job_id']}", headers=headers, timeout=30
        ).json()
        if status["status"] in ("completed", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status["status"] == "completed", status
    page = httpx.get(
        f"{server.root}/b/v1/verify/bulk/{job['job_id']}/results", headers=headers, timeout=30
    ).json()
    by_email = {item["email"]: item["status"] for item in page["results"]}
    assert by_email == {
        ENGAGED: "valid",
        BOUNCED: "invalid",
        SILENT: "accept_all",
        VERIFIED_SINCE: "valid",
    }


def test_form_a_single(served: dict[str, Any]) -> None:
    server = served["server"]
    data = httpx.post(
        f"{server.base}/verify/single",
        json={"email": BOUNCED},
        headers=a(served["key"]),
        timeout=30,
    ).json()["data"]
    assert (data["status"], data["reason"]) == ("invalid", "bounced")


def test_without_verdicts_the_service_applies_nothing(
    served: dict[str, Any], sandbox: Sandbox
) -> None:
    folder = served["folder"]
    db = f"sqlite:///{folder / 'plain.db'}"
    with Store(db) as store:
        key, _ = store.create_key("plain", 100)
    with Server(db, sandbox, log=folder / "without.log") as server:
        answer = httpx.post(
            f"{server.root}/b/v1/verify", json={"email": ENGAGED}, headers=b(key), timeout=30
        ).json()
    assert answer["status"] == "accept_all"

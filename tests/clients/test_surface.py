"""The public surface of ``listhygiene.clients`` is explicit, and importing it stays light."""

import json
import subprocess
import sys

import pytest

import listhygiene.clients as clients

PUBLIC = {
    "AsyncFormAClient",
    "AsyncFormBClient",
    "BatchResult",
    "BulkJob",
    "ClientConnectionError",
    "ClientError",
    "ClientRateLimitError",
    "ClientSettings",
    "ClientTimeoutError",
    "DEFAULT_API_KEY_HEADER",
    "FORM_A_RATE_LIMITS",
    "FORM_B_PLAN_LIMITS",
    "FileJob",
    "FileJobAccepted",
    "FormAClient",
    "FormACredits",
    "FormBClient",
    "FormBCredits",
    "JobError",
    "JobStatus",
    "ResultsPage",
    "SubmissionUncertainError",
    "TERMINAL_STATUSES",
    "UnexpectedResponseError",
    "Webhook",
    "WebhookReceiver",
    "WebhookRejected",
    "Delivery",
    "Event",
    "EventStore",
    "read_results_csv",
}


def test_public_surface_is_pinned() -> None:
    assert set(clients.__all__) == PUBLIC
    assert all(hasattr(clients, name) for name in clients.__all__)


def test_import_pulls_in_no_web_framework_or_pandas() -> None:
    code = "import listhygiene.clients, sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = {name.split(".")[0] for name in json.loads(out)}
    assert not loaded & {"fastapi", "starlette", "uvicorn", "pandas", "airflow", "dagster"}


def test_settings_check_themselves() -> None:
    with pytest.raises(ValueError, match="plan"):
        clients.ClientSettings(base_url="http://x/b/v1", api_key="k", plan="gold")
    with pytest.raises(ValueError, match="max_retries"):
        clients.ClientSettings(base_url="http://x/b/v1", api_key="k", max_retries=-1)
    settings = clients.ClientSettings(base_url="http://x/b/v1", api_key="secret-key", plan="free")
    assert "secret-key" not in repr(settings)
    assert settings.form_b_limits() == {3600.0: 100, 86400.0: 1000}
    explicit = clients.ClientSettings(
        base_url="http://x/b/v1", api_key="k", plan="free", requests_per_hour=5
    )
    assert explicit.form_b_limits() == {3600.0: 5, 86400.0: 1000}
    enterprise = clients.ClientSettings(base_url="http://x/b/v1", api_key="k", plan="enterprise")
    assert enterprise.form_b_limits() == {}

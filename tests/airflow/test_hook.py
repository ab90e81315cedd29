"""The hook's URL of a remote service, built from a connection's fields."""

from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import set_connection


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"host": "verify.example/a/v1", "port": 8443}, "https://verify.example:8443/a/v1"),
        (
            {"host": "verify.example/b/v1", "port": 8080, "schema": "http"},
            "http://verify.example:8080/b/v1",
        ),
        ({"host": "verify.example/a/v1"}, "https://verify.example/a/v1"),
        ({"host": "http://127.0.0.1/b/v1", "port": 9000}, "http://127.0.0.1:9000/b/v1"),
        ({"host": "http://127.0.0.1:9000/b/v1", "port": 9000}, "http://127.0.0.1:9000/b/v1"),
        ({"host": "verify.example", "port": 443}, "https://verify.example:443"),
    ],
)
def test_the_base_url_puts_the_port_after_the_host(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], expected: str
) -> None:
    from listhygiene_airflow.hooks.verification import ListHygieneHook

    set_connection(
        monkeypatch, "lh_url", "listhygiene", password="k", extra={"backend": "form-a"}, **fields
    )
    assert ListHygieneHook("lh_url").client_settings().base_url == expected


def test_a_host_url_with_another_port_than_the_port_field_is_refused(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from listhygiene_airflow.hooks.verification import ListHygieneHook

    set_connection(
        monkeypatch,
        "lh_url",
        "listhygiene",
        host="http://127.0.0.1:9000/b/v1",
        port=9001,
        password="k",
        extra={"backend": "form-b"},
    )
    with pytest.raises(ValueError, match=r"9000.*9001"):
        ListHygieneHook("lh_url").client_settings()


def test_the_hooks_vocabulary_is_the_cores() -> None:
    from listhygiene import vocabulary
    from listhygiene_airflow.hooks import verification

    assert verification.BACKENDS is vocabulary.BACKEND_KINDS
    assert verification.TERMINAL_STATUSES == vocabulary.TERMINAL_JOB_STATUSES
    assert (verification.COMPLETED, verification.FAILED) == ("completed", "failed")
    assert verification.ListHygieneHook.job_events({"backend": "form-a"}) == (
        "file.completed",
        "file.failed",
    )
    assert (
        verification.ListHygieneHook.job_events({"backend": "form-b"}) == vocabulary.JOB_EVENTS["b"]
    )


def test_the_shared_limits_extra_reaches_the_engine_and_the_split(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One extra gives every worker's engine the fleet's budget and splits giant domains."""
    from listhygiene_airflow.hooks.verification import ListHygieneHook

    store = "postgresql://postgres@127.0.0.1:5432/test"
    set_connection(
        monkeypatch,
        "lh_fleet",
        "listhygiene",
        extra={"backend": "local", "shared_limits": store},
    )
    hook = ListHygieneHook("lh_fleet")
    assert hook.engine_settings().shared_limits == store
    assert hook.shared_limits == store
    set_connection(monkeypatch, "lh_alone", "listhygiene", extra={"backend": "local"})
    monkeypatch.delenv("LISTHYGIENE_SHARED_LIMITS", raising=False)
    assert ListHygieneHook("lh_alone").shared_limits == "none"
    set_connection(
        monkeypatch,
        "lh_remote",
        "listhygiene",
        host="http://127.0.0.1:9000/b/v1",
        password="k",
        extra={"backend": "form-b", "shared_limits": store},
    )
    assert ListHygieneHook("lh_remote").shared_limits == "none"

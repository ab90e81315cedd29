"""Storage errors are one line and the documented exit code, never a traceback (PRODUCT.md:
3 when the input cannot be read; an output folder that cannot be used is 1, kind "output")."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.storage.conftest import aws_environment, start_moto, stop

CSV = b"Email\nalice@acme.test\n"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", *args, "--no-smtp", "--json"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _error(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, done.stderr
    error: dict[str, Any] = json.loads(done.stdout)["error"]
    assert error["exit_code"] == done.returncode
    return error


def test_no_such_bucket(s3: Any, bucket: str, s3_env: dict[str, str]) -> None:
    s3.pipe(f"{bucket}/contacts.csv", CSV)
    missing_input = _run(s3_env, f"s3://{bucket}-nope/contacts.csv", "--out", f"s3://{bucket}/o")
    assert missing_input.returncode == 3
    error = _error(missing_input)
    assert error["kind"] == "input"
    assert f"s3://{bucket}-nope/contacts.csv: no such bucket" in error["message"]
    missing_output = _run(s3_env, f"s3://{bucket}/contacts.csv", "--out", f"s3://{bucket}-nope/o")
    assert missing_output.returncode == 1
    error = _error(missing_output)
    assert error["kind"] == "output"
    assert f"s3://{bucket}-nope/o" in error["message"]
    assert "no such bucket" in error["message"]


def test_no_credentials(s3: Any, bucket: str, s3_env: dict[str, str]) -> None:
    s3.pipe(f"{bucket}/contacts.csv", CSV)
    anonymous = {
        "AWS_ENDPOINT_URL": s3_env["AWS_ENDPOINT_URL"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | anonymous
    args = ["clean", f"s3://{bucket}/contacts.csv", "--out", f"s3://{bucket}/o"]
    done = subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", *args, "--no-smtp", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3
    assert "no credentials found" in _error(done)["message"]


@pytest.fixture(scope="module")
def guarded_endpoint() -> Iterator[str]:
    """A second moto server that checks every request's credentials (none are known to it)."""
    process, url = start_moto(INITIAL_NO_AUTH_ACTION_COUNT="0")
    yield url
    stop(process)


def test_access_denied(guarded_endpoint: str, tmp_path: Path) -> None:
    denied = aws_environment(guarded_endpoint)
    done = _run(denied, "s3://any-bucket/contacts.csv", "--out", str(tmp_path / "out"))
    assert done.returncode == 3
    assert "s3://any-bucket/contacts.csv: access denied" in _error(done)["message"]
    # a readable input, and an output bucket that refuses us
    local = tmp_path / "contacts.csv"
    local.write_bytes(CSV)
    done = _run(denied, str(local), "--out", "s3://any-bucket/out")
    assert done.returncode == 1
    error = _error(done)
    assert error["kind"] == "output"
    assert "s3://any-bucket/out" in error["message"]
    assert "access denied" in error["message"]


def test_a_malformed_storage_option_is_a_usage_error(s3_env: dict[str, str]) -> None:
    done = _run(
        s3_env, "s3://b/contacts.csv", "--out", "s3://b/o", "--storage-option", "endpoint_url"
    )
    assert done.returncode == 2
    assert "KEY=VALUE" in done.stderr
    assert "Traceback" not in done.stderr
    malformed = {**s3_env, "LISTHYGIENE_STORAGE_OPTIONS": "{not json"}
    done = _run(malformed, "s3://b/contacts.csv", "--out", "s3://b/o")
    assert done.returncode == 2
    assert "LISTHYGIENE_STORAGE_OPTIONS is not JSON" in done.stderr

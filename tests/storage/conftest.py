"""A real S3-compatible server for the object-storage tests: moto in server mode, started on a
free port of the loopback for the session, reached through s3fs exactly as a user's bucket is
(the standard AWS variables, ``AWS_ENDPOINT_URL`` among them: docs/object-storage.md)."""

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from listhygiene.sandbox import Sandbox


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(**env: str) -> tuple[subprocess.Popen[bytes], str]:
    """A moto server (``moto_server``, the console script of moto[server]) and its URL."""
    port = _free_port()
    server = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
            return process, url
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto_server did not start on {url}") from None
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    process, url = start_moto()
    yield url
    stop(process)


def aws_environment(endpoint: str) -> dict[str, str]:
    """What a user sets to reach the bucket: credentials, region and the endpoint."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The AWS variables of this process point at the moto server; the dict is for children."""
    env = aws_environment(moto_endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LISTHYGIENE_STORAGE_OPTIONS", raising=False)
    return env


@pytest.fixture
def s3(s3_env: dict[str, str]) -> Any:
    """An s3fs filesystem on the moto server (no caches: the tests look right after writing)."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)


@pytest.fixture
def bucket(s3: Any) -> str:
    """A new, empty bucket."""
    name = f"lh-{secrets.token_hex(6)}"
    s3.mkdir(name)
    return name


def mx(host: str) -> list[dict[str, Any]]:
    return [{"preference": 10, "host": host}]


WORLD = {
    "domains": {
        "acme.test": {"mx": mx("mx.acme.test"), "mailboxes": ["alice", "bob", "info"]},
        "slow.test": {"mx": mx("mx.slow.test"), "mailboxes": [f"person{i}" for i in range(60)]},
    },
    "hosts": {
        "mx.acme.test": {},
        "mx.slow.test": {"latency_ms": 150, "max_rcpt_per_connection": 2},
    },
}


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(WORLD) as running:
        yield running

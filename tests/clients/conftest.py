"""Fixtures of the client tests: a scripted service and fake time for the unit tests; for the
integration tests, the sandbox mail world of the service tests."""

from collections.abc import Iterator

import pytest

from tests.clients.fakes import Both, FakeService, FakeTime, make_client
from tests.service.conftest import sandbox  # noqa: F401 - the session's sandbox, shared

MODES = ("sync", "async")


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client_a(service: FakeService, fake_time: FakeTime, mode: str) -> Iterator[Both]:
    client = make_client("a", mode, service, fake_time)
    yield client
    client.close()


@pytest.fixture
def client_b(service: FakeService, fake_time: FakeTime, mode: str) -> Iterator[Both]:
    client = make_client("b", mode, service, fake_time)
    yield client
    client.close()

"""pytest fixtures for testing code that verifies email addresses, with no network.

Installed with the package (entry point ``pytest11``). Point it at a world in ``pyproject.toml``::

    [tool.pytest.ini_options]
    listhygiene_world = "tests/world.json"

then::

    def test_cleaning(mail_sandbox_env):        # LISTHYGIENE_* point at the sandbox
        result = listhygiene.verify("alice@acme.test")

``mail_sandbox`` (one per test session) runs that world; ``make_mail_sandbox`` starts any other
world for one test and stops it afterwards.
"""

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from listhygiene.sandbox.runner import Sandbox
from listhygiene.sandbox.world import World

WorldSource = World | Mapping[str, Any] | str | Path


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "listhygiene_world",
        "World file (JSON) for the mail_sandbox fixture, relative to the rootdir.",
        default="",
    )
    parser.addoption(
        "--listhygiene-world",
        default=None,
        help="World file for the mail_sandbox fixture (overrides the ini option).",
    )


def _world_path(config: pytest.Config) -> Path:
    value = config.getoption("--listhygiene-world") or config.getini("listhygiene_world")
    if not value:
        raise pytest.UsageError(
            "the mail_sandbox fixture needs a world: set listhygiene_world in the pytest ini "
            "options or pass --listhygiene-world PATH"
        )
    path = Path(value)
    return path if path.is_absolute() else config.rootpath / path


@pytest.fixture(scope="session")
def mail_sandbox(pytestconfig: pytest.Config) -> Iterator[Sandbox]:
    """The configured world, running for the whole test session."""
    with Sandbox(_world_path(pytestconfig)) as sandbox:
        yield sandbox


@pytest.fixture
def mail_sandbox_env(mail_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """``mail_sandbox`` with the ``LISTHYGIENE_*`` engine settings pointing at it."""
    for name, value in mail_sandbox.engine_environment().items():
        monkeypatch.setenv(name, value)
    return mail_sandbox


@pytest.fixture
def make_mail_sandbox() -> Iterator[Callable[..., Sandbox]]:
    """A factory: ``make_mail_sandbox(world, **options)`` starts a world for this test only."""
    running: list[Sandbox] = []

    def make(world: WorldSource, **options: Any) -> Sandbox:
        sandbox = Sandbox(world, **options).start()
        running.append(sandbox)
        return sandbox

    yield make
    for sandbox in running:
        sandbox.stop()

"""Optional parts say which extra installs them (listhygiene.extras)."""

import pytest
from click.testing import CliRunner

from listhygiene import extras
from listhygiene.cli import main
from listhygiene.errors import ConfigurationError, exit_code


def test_installed_extras_are_found() -> None:
    # make install installs every extra
    for extra in extras.EXTRAS:
        assert extras.missing_extra(extra) is None, extra


def test_a_missing_extra_names_itself_and_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(extras.EXTRAS, "service", ("fastapi", "no_such_module_for_this_test"))
    assert extras.missing_extra("service") == "no_such_module_for_this_test"
    with pytest.raises(ConfigurationError) as raised:
        extras.require_extra("service", "listhygiene serve")
    assert str(raised.value) == (
        "listhygiene serve needs the 'service' extra (no_such_module_for_this_test is not "
        "installed): pip install 'listhygiene[service]'"
    )
    assert exit_code(raised.value) == 2


@pytest.mark.parametrize(
    "command", [["serve"], ["receive-webhooks", "--events", "events.jsonl", "--form", "b"]]
)
def test_serve_and_receive_without_the_service_extra_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setitem(extras.EXTRAS, "service", ("no_such_module_for_this_test",))
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert "pip install 'listhygiene[service]'" in result.output
    assert "Traceback" not in result.output

"""Optional parts say which extra installs them (listhygiene.extras)."""

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from listhygiene import extras
from listhygiene.cli import main
from listhygiene.errors import ConfigurationError, exit_code

if TYPE_CHECKING:
    from listhygiene.sandbox import Sandbox


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


def test_without_the_quality_extra_the_run_says_its_checks_were_skipped(
    monkeypatch: pytest.MonkeyPatch, mail_sandbox: "Sandbox", tmp_path: Path
) -> None:
    import listhygiene

    monkeypatch.setitem(extras.EXTRAS, "quality", ("no_such_module_for_this_test",))
    source = tmp_path / "contacts.csv"
    source.write_text("email\nann@example.com\nnot an address\n")
    settings = mail_sandbox.engine_settings(helo="verifier.test", retry_delays=())
    result = listhygiene.clean(source, tmp_path / "out", settings=settings, check_smtp=False)
    quality = result.summary["quality"]
    assert quality["passed"] is True
    assert quality["checks"] == []
    assert quality["skipped"].startswith("great-expectations is not installed")
    assert "pip install 'listhygiene[quality]'" in quality["skipped"]
    report = (tmp_path / "out" / "report.html").read_text()
    assert "Quality checks skipped" in report
    assert sum(result.counts.values()) == 2  # the files are written and published all the same

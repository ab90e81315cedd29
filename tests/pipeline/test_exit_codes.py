"""``listhygiene clean``'s exit codes and ``--json`` (PRODUCT.md, "Exit codes and machine-readable
output"), run as a user runs them: the real command in a subprocess, the sandbox for DNS and SMTP,
the real service over HTTP for a refusing backend."""

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import listhygiene
from listhygiene.cli import main
from listhygiene.engine import Engine
from listhygiene.pipeline.backends import JobRef, LocalBackend
from listhygiene.pipeline.run import UnreachableError
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from tests.service.live import LiveServer, free_port

DOWN = [f"down{i}.test" for i in range(6)]

WORLD: dict[str, Any] = {
    "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["alice"]},
        **{d: {"mx": [{"preference": 10, "host": f"mx.{d}"}], "mailboxes": ["x"]} for d in DOWN},
    },
    "hosts": {"mx.acme.test": {}, **{f"mx.{d}": {"behaviour": "refuse"} for d in DOWN}},
}


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture
def env(sandbox: Sandbox) -> dict[str, str]:
    return {
        **os.environ,
        **sandbox.engine_environment(),
        "LISTHYGIENE_HELO": "verifier.test",
        "LISTHYGIENE_RETRY_DELAYS": "",
        "LISTHYGIENE_SMTP_TIMEOUT": "2",
    }


@pytest.fixture
def reachable(tmp_path: Path) -> Path:
    path = tmp_path / "reachable.csv"
    path.write_text("id,email\n1,alice@acme.test\n2,nobody@acme.test\n3,not an address\n")
    return path


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    path = tmp_path / "unreachable.csv"
    path.write_text(
        "id,email\n0,alice@acme.test\n" + "".join(f"{i},x@{d}\n" for i, d in enumerate(DOWN, 1))
    )
    return path


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_success_exits_0_and_json_prints_the_summary_alone(
    env: dict[str, str], reachable: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = run(env, str(reachable), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)  # the whole of stdout is one JSON object
    assert printed == json.loads((out / "summary.json").read_text())
    assert printed["rows"]["total"] == 3
    assert printed["rows"]["by_status"]["valid"] == 1


def test_human_output_without_json(env: dict[str, str], reachable: Path, tmp_path: Path) -> None:
    done = run(env, str(reachable), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3 rows -> ")
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)


def test_a_wrong_quality_worker_variable_exits_2_before_any_work(
    env: dict[str, str], reachable: Path, tmp_path: Path
) -> None:
    out = tmp_path / "o"
    done = run({**env, "LISTHYGIENE_QUALITY_WORKER": "fork"}, str(reachable), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert "LISTHYGIENE_QUALITY_WORKER='fork'" in one_error_line(done.stderr)
    assert not out.exists()


def test_usage_errors_exit_2(env: dict[str, str], reachable: Path, tmp_path: Path) -> None:
    missing_out = run(env, str(reachable))
    assert missing_out.returncode == 2, missing_out.stderr
    bad_duration = run(
        env, str(reachable), "--out", str(tmp_path / "o"), "--retry-unknown-after", "soon"
    )
    assert bad_duration.returncode == 2, bad_duration.stderr
    assert "soon" in bad_duration.stderr
    no_url = run(env, str(reachable), "--out", str(tmp_path / "o"), "--backend", "form-b")
    assert no_url.returncode == 2
    assert "--base-url" in no_url.stderr
    assert not (tmp_path / "o").exists()


def test_an_unreadable_input_exits_3(env: dict[str, str], tmp_path: Path) -> None:
    no_column = tmp_path / "people.csv"
    no_column.write_text("name,city\nAlice,Paris\n")
    for path in (no_column, tmp_path / "missing.csv"):
        failed = run(env, str(path), "--out", str(tmp_path / "out"), "--json")
        assert failed.returncode == 3, failed.stderr
        assert path.name in one_error_line(failed.stderr)
        error = json.loads(failed.stdout)["error"]
        assert error["exit_code"] == 3
        assert error["kind"] == "input"
        assert path.name in error["message"]
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.fixture(scope="module")
def service(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = tmp_path_factory.mktemp("service") / "service.db"
    settings = sandbox.engine_settings(
        helo="verifier.test",
        smtp_timeout=2,
        retry_delays=(),
    )
    with (
        Store(f"sqlite:///{path}") as store,
        LiveServer(create_app(store, Engine(settings))) as url,
    ):
        yield url, store


def test_a_refusing_backend_exits_4(
    env: dict[str, str], service: Any, reachable: Path, tmp_path: Path
) -> None:
    url, store = service
    poor, row = store.create_key("poor", 1)
    cases = {
        "credits": (f"{url}/b/v1", poor, "credits"),
        "key": (f"{url}/b/v1", "lh_not_a_key", "key"),
        "down": (f"http://127.0.0.1:{free_port()}/b/v1", poor, "127.0.0.1"),
    }
    for name, (base_url, key, says) in cases.items():
        out = tmp_path / name
        args = ("--backend", "form-b", "--base-url", base_url, "--json")
        failed = run({**env, "LISTHYGIENE_API_KEY": key}, str(reachable), "--out", str(out), *args)
        assert failed.returncode == 4, (name, failed.stderr)
        assert says in one_error_line(failed.stderr).lower(), name
        assert json.loads(failed.stdout)["error"]["kind"] == "backend"
        assert not (out / "summary.json").exists()
    assert store.credits(row.id).balance == 1  # nothing was spent


class _BrokenResults(LocalBackend):
    """The local engine, with one result whose status has no file: the checks must catch it."""

    async def results(self, job: JobRef) -> AsyncIterator[pa.Table]:
        async for table in super().results(job):
            status = table.column("status").to_pylist()
            status[0] = "excellent"
            index = table.schema.get_field_index("status")
            yield table.set_column(index, "status", pa.array(status, pa.string()))


def test_a_failed_quality_check_exits_5(
    env: dict[str, str], reachable: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In process: the real command and pipeline, with a backend that breaks one result.
    monkeypatch.setattr("listhygiene.pipeline.backends.LocalBackend", _BrokenResults)
    out = tmp_path / "out"
    args = ["clean", str(reachable), "--out", str(out), "--no-smtp", "--json"]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 5, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "quality"
    assert error["quality"]["passed"] is False
    assert "rows_in_exactly_one_output" in error["message"]
    assert not (out / "summary.json").exists()
    warned = CliRunner().invoke(main, [*args, "--warn-only"], env=env)
    assert warned.exit_code == 0, warned.output
    assert json.loads(warned.stdout)["quality"]["passed"] is False


class _ToldOff(LocalBackend):
    """The local engine, as if mail hosts had said it went too fast (once with a ban)."""

    @property
    def politeness(self) -> dict[str, int]:
        return {**self.engine.politeness, "limits_met": 2, "bans": 1}


def test_limits_met_warn_but_do_not_change_the_exit_code(
    env: dict[str, str], reachable: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("listhygiene.pipeline.backends.LocalBackend", _ToldOff)
    out = tmp_path / "out"
    args = ["clean", str(reachable), "--out", str(out), "--no-smtp", "--json"]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["politeness"] == {
        "sessions": 0,
        "max_sessions_one_host": 0,
        "limits_met": 2,
        "bans": 1,
    }
    assert "WARNING: mail hosts said we went too fast (2 limits met, 1 ban)" in result.stderr
    assert "Hosts that defend themselves" in (out / "report.html").read_text()


def test_unreachable_port_25_exits_6_and_publishes_only_when_accepted(
    env: dict[str, str], unreachable: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    failed = run(env, str(unreachable), "--out", str(out), "--json")
    assert failed.returncode == 6, failed.stderr
    line = one_error_line(failed.stderr)
    assert "6 of 7 domains could not be reached" in line
    assert "`listhygiene doctor` checks this machine" in line  # what to run next
    assert "--accept-unreachable" in line
    error = json.loads(failed.stdout)["error"]
    assert error["kind"] == "unreachable"
    assert error["health"]["domains_unreachable"] == 6
    assert not (out / "summary.json").exists()
    assert not list(out.glob("*.parquet"))
    # The same command again (a retried task) still refuses: the first attempt's health is kept.
    again = run(env, str(unreachable), "--out", str(out))
    assert again.returncode == 6, again.stderr
    accepted = run(env, str(unreachable), "--out", str(out), "--json", "--accept-unreachable")
    assert accepted.returncode == 0, accepted.stderr
    summary = json.loads(accepted.stdout)
    assert summary["health"]["accepted"] is True
    assert summary["health"]["domains_unreachable"] == 6
    assert summary["addresses"]["verified"] == 0  # published without probing again
    assert summary["rows"]["by_status"]["unknown"] == 6
    assert "--accept-unreachable" in accepted.stderr


def test_the_python_api_raises_unreachable_error(sandbox: Sandbox, unreachable: Path) -> None:
    settings = sandbox.engine_settings(
        helo="verifier.test",
        retry_delays=(),
    )
    with pytest.raises(UnreachableError, match="could not be reached") as raised:
        listhygiene.clean(unreachable, settings=settings)
    assert raised.value.health["domains_probed"] == 7
    result = listhygiene.clean(unreachable, settings=settings, accept_unreachable=True)
    assert result.summary["health"]["accepted"] is True
    assert result.counts["unknown"] == 6


def test_settings_that_cannot_work_are_a_usage_error(tmp_path: Path) -> None:
    # errors.ConfigurationError carries exit code 2: clean prints it as a usage error.
    import click

    from listhygiene.cli.clean import _fail
    from listhygiene.errors import ConfigurationError

    source = tmp_path / "in.csv"
    source.write_text("email\nann@example.com\n")
    with pytest.raises(ConfigurationError, match="unknown backend 'nope'"):
        listhygiene.clean(source, tmp_path / "out", backend="nope")
    with pytest.raises(click.UsageError, match="unknown backend") as raised:
        _fail(
            ConfigurationError("unknown backend 'nope'"), backend="x", base_url=None, as_json=True
        )
    assert raised.value.exit_code == 2


def test_an_exception_the_library_does_not_raise_on_purpose_keeps_its_traceback() -> None:
    from listhygiene.cli.clean import _fail

    with pytest.raises(KeyError):
        _fail(KeyError("a bug"), backend="local", base_url=None, as_json=False)

"""The release build (issue 19, item 7): ``uv build`` makes a wheel that installs in a fresh
virtual environment, with the licence files, and whose ``listhygiene`` runs: ``--version`` and a
small ``clean --no-smtp`` against the sandbox.

The environment gets the core dependencies at the versions of ``uv.lock`` (``uv export``), from
uv's cache where it has them, and no extra: great-expectations and the service's packages are
not there, and the run and ``serve`` say so (README, "Install"). It runs in ``make test``.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from listhygiene import __version__
from listhygiene.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
WORLD = {
    "domains": {
        "acme.test": {"mx": [{"preference": 10, "host": "mx.acme.test"}], "mailboxes": ["ann"]},
    },
    "hosts": {"mx.acme.test": {}},
}


def _uv() -> str:
    local = ROOT / ".uv" / "bin" / "uv"
    found = str(local) if local.exists() else shutil.which("uv")
    if found is None:
        pytest.skip("uv is not installed (make install puts it in .uv/)")
    return found


def _run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=240, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args[:3]}: {done.stderr[-2000:]}"
    return done


@pytest.mark.timeout(300)
def test_the_wheel_installs_in_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    uv = _uv()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    _run(uv, "build", "--wheel", "--out-dir", str(tmp_path / "dist"), cwd=ROOT, env=env)
    (wheel,) = (tmp_path / "dist").glob("listhygiene-*.whl")
    assert wheel.name.startswith(f"listhygiene-{__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert f"listhygiene-{__version__}.dist-info/licenses/LICENSE" in names
    assert "listhygiene/engine/data/role_local_parts.LICENSE" in names
    assert "listhygiene/py.typed" in names

    requirements = tmp_path / "requirements.txt"
    _run(
        uv,
        "export",
        "--frozen",
        "--no-dev",
        "--no-hashes",
        "--no-emit-project",
        "-q",
        "-o",
        str(requirements),
        cwd=ROOT,
        env=env,
    )
    venv = tmp_path / "venv"
    _run(uv, "venv", "-q", "--python", sys.executable, str(venv), env=env)
    python = venv / "bin" / "python"
    _run(
        uv,
        "pip",
        "install",
        "-q",
        "--python",
        str(python),
        "-r",
        str(requirements),
        str(wheel),
        env=env,
    )

    command = venv / "bin" / "listhygiene"
    assert _run(str(command), "--version").stdout.strip() == f"listhygiene, version {__version__}"

    source = tmp_path / "contacts.csv"
    source.write_text("Name,Email\nAnn,ann@acme.test\nBad,not-an-address\nRole,info@acme.test\n")
    with Sandbox(WORLD) as sandbox:
        run_env = {**env, **sandbox.engine_environment(), "LISTHYGIENE_VERDICTS": "none"}
        done = _run(
            str(command),
            "clean",
            str(source),
            "--out",
            str(tmp_path / "out"),
            "--no-smtp",
            "--json",
            env=run_env,
            cwd=tmp_path,
        )
    summary = json.loads(done.stdout)
    # the core install has no great-expectations: the run says its checks were skipped, and why
    assert summary["quality"]["checks"] == []
    assert "pip install 'listhygiene[quality]'" in summary["quality"]["skipped"]
    assert summary["rows"]["by_status"]["valid"] == 1
    assert summary["rows"]["by_status"]["invalid"] == 1
    assert summary["rows"]["by_status"]["role"] == 1
    assert (tmp_path / "out" / "valid.parquet").is_file()
    # nor the service's packages: serve says which extra it needs (a usage error, exit 2)
    serve = subprocess.run(
        [str(command), "serve"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert serve.returncode == 2, serve.stderr
    assert "pip install 'listhygiene[service]'" in serve.stderr
    assert "Traceback" not in serve.stderr
    # the installed package is the wheel's, not this checkout's
    where = _run(str(python), "-c", "import listhygiene; print(listhygiene.__file__)").stdout
    assert str(venv) in where

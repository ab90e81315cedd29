"""The type gate of issue 16: mypy, strict, on ``src``: the core and the Airflow and Dagster
packages (pyproject.toml ``[tool.mypy]``; the few lines where those frameworks' own types are
missing say so with a ``type: ignore`` of the one error code)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_passes_on_the_package() -> None:
    # mypy keeps its cache in .mypy_cache: after the first run it checks only what changed.
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_packages_declare_their_types() -> None:
    # PEP 561: a user's type checker reads our annotations only with the marker.
    for package in ("listhygiene", "listhygiene_airflow", "listhygiene_dagster"):
        assert (ROOT / "src" / package / "py.typed").is_file(), package

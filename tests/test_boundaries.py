"""The core stays light: no orchestrator, web framework or GX at import, and a quick CLI."""

import json
import subprocess
import sys

import listhygiene

FORBIDDEN = ("airflow", "dagster", "great_expectations", "fastapi", "starlette", "uvicorn")


def imported_by(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {name.split(".")[0] for name in json.loads(out)}


def test_core_imports_no_orchestrator_or_web_framework() -> None:
    loaded = imported_by("import listhygiene, listhygiene.results, listhygiene.sandbox")
    assert not loaded.intersection(FORBIDDEN)


def test_cli_start_up_does_not_import_heavy_modules() -> None:
    loaded = imported_by("import listhygiene.cli")
    assert not loaded.intersection({*FORBIDDEN, "pyarrow", "pandas", "aiosmtpd"})


def test_public_surface_is_explicit() -> None:
    assert sorted(listhygiene.__all__) == sorted(
        name for name in listhygiene.__all__ if hasattr(listhygiene, name)
    )
    assert {"VerificationResult", "Status", "Reason", "FormBStatus"} <= set(listhygiene.__all__)

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


def modules_loaded_by(statement: str) -> set[str]:
    code = f"{statement}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


def test_the_package_and_its_facade_import_what_is_used_on_first_use() -> None:
    # `import listhygiene` names the engine and the pipeline but loads them when first used.
    loaded = modules_loaded_by("import listhygiene, listhygiene.pipeline")
    assert not {"listhygiene.engine", "listhygiene.pipeline.runner", "pyarrow"} & loaded
    used = modules_loaded_by("from listhygiene import clean, Engine")
    assert {"listhygiene.engine", "listhygiene.pipeline.runner"} <= used


def test_the_quality_checks_child_loads_no_engine() -> None:
    # The warm worker's child (docs/pipeline.md, "Quality checks") is on a small run's critical
    # path: it imports the checks, not the engine nor the run's stages.
    loaded = modules_loaded_by("from listhygiene.pipeline.quality.worker import _serve")
    assert not {"listhygiene.engine", "listhygiene.pipeline.runner", "dns"} & loaded


def test_a_run_without_a_verdict_store_does_not_import_it() -> None:
    # `--verdicts none`: the store's SQLAlchemy stays out of the run (docs/pipeline.md).
    loaded = modules_loaded_by(
        "from listhygiene.pipeline.verdict_memory import open_verdicts\n"
        "assert open_verdicts('none', '30d', fresh=False) is None"
    )
    assert not {"sqlalchemy", "listhygiene.verdicts.store"} & loaded

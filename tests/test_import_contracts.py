"""The import contract of issue 16 (``.importlinter``): the core imports neither Airflow, Dagster
nor the service; the engine nothing of the pipeline; the service's store none of its routers."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    from importlinter.cli import lint_imports

    code = lint_imports(config_filename=str(CONFIG), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "0 broken" in report


def test_the_contracts_cover_every_module_of_the_core() -> None:
    # A new top-level module of listhygiene is either in the core contract or named here.
    from importlinter.api import read_configuration

    interfaces = {"cli", "service"}
    top = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "src" / "listhygiene").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    contracts = {c["name"]: c for c in read_configuration(str(CONFIG))["contracts_options"]}
    (core,) = [c for c in contracts.values() if c["id"] == "core"]
    sources = {m.removeprefix("listhygiene.") for m in core["source_modules"]}
    assert sources == top - interfaces


def test_the_package_itself_imports_only_the_core() -> None:
    # The contracts name subpackages; the package's own __init__ is checked here.
    import grimp

    graph = grimp.build_graph("listhygiene", include_external_packages=True)
    direct = graph.find_modules_directly_imported_by("listhygiene")
    forbidden = ("airflow", "dagster", "listhygiene.service", "listhygiene.cli")
    assert not [m for m in direct if m.startswith(forbidden)]

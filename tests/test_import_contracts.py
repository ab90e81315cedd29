"""The import contracts (``.importlinter``): the core imports neither Airflow, Dagster nor the
service; the engine nothing of the pipeline; the service's store none of its routers (issue 16); no
import circles anywhere, the pipeline in layers, the interfaces through its façade (issue 27)."""

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


def _layers(contract_id: str) -> tuple[str, set[str]]:
    from importlinter.api import read_configuration

    (contract,) = [
        c for c in read_configuration(str(CONFIG))["contracts_options"] if c["id"] == contract_id
    ]
    (container,) = contract["containers"]
    placed = {
        name.strip() for layer in contract["layers"] for name in layer.split("|") if name.strip()
    }
    return container, placed


@pytest.mark.parametrize(
    "contract_id", ["pipeline-layers", "sources-layers", "backends-layers", "quality-layers"]
)
def test_every_module_of_the_pipeline_has_its_layer(contract_id: str) -> None:
    # A new module of the pipeline (or of one of its subpackages) goes into one layer: a module
    # left out of the contract could import anything (docs/architecture.md).
    container, placed = _layers(contract_id)
    folder = ROOT / "src" / Path(*container.split("."))
    children = {
        p.stem if p.is_file() else p.name
        for p in folder.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert children == placed


def test_a_circle_closed_inside_a_function_breaks_the_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27: three circles were closed only by imports inside functions. The contract type
    # the project relies on must see those (and TYPE_CHECKING ones), or it keeps nothing.
    from importlinter.cli import lint_imports

    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "reader.py").write_text("from circled.storage import open_remote\n")
    (package / "storage.py").write_text(
        "def open_remote():\n    from circled.reader import read\n    return read\n"
    )
    (package / "writer.py").write_text(
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n    from circled.result import Result\n"
    )
    (package / "result.py").write_text("def write():\n    from circled.writer import write\n")
    config = tmp_path / "contracts.ini"
    config.write_text(
        "[importlinter]\nroot_packages =\n    circled\n\n"
        "[importlinter:contract:acyclic]\nname = No circles\ntype = acyclic_siblings\n"
        "ancestors =\n    circled\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 1
    assert "BROKEN" in report
    assert ".reader -> .storage" in report or ".storage -> .reader" in report
    assert ".writer -> .result" in report or ".result -> .writer" in report

"""The service's modules import one another in one direction (issue 16, item 4): the store
imports nothing of the service above it, the routers import no helpers of the app or of another
router, and no module imports one that imports it back; every module is in a layer of
``.importlinter``'s service-layers contract. Read from the source (``ast``), so a
lazy import inside a function counts too."""

import ast
from pathlib import Path

import listhygiene.service

SERVICE = Path(listhygiene.service.__file__).parent
#: Modules that add routes to the forms' apps.
ROUTERS = {"form_a", "form_b", "files_a", "jobs_b", "webhooks", "openapi_docs"}
_TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def _imports(path: Path) -> set[str]:
    """The ``listhygiene.service...`` modules ``path`` imports, anywhere in it but under ``if
    TYPE_CHECKING:`` (annotations only: no import at run time)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "listhygiene.service":
                found.update(f"listhygiene.service.{alias.name}" for alias in node.names)
            elif node.module.startswith("listhygiene.service."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("listhygiene.service."))
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(SERVICE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in SERVICE.rglob("*.py") if "migrations" not in p.parts}


def test_the_store_imports_nothing_of_the_service_above_it() -> None:
    for module, imported in _graph().items():
        if module.startswith("listhygiene.service.store"):
            above = {m for m in imported if not m.startswith("listhygiene.service.store")}
            assert not above, f"{module} imports {sorted(above)}"


def test_routers_import_no_helpers_of_the_app_or_of_each_other() -> None:
    forbidden = {"listhygiene.service.app"} | {f"listhygiene.service.{r}" for r in ROUTERS}
    for module, imported in _graph().items():
        if module.rsplit(".", 1)[-1] in ROUTERS:
            assert not imported & forbidden, f"{module} imports {sorted(imported & forbidden)}"


def test_no_import_circles() -> None:
    graph = _graph()
    known = set(graph)

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [m for m in graph[start] if m in known]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(m for m in graph.get(module, ()) if m in known)
        return seen

    # the package's own __init__ holds constants only: every module may import it
    circles = [m for m in graph if m != "listhygiene.service" and m in reaches(m)]
    assert not circles, circles


def test_every_module_of_the_service_is_in_a_layer_of_the_import_contract() -> None:
    # .importlinter's service-layers contract only checks the modules it names: a new module
    # left out of it would escape the layering (docs/service.md, "The code").
    from importlinter.api import read_configuration

    config = Path(__file__).resolve().parents[2] / ".importlinter"
    contracts = read_configuration(str(config))["contracts_options"]
    (layers,) = [c for c in contracts if c["id"] == "service-layers"]
    placed = {
        module.strip()
        for layer in layers["layers"]
        for module in layer.replace(":", "|").split("|")
    }
    modules = {m for m in _graph() if m != "listhygiene.service"}
    unplaced = {m for m in modules if not any(m == p or m.startswith(p + ".") for p in placed)}
    assert not unplaced, f"not in a layer of .importlinter's service-layers: {sorted(unplaced)}"
    assert "listhygiene.service.store" in placed
    assert "listhygiene.service.app" in placed

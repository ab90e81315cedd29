"""Names a package gives on first use (PEP 562), so that importing it costs nothing it does not use.

``import listhygiene`` and the pipeline's façade name the whole public surface, but importing
the engine, pyarrow and the pipeline's stages up front took ~0.5 s in every process, the quality
checks' child included, which uses none of them (docs/architecture.md, "Import cost").
The names stay importable as before (``from listhygiene import clean``); type checkers read them
from the package's ``TYPE_CHECKING`` imports.
"""

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def on_first_use(
    package: str, sources: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: each name of ``sources`` is imported from its
    module (``"module"``, or ``"module:attribute"`` for a name given another) the first time it
    is asked for, then kept in the package."""

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = source.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *sources})

    return __getattr__, __dir__

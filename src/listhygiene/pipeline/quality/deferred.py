"""What GX imports and our checks never use, kept out of the warm worker's child.

``import great_expectations`` took ~4 s (docs/pipeline.md, "Quality checks"), on a small run's
critical path, and half of it is for what our checks never call:

- one core expectation (the KL divergence) imports ``scipy.stats`` and ``altair`` at its top,
  ~2 s, and uses them only inside its functions; so do the JSON-schema metric (``jsonschema``)
  and the Markdown view of the data docs (``mistune``), ~0.1 s. :func:`defer` puts a
  :class:`DeferredModule` in ``sys.modules`` for each: the first attribute looked up on it
  imports the real module and hands over to it, so a GX version that uses them at import, or a
  check that calls them, is only slower, never wrong;
- GX's optional integrations (SQL data sources through SQLAlchemy, stores on S3 and Google
  Cloud Storage), ~0.5 s: :func:`hide` makes them not installed for GX, which GX supports (they
  are extras of ``great-expectations``); our checks read pandas frames.

Only the child does this (:func:`~.worker._serve`, a process of our own that imports nothing
else); a process that imports GX for a user (``warm_up(process=False)``) is left as it is.

``importlib.util.LazyLoader`` does not do this: its module loads on any attribute, ``__spec__``
included, which the import system reads at once.
"""

import importlib
import sys
import types
from typing import Any

#: What GX imports and our checks never call (PRODUCT.md's checks: none is statistical, none
#: matches a JSON schema, none renders Markdown).
GX_UNUSED = ("scipy.stats", "altair", "jsonschema", "mistune")
#: GX's optional integrations, which our checks (pandas frames, local files) never use.
GX_OPTIONAL = ("sqlalchemy", "boto3", "botocore", "google.cloud")


def lighten_gx_import() -> None:
    """Before ``import great_expectations`` in the child: defer :data:`GX_UNUSED`, hide
    :data:`GX_OPTIONAL`."""
    defer(*GX_UNUSED)
    hide(*GX_OPTIONAL)


class DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module until an attribute of it is wanted."""

    def __getattr__(self, name: str) -> Any:
        return getattr(load(self.__name__), name)


def defer(*names: str) -> list[str]:
    """Put a :class:`DeferredModule` in ``sys.modules`` for each name not yet imported; returns
    the names deferred."""
    deferred = []
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = DeferredModule(name)
            deferred.append(name)
    return deferred


def hide(*names: str) -> list[str]:
    """Make each module not yet imported look not installed (``None`` in ``sys.modules``: its
    import raises ``ModuleNotFoundError``); returns the names hidden."""
    hidden = []
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    return hidden


def load(name: str) -> types.ModuleType:
    """The real module behind a deferred name, imported now if it was not."""
    if isinstance(sys.modules.get(name), DeferredModule):
        del sys.modules[name]
    module = importlib.import_module(name)
    parent, _, child = name.rpartition(".")
    if parent and isinstance(getattr(sys.modules[parent], child, None), DeferredModule):
        setattr(sys.modules[parent], child, module)
    return module

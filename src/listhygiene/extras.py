"""The optional parts of the package, and the extra that installs each (README, "Install").

``pip install listhygiene`` gives the engine, the clients, the pipeline and the sandbox. The HTTP
service, great-expectations, object storage, more warehouse drivers, Airflow and Dagster come
from extras, so that the core installs quickly and imports fast; a command that needs one says
which, instead of failing on an import.
"""

from importlib.util import find_spec

from listhygiene.errors import ConfigurationError

__all__ = ["EXTRAS", "missing_extra", "require_extra"]

#: Each extra, and the modules whose presence says it is installed.
EXTRAS: dict[str, tuple[str, ...]] = {
    "service": ("fastapi", "uvicorn", "multipart"),
    "quality": ("great_expectations",),
    "s3": ("s3fs",),
    "warehouses": ("duckdb_engine",),
    "mysql": ("pymysql",),
    "snowflake": ("snowflake.connector",),
    "airflow": ("airflow",),
    "dagster": ("dagster",),
    "fleet": ("redis",),
}


def missing_extra(extra: str) -> str | None:
    """The first module of ``extra`` that is not installed; None when all are."""
    for module in EXTRAS[extra]:
        try:
            if find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def require_extra(extra: str, what: str) -> None:
    """Raise a :class:`ConfigurationError` naming the extra when ``what`` cannot run."""
    module = missing_extra(extra)
    if module is not None:
        raise ConfigurationError(
            f"{what} needs the {extra!r} extra ({module} is not installed): "
            f"pip install 'listhygiene[{extra}]'"
        )

"""Parquet storage of DataFrame assets, on Dagster's own ``UPathIOManager``.

``dagster-pandas`` and ``dagster-duckdb-pandas`` require pandas < 3, so the per-status tables are
stored by this short subclass instead: one ``<base>/<asset key>.parquet`` per asset, or
``<base>/<asset key>/<partition>.parquet`` per partition, on any filesystem that
``universal-pathlib`` reaches (a local folder, ``s3://``, ``gs://`` ...).
"""

from typing import Any

from pydantic import Field
from upath import UPath

import dagster as dg

__all__ = ["ParquetIOManager", "ParquetUPathIOManager"]


class ParquetUPathIOManager(dg.UPathIOManager):
    """pandas DataFrames as Parquet files, written with pyarrow."""

    extension: str = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        import pandas as pd

        if not isinstance(obj, pd.DataFrame):
            raise dg.Failure(
                f"{context.asset_key.to_user_string()}: the Parquet IO manager stores pandas "
                f"DataFrames, not {type(obj).__name__}"
            )
        with path.open("wb") as file:
            obj.to_parquet(file, index=False)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Any:
        import pandas as pd

        with path.open("rb") as file:
            return pd.read_parquet(file)

    def get_metadata(self, context: dg.OutputContext, obj: Any) -> dict[str, Any]:
        return {"dagster/row_count": dg.MetadataValue.int(len(obj))}


class ParquetIOManager(dg.ConfigurableIOManagerFactory):  # type: ignore[type-arg]
    """Stores DataFrame assets as Parquet under ``base_path`` (a folder or a filesystem URL)."""

    base_path: str = Field(description="Folder or URL (s3://..., gs://...) of the files.")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options of a remote filesystem."
    )

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetUPathIOManager:
        return ParquetUPathIOManager(base_path=UPath(self.base_path, **self.storage_options))

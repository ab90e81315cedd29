"""Address tables in: a file, a warehouse table or query, or a DataFrame, read as Arrow batches.

The pipeline verifies a million-row table on two cores in a minute, so every source is read in
chunks with vectorised readers (pyarrow's CSV, JSON and Parquet readers; server-side cursors for
SQL), and yields batches that all share one schema. And every record of the input becomes a row
(PRODUCT.md, "Pipeline rows"): a broken record is kept, repaired as well as a person would, and
reported in :attr:`SourceInfo.bad_records`, never silently dropped.

What :func:`open_source` accepts::

    kind        chosen by                    read with
    csv         .csv .tsv                    pyarrow.csv, chunked (delimited.py)
    txt         .txt                         one address per line, column ``email``
    xlsx        .xlsx .xlsm                  xlsx_sheet (streamed), first sheet
    xls         .xls                         xlrd, first sheet
    parquet     .parquet .pq                 pyarrow.parquet, row group by row group
    jsonl       .jsonl .ndjson (.json)       pyarrow.json in line blocks
    (any file)  an fsspec URL (s3://...)     a local copy, as above (remote.py)
    sql         a SQLAlchemy URL             a server-side cursor; ``table=`` or ``query=``
    sql         snowflake://...              the connector's Arrow batches (snowflake.py)
    dataframe   a pandas DataFrame, an Arrow table

Errors are :class:`SourceError` (a ``ValueError``) and name the input: the path, or the URL with
its password masked.

Only regular files are read: a path (after its symlinks) that is a FIFO, a device such as
``/dev/zero``, a socket or a directory is refused before it is opened, so nothing ever blocks on
it or reads it forever. And what one record may cost is bounded (docs/pipeline.md, "Reading"):
no line of a text file (CSV, TXT, JSON lines) longer than :data:`MAX_LINE_BYTES`, no JSON value
nested deeper than :data:`MAX_DEPTH` levels; beyond either the input is refused.

Column names are made unique and non-empty (``Email``, ``Email_2``, ``column_3``). Text formats
(CSV, TXT, XLSX, XLS) give string columns; the others keep their own types, except that a column
of type null becomes string, so that every batch has the same schema. JSONL and SQL types come
from the first rows (nested values as their JSON text); a later value that does not fit its
column is null, and its row a bad record. An input without rows gives one empty batch.
"""

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from listhygiene.pipeline.sources.base import (
    KINDS,
    MAX_DEPTH,
    MAX_LINE_BYTES,
    BadRecord,
    Source,
    SourceError,
    SourceInfo,
)
from listhygiene.pipeline.sources.files import open_file

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "BadRecord",
    "Source",
    "SourceError",
    "SourceInfo",
    "open_source",
]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def open_source(
    source: "str | os.PathLike[str] | pd.DataFrame | pa.Table",
    *,
    table: str | None = None,
    query: str | None = None,
    kind: str | None = None,
    encoding: str | None = None,
) -> Source:
    """Open an input: a file path, a SQLAlchemy URL (with ``table`` or ``query``), or a table.

    ``kind`` overrides the file extension; ``encoding`` applies to text files (a byte-order mark
    still decides). Nothing but the first part of the input is read here; problems found then
    (missing file, unreadable format, empty input, bad SQL) are :class:`SourceError`.
    """
    if kind is not None and kind not in KINDS:
        raise SourceError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    frame = _as_table(source)
    if frame is not None:
        from listhygiene.pipeline.sources.tables import TableSource

        return TableSource(frame, name="<DataFrame>")
    if hasattr(source, "__arrow_c_stream__"):  # polars, DuckDB, ...: streamed, not via pandas
        from listhygiene.pipeline.sources.tables import StreamSource

        return StreamSource(source, name=f"<{type(source).__name__}>")
    if not isinstance(source, (str, os.PathLike)):
        raise SourceError(
            f"cannot read a {type(source).__name__}: give a path, a database URL, "
            "a pandas DataFrame, a pyarrow Table or a table with the Arrow C stream interface"
        )
    text = os.fspath(source)
    if kind != "sql" and _URL.match(text) and not text.startswith("file://"):
        from listhygiene.pipeline.sources.remote import open_remote
        from listhygiene.pipeline.storage import is_filesystem_url

        if is_filesystem_url(text):  # s3://, ...: docs/object-storage.md
            if table is not None or query is not None:
                raise SourceError(f"{text}: table= and query= apply to database URLs only")
            return open_remote(text, kind, encoding)
    if kind == "sql" or (kind is None and _URL.match(text) and not text.startswith("file://")):
        from listhygiene.pipeline.sources.snowflake import SnowflakeSource, is_snowflake_url

        if is_snowflake_url(text):  # the connector itself, not SQLAlchemy
            return SnowflakeSource(text, table=table, query=query)
        from listhygiene.pipeline.sources.sql import SqlSource

        return SqlSource(text, table=table, query=query)
    path = Path(text.removeprefix("file://"))
    if table is not None or query is not None:
        raise SourceError(f"{path}: table= and query= apply to database URLs only")
    return open_file(path, kind, encoding)


def _as_table(source: object) -> pa.Table | None:
    """An Arrow table for an in-memory source; None for anything else."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    pandas = sys.modules.get("pandas")  # a DataFrame means pandas is imported already
    if pandas is not None and isinstance(source, pandas.DataFrame):
        from listhygiene.pipeline.sources.tables import frame_to_table

        return frame_to_table(source)
    return None


# -- helpers shared by the readers ------------------------------------------------------------

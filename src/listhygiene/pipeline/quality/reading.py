"""What the checks read: the per-status output files, read back in bounded batches (or rows
already in memory), as the frames the GX expectations validate.

Every row is checked, in flat memory: the files are read in batches of at most
:data:`BATCH_ROWS` rows, only the checked columns (``status``, ``score``, the email's presence and
the row number), and small files share one batch. A SQL data source over the files (DuckDB
through duckdb-engine) would let GX see the whole table, but GX 1.24 reads its query results
after closing the connection, and DuckDB's results are gone by then: every metric fails
(docs/pipeline.md has the figures of both).

The row number of an output row is :data:`~listhygiene.pipeline.layout.ROW_COLUMN`
(``_source_row``, 1-based, as the Dagster status tables carry it), either a column of the file or
given beside it (``row_numbers``) when the published files do not carry it, as ``listhygiene
clean``'s do not.
"""

import os
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from listhygiene.pipeline.layout import ROW_COLUMN, STATUSES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.fs

#: Rows per GX validation: ~50 ms of GX's set-up per validation whatever its size, ~0.1 s and
#: ~80 MiB a batch of this size (docs/pipeline.md, "Every row, in flat memory").
BATCH_ROWS = 500_000

#: Columns of ``rows`` without which the checks cannot run (``email`` is checked, not required).
REQUIRED_COLUMNS: tuple[str, ...] = ("_row", "_file", "status", "score")

if TYPE_CHECKING:
    #: Row numbers given beside a status file, in the file's row order: the path of a Parquet
    #: file (its first column), or arrays (pyarrow or numpy) whose concatenation is the column.
    RowNumbers: TypeAlias = "str | os.PathLike[str] | Iterable[pa.Array | np.ndarray]"


def status_files(folder: str) -> dict[str, str]:
    """The seven per-status files of an output folder (a path on the caller's filesystem)."""
    return {status: f"{folder.rstrip('/')}/{status}.parquet" for status in STATUSES}


def _rows_frame(rows: "pd.DataFrame | pa.Table") -> "pd.DataFrame":
    """Only the checked columns, as pandas, with categorical (dictionary) text made plain."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        names = set(rows.column_names)
    elif isinstance(rows, pd.DataFrame):
        names = set(rows.columns)
    else:
        raise TypeError(f"rows must be a pandas DataFrame or a pyarrow Table, not {type(rows)}")
    missing = [column for column in REQUIRED_COLUMNS if column not in names]
    if missing:
        raise ValueError(
            f"rows lacks the column(s) {', '.join(missing)}; quality checks need "
            f"{', '.join(REQUIRED_COLUMNS)} and email"
        )
    columns = [*REQUIRED_COLUMNS, *(["email"] if "email" in names else [])]
    frame = rows.select(columns).to_pandas() if isinstance(rows, pa.Table) else rows[columns]
    frame = frame.reset_index(drop=True)
    for column in ("_file", "status"):
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype(str).where(frame[column].notna())
    return frame


def _empty_rows() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame(
        {
            "_row": pd.Series([], dtype="int64"),
            "_file": pd.Series([], dtype=str),
            "status": pd.Series([], dtype=str),
            "score": pd.Series([], dtype="float64"),
            "email": pd.Series([], dtype=str),
        }
    )


def _counts_frame(
    file_rows: Mapping[str, int | None], summary_rows: Mapping[str, int]
) -> "pd.DataFrame":
    """One row per status (and per stray name): the file's count and the summary's."""
    import pandas as pd

    for label, counts in (("file_rows", file_rows), ("summary_rows", summary_rows)):
        for name, count in counts.items():
            if count is not None and count < 0:
                raise ValueError(f"{label}[{name!r}] is negative: {count}")
    names = [*STATUSES, *sorted(set(file_rows).union(summary_rows).difference(STATUSES))]
    return pd.DataFrame(
        {
            "status": pd.Series(names, dtype=str),
            "file_rows": pd.Series([file_rows.get(n) for n in names], dtype="float64"),
            "summary_rows": pd.Series([summary_rows.get(n) for n in names], dtype="float64"),
        }
    )


def _open(path: str, filesystem: "pyarrow.fs.FileSystem | None") -> Any:
    import pyarrow.parquet as pq

    source = os.fspath(path)
    return pq.ParquetFile(filesystem.open_input_file(source) if filesystem is not None else source)


def _footer_rows(
    path: str, filesystem: "pyarrow.fs.FileSystem | None", opened: dict[str, Any] | None = None
) -> int | None:
    """The file's row count from its footer; None when the file is not there. The opened file
    is kept in ``opened`` for :func:`_file_batches`: opening costs ~8 µs a column in pyarrow's
    Python (0.08 s a file of 10,000 columns)."""
    try:
        parquet = _open(path, filesystem)
    except FileNotFoundError:
        return None
    if opened is not None:
        opened[path] = parquet
    return int(parquet.metadata.num_rows)


def _file_batches(
    name: str,
    path: str,
    filesystem: "pyarrow.fs.FileSystem | None",
    numbers: Any,
    batch_rows: int,
    opened: dict[str, Any] | None = None,
) -> "Iterator[pa.Table]":
    """The rows of one file as tables of the checked columns (``_row``, ``_file``, ``status``,
    ``score`` and ``email`` when the file has one), at most ``batch_rows`` rows each; the file
    taken from ``opened`` when :func:`_footer_rows` opened it."""
    import pyarrow as pa

    try:
        parquet = opened.pop(path) if opened and path in opened else _open(path, filesystem)
    except FileNotFoundError:
        return
    schema = parquet.schema_arrow
    names = {n: (f"result_{n}" if f"result_{n}" in schema.names else n) for n in _RESULT}
    for needed in ("status", "score"):
        if names[needed] not in schema.names:
            raise ValueError(f"{path}: the output file has no {needed} column")
    read = [names[n] for n in _RESULT if names[n] in schema.names]
    own = numbers is None and ROW_COLUMN in schema.names
    batches = parquet.iter_batches(batch_size=batch_rows, columns=read + ([ROW_COLUMN] * own))
    given = _number_chunks(numbers, filesystem, batch_rows) if numbers is not None else None
    pending: list[pa.Array] = []
    for batch in batches:
        size = batch.num_rows
        if own:
            row = batch.column(ROW_COLUMN)
        elif given is not None:
            row, pending = _take(pending, given, size)
        else:
            row = pa.nulls(size, pa.int64())
        columns = {
            "_row": _plain(row),
            "_file": pa.repeat(pa.scalar(name, pa.string()), size),
            "status": _plain(batch.column(names["status"])),
            "score": _plain(batch.column(names["score"])),
        }
        if names["email"] in schema.names:
            columns["email"] = _presence(batch.column(names["email"]))
        yield pa.table(columns)


_RESULT = ("status", "score", "email")


def _presence(values: "pa.Array") -> "pa.Array":
    """1 where there is a value, null where there is none: all the email check looks at, and
    a third of the checks' time saved (GX fingerprints every batch, long strings cost most)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pc.is_valid(values), pa.scalar(1, pa.int8()), pa.scalar(None, pa.int8()))


def _plain(array: "pa.Array") -> "pa.Array":
    """Dictionary-encoded text as plain text; other types as they are."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        return array.cast(array.type.value_type)
    return array


def _number_chunks(
    numbers: Any, filesystem: "pyarrow.fs.FileSystem | None", batch_rows: int
) -> "Iterator[pa.Array]":
    import pyarrow as pa

    if isinstance(numbers, str | os.PathLike):
        parquet = _open(os.fspath(numbers), filesystem)
        first = parquet.schema_arrow.names[0]
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=[first]):
            yield batch.column(0)
        return
    for chunk in numbers:
        yield chunk if isinstance(chunk, pa.Array | pa.ChunkedArray) else pa.array(chunk)


def _take(
    pending: "list[pa.Array]", chunks: "Iterator[pa.Array]", size: int
) -> "tuple[pa.Array, list[pa.Array]]":
    """``size`` row numbers from ``pending`` then ``chunks``; nulls when they run out."""
    import pyarrow as pa

    have = sum(len(p) for p in pending)
    while have < size:
        chunk = next(chunks, None)
        if chunk is None:
            pending.append(pa.nulls(size - have, pa.int64()))
            break
        chunk = pa.concat_arrays(chunk.chunks) if isinstance(chunk, pa.ChunkedArray) else chunk
        pending.append(chunk.cast(pa.int64()) if chunk.type != pa.int64() else chunk)
        have += len(chunk)
    joined = pa.concat_arrays(pending) if len(pending) > 1 else pending[0]
    return joined.slice(0, size), [joined.slice(size)]


def _rebatched(
    files: "Iterable[Iterator[pa.Table]]", batch_rows: int
) -> "Generator[pd.DataFrame, None, None]":
    """The files' tables gathered into frames of up to ``batch_rows`` rows (small files share
    one validation); tables of another schema start a new frame. The checks read them ahead
    (``read_ahead``: up to two beside the one validated), so that the next frame is decoded
    while GX validates this one."""
    import pyarrow as pa

    held: list[pa.Table] = []
    count = 0
    for tables in files:
        for table in tables:
            if held and (count + table.num_rows > batch_rows or table.schema != held[0].schema):
                yield pa.concat_tables(held).to_pandas()
                held, count = [], 0
            held.append(table)
            count += table.num_rows
    if held:
        yield pa.concat_tables(held).to_pandas()

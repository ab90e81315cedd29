"""Columnar inputs: Parquet files, pandas DataFrames and Arrow tables, in their own types.

These already have types, so nothing is turned into text: only a column of type null (all
empty) becomes string, and names are made unique, so that every batch has one schema. A
DataFrame's index is not a column, and neither is the ``__index_level_0__`` column pandas leaves
in a Parquet file written with a non-default index.
"""

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from listhygiene.errors import first_line
from listhygiene.pipeline.sources.base import Source, SourceError, SourceInfo
from listhygiene.pipeline.sources.batches import (
    as_text,
    conform,
    empty_batch,
    rebatch,
    settle_schema,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ParquetSource", "StreamSource", "TableSource", "frame_to_table"]

_PANDAS_INDEX = re.compile(r"^__index_level_\d+__$")


class ParquetSource(Source):
    """A Parquet file, read one record batch at a time."""

    rereadable = True

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self._path = path
        self.info = SourceInfo(kind="parquet", name=str(path))
        try:
            stored = pq.ParquetFile(path).schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"{path} is not a valid Parquet file: {first_line(exc)}") from None
        self._columns = [name for name in stored.names if not _PANDAS_INDEX.match(name)]
        if not self._columns:
            raise SourceError(f"{path} is empty (it has no columns)")
        self._schema = settle_schema(
            pa.schema([stored.field(stored.get_field_index(n)) for n in self._columns])
        )

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        pieces = self._read(rows)
        try:
            return pa.Table.from_batches([next(iter(rebatch(pieces, rows, self._schema)))])
        finally:
            pieces.close()

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        yield from rebatch(self._read(rows), rows, self._schema)

    def _read(self, rows: int) -> Generator[pa.RecordBatch, None, None]:
        import pyarrow.parquet as pq

        try:
            reader = pq.ParquetFile(self._path)
            for batch in reader.iter_batches(batch_size=rows, columns=self._columns):
                yield conform(batch, self._schema)
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"{self._path} cannot be read: {first_line(exc)}") from None


class TableSource(Source):
    """An in-memory table (from a DataFrame or given as Arrow)."""

    rereadable = True

    def __init__(self, table: pa.Table, *, name: str = "<DataFrame>") -> None:
        self.info = SourceInfo(kind="dataframe", name=name)
        if table.num_columns == 0:
            raise SourceError(f"{name} is empty (it has no columns)")
        self._schema = settle_schema(table.schema)
        self._table = conform(table, self._schema)

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        return self._table.slice(0, rows)

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        if self._table.num_rows == 0:
            yield empty_batch(self._schema)
            return
        yield from rebatch(self._table.to_batches(max_chunksize=rows), rows, self._schema)


class StreamSource(Source):
    """Any table that speaks the Arrow C stream interface (``__arrow_c_stream__``: a polars
    DataFrame or LazyFrame's collected frame, a DuckDB relation, a pyarrow RecordBatchReader),
    read batch by batch without converting through pandas or holding it whole.

    A stream is read once: the batches :meth:`sample` looks at are kept and given again first
    by :meth:`batches`, which may itself run only once."""

    def __init__(self, stream: object, *, name: str) -> None:
        try:
            self._reader = pa.RecordBatchReader.from_stream(stream)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SourceError(f"{name} cannot be read as an Arrow stream: {exc}") from None
        self.info = SourceInfo(kind="dataframe", name=name)
        if len(self._reader.schema) == 0:
            raise SourceError(f"{name} is empty (it has no columns)")
        # polars hands out string and binary views, which not every kernel takes: plain types
        self._schema = settle_schema(
            pa.schema([f.with_type(_without_views(f.type)) for f in self._reader.schema])
        )
        self._seen: list[pa.RecordBatch] = []
        self._rows_seen = 0
        self._exhausted = False
        self._read = False

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        while self._rows_seen < rows and not self._exhausted:
            self._pull()
        table = pa.Table.from_batches(self._seen, schema=self._schema)
        return table.slice(0, rows)

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        if self._read:
            raise SourceError(f"{self.info.name} is an Arrow stream, which can be read once")
        self._read = True
        yield from rebatch(self._rest(), rows, self._schema)

    def _pull(self) -> None:
        try:
            batch = self._reader.read_next_batch()
        except StopIteration:
            self._exhausted = True
            return
        except pa.ArrowException as exc:
            raise SourceError(f"{self.info.name} cannot be read: {exc}") from None
        batch = conform(batch, self._schema)
        assert isinstance(batch, pa.RecordBatch)
        self._seen.append(batch)
        self._rows_seen += batch.num_rows

    def _rest(self) -> Iterator[pa.RecordBatch]:
        seen, self._seen = self._seen, []
        yield from seen
        while not self._exhausted:
            self._pull()
            if self._seen:
                yield self._seen.pop()


def _without_views(arrow_type: pa.DataType) -> pa.DataType:
    if arrow_type == pa.string_view():
        return pa.large_string()
    if arrow_type == pa.binary_view():
        return pa.large_binary()
    if pa.types.is_list_view(arrow_type) or pa.types.is_large_list_view(arrow_type):
        return pa.large_list(_without_views(arrow_type.value_type))
    return arrow_type


def frame_to_table(frame: "pd.DataFrame") -> pa.Table:
    """A DataFrame as Arrow, index left out; a column of mixed Python objects becomes text."""
    frame = frame.copy(deep=False)
    frame.columns = [str(name) for name in frame.columns]
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError):
        pass  # duplicate names or mixed objects: column by column
    arrays = []
    for position in range(frame.shape[1]):
        series = frame.iloc[:, position]
        try:
            arrays.append(pa.array(series, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            values = [None if _missing(v) else as_text(v) for v in series.astype(object)]
            arrays.append(pa.array(values, pa.string()))
    return pa.Table.from_arrays(arrays, names=list(frame.columns))


def _missing(value: object) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or an array: not missing
        return False

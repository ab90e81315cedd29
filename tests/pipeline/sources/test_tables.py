"""Columnar inputs (``sources/tables.py``): Parquet files, DataFrames and Arrow tables, in their
own types."""

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.sources import SourceError, open_source
from tests.pipeline.sources.helpers import rows_of, write

# -- Parquet ---------------------------------------------------------------------------------------


def test_parquet_keeps_types_and_promotes_nulls(tmp_path: Path) -> None:
    table = pa.table(
        {
            "email": ["a@x.com", None, "c@z.com"],
            "age": pa.array([30, None, 41], pa.int32()),
            "nothing": pa.nulls(3),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=2)
    source = open_source(path)
    assert source.info.kind == "parquet"
    assert source.schema == pa.schema(
        [("email", pa.string()), ("age", pa.int32()), ("nothing", pa.string())]
    )
    assert rows_of(source, rows=2) == [
        {"email": "a@x.com", "age": 30, "nothing": None},
        {"email": None, "age": None, "nothing": None},
        {"email": "c@z.com", "age": 41, "nothing": None},
    ]
    assert source.sample(2).num_rows == 2


def test_parquet_from_pandas_has_no_index_column(tmp_path: Path) -> None:
    path = tmp_path / "p.pq"
    pd.DataFrame({"email": ["a@x.com", "b@y.com"]}, index=["r1", "r2"]).to_parquet(path)
    source = open_source(path)
    assert source.schema.names == ["email"]


def test_parquet_chunks(tmp_path: Path) -> None:
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"email": [f"u{i}@x.com" for i in range(1050)]}), path)
    batches = list(open_source(path).batches(rows=100))
    assert len(batches) == 11
    assert sum(b.num_rows for b in batches) == 1050


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.parquet", "email\na@x.com\n")
    with pytest.raises(SourceError, match="is not a valid Parquet file"):
        open_source(path)


# -- DataFrame, Arrow ------------------------------------------------------------------------------


def test_dataframe(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"Email": ["a@x.com", None, "c@z.com"], "n": [1, 2, 3], "mixed": [1, "two", None]},
        index=[10, 20, 30],
    )
    source = open_source(frame)
    assert source.info.kind == "dataframe"
    assert source.info.name == "<DataFrame>"
    assert source.schema.names == ["Email", "n", "mixed"]
    assert source.schema.field("n").type == pa.int64()
    assert rows_of(source, rows=2) == [
        {"Email": "a@x.com", "n": 1, "mixed": "1"},
        {"Email": None, "n": 2, "mixed": "two"},
        {"Email": "c@z.com", "n": 3, "mixed": None},
    ]
    assert source.sample(1).num_rows == 1


def test_dataframe_with_duplicate_and_non_string_names() -> None:
    frame = pd.DataFrame([["a@x.com", "b@y.com", 1]], columns=["email", "email", 0])
    source = open_source(frame)
    assert source.schema.names == ["email", "email_2", "0"]


def test_dataframe_without_columns_or_rows() -> None:
    with pytest.raises(SourceError, match="<DataFrame> is empty"):
        open_source(pd.DataFrame())
    source = open_source(pd.DataFrame({"email": pd.Series([], dtype=object)}))
    assert source.schema == pa.schema([("email", pa.string())])
    assert rows_of(source) == []


def test_arrow_table() -> None:
    table = pa.table({"email": ["a@x.com"] * 250, "empty": pa.nulls(250)})
    source = open_source(table)
    assert source.info.kind == "dataframe"
    assert source.schema == pa.schema([("email", pa.string()), ("empty", pa.string())])
    batches = list(source.batches(rows=100))
    assert [b.num_rows for b in batches] == [100, 100, 50]

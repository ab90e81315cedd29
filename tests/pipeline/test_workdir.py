"""The work folder's staged rows: cheap to write and to read back (docs/pipeline.md, "Speed")."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from listhygiene.pipeline.workdir import ADDRESS, ROW, WorkDir


def test_staged_rows_have_no_dictionaries_and_statistics_for_the_row_number_only(
    tmp_path: Path,
) -> None:
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    rows = pa.table(
        {
            "name": pa.array(["Ann", "Bob", "Ann"]),
            "score": pa.array([1.5, None, 3.0]),
            ROW: pa.array([1, 2, 3], pa.int64()),
            ADDRESS: pa.array(["ann@x.test", None, "ann@x.test"]),
        }
    )
    work.write_rows(0, rows)

    (part,) = (work.path / "rows").glob("part-*.parquet")
    assert pq.read_table(part).equals(rows)
    group = pq.ParquetFile(part).metadata.row_group(0)
    for index in range(group.num_columns):
        column = group.column(index)
        assert not column.has_dictionary_page, column.path_in_schema
        assert column.is_stats_set == (column.path_in_schema == ROW), column.path_in_schema


def test_staged_addresses_alone_are_written_too(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    rows = pa.table({ADDRESS: pa.array(["a@x.test"])})
    work.write_rows(3, rows)
    assert [t.to_pylist() for t in work.rows()] == [[{ADDRESS: "a@x.test"}]]

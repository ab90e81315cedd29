"""Tables that speak the Arrow C stream interface go in as they are: polars, DuckDB, pyarrow
readers, streamed batch by batch (issue 19, item 5)."""

from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import listhygiene
from listhygiene.engine import EngineSettings
from listhygiene.pipeline.sources import SourceError, open_source
from listhygiene.pipeline.sources.tables import StreamSource
from listhygiene.sandbox import Sandbox
from tests.conftest import engine_defaults, sandbox_settings

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "crm_export.csv"


def settings(sandbox: Sandbox) -> EngineSettings:
    return sandbox_settings(sandbox, **engine_defaults("dns_timeout", "smtp_timeout"))


def test_a_polars_frame_gives_what_its_csv_gives(mail_sandbox: Sandbox, tmp_path: Path) -> None:
    # the sample's cells as the CSV reader reads them (it has ragged records polars refuses)
    frame = pl.from_arrow(pa.Table.from_batches(list(open_source(SAMPLE).batches())))
    assert isinstance(frame, pl.DataFrame)
    from_file = listhygiene.clean(
        SAMPLE, tmp_path / "csv", settings=settings(mail_sandbox), check_smtp=False
    )
    assert isinstance(open_source(frame), StreamSource)
    result = listhygiene.clean(
        frame, tmp_path / "out", settings=settings(mail_sandbox), check_smtp=False
    )
    assert result.counts == from_file.counts
    assert result.summary["rows"]["total"] == frame.height


def test_a_duckdb_relation_goes_in_with_its_own_types(
    mail_sandbox: Sandbox, tmp_path: Path
) -> None:
    relation = duckdb.sql(
        "SELECT i AS id, 'user' || i || '@example.com' AS email FROM range(5) t(i)"
    )
    result = listhygiene.clean(
        relation, tmp_path / "out", settings=settings(mail_sandbox), check_smtp=False
    )
    assert result.summary["rows"]["total"] == 5
    rows = sorted(
        (int(i) for frame in result.frames.values() for i in frame["id"]),
    )
    assert rows == [0, 1, 2, 3, 4]  # integers stay integers


def test_a_reader_is_streamed_not_read_whole() -> None:
    pulled: list[int] = []
    schema = pa.schema([("email", pa.string())])

    def batches() -> Iterator[pa.RecordBatch]:
        for index in range(50):
            pulled.append(index)
            yield pa.record_batch([[f"u{index}.{n}@example.com" for n in range(100)]], schema)

    source = open_source(pa.RecordBatchReader.from_batches(schema, batches()))
    assert source.sample(150).num_rows == 150
    assert len(pulled) == 2  # the sample read what it needed, not the 50 batches
    rows = [batch.num_rows for batch in source.batches(rows=1000)]
    assert sum(rows) == 5000
    assert len(pulled) == 50
    with pytest.raises(SourceError, match="can be read once"):
        next(iter(source.batches()))


def test_something_that_is_no_table_is_one_clear_error() -> None:
    with pytest.raises(SourceError, match="Arrow C stream interface"):
        open_source(42)  # type: ignore[arg-type]

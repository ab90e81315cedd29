"""The generic shape: a table with ``email``, ``event``, ``at`` and optionally ``bounce_type``
(column names in any case), as CSV, Parquet, JSON lines, an in-memory table or a SQL table.

``event`` is one of ``delivered``, ``bounced``, ``complained``, ``clicked``, ``replied``,
``opened``, ``unsubscribed`` (any case); ``at`` is ISO 8601 (UTC when no zone is given) or Unix
seconds or milliseconds; ``bounce_type`` is ``hard`` or ``soft``. A table without a
``bounce_type`` column is one of hard bounces (a suppression list); with one, a bounce without
a kind is a bad row. Any other event name is a bad row.
"""

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.feedback.base import FeedbackInputError, Raw
from listhygiene.pipeline.feedback.records import csv_batches, json_records, kind_of

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COLUMNS", "detect", "read", "read_batches"]

#: The columns of the generic shape, the optional one last.
COLUMNS = ("email", "event", "at", "bounce_type")


def detect(sample: Mapping[str, Any] | list[str]) -> bool:
    return set(COLUMNS[:3]) <= {str(k).lower() for k in sample}


def read(path: Path) -> Iterator[Raw]:
    kind = kind_of(path)
    if kind == "csv":
        malformed = [0]
        for raw in read_batches(csv_batches(path, malformed), str(path)):
            raw.malformed, malformed[0] = malformed[0], 0
            yield raw
    elif kind == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as file:
            yield from read_batches(file.iter_batches(batch_size=65_536), str(path))
    else:
        import pyarrow as pa

        records = list(json_records(path))
        yield from read_batches(pa.Table.from_pylist(records).to_batches(), str(path))


def read_batches(batches: Iterable["pa.RecordBatch"], name: str) -> Iterator[Raw]:
    """Raw events of record batches in the generic shape."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for batch in batches:
        names = {n.lower(): n for n in batch.schema.names}
        missing = [c for c in COLUMNS[:3] if c not in names]
        if missing:
            raise FeedbackInputError(
                f"{name} has no {', '.join(missing)} column (the generic shape is "
                f"{', '.join(COLUMNS[:3])}[, bounce_type])"
            )
        events = pc.utf8_lower(
            pc.utf8_trim_whitespace(pc.cast(batch.column(names["event"]), pa.string()))
        )
        if "bounce_type" in names:
            bounce = pc.cast(batch.column(names["bounce_type"]), pa.string())
            bounce = pc.if_else(
                pc.equal(pc.utf8_trim_whitespace(bounce), ""), pa.scalar(None, pa.string()), bounce
            )
        else:
            bounce = pa.repeat(pa.scalar("hard"), batch.num_rows)
        at = batch.column(names["at"])
        if pa.types.is_timestamp(at.type):
            at = pc.divide(
                pc.cast(pc.cast(at, pa.timestamp("us", tz="UTC")), pa.int64()), 1_000_000.0
            )
        raw = Raw(
            address=batch.column(names["email"]).to_pylist(),
            event=[e if e is not None else "?" for e in events.to_pylist()],
            at=at.to_pylist(),
            bounce=pc.utf8_trim_whitespace(bounce).to_pylist(),
        )
        yield raw

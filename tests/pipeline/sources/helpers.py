"""What the readers' tests share: a source's rows, one column of them, and text written in
an encoding."""

from pathlib import Path

from listhygiene.pipeline.sources import Source


def rows_of(source: Source, rows: int = 65_536) -> list[dict[str, object]]:
    batches = list(source.batches(rows))
    assert all(batch.schema == source.schema for batch in batches)
    return [row for batch in batches for row in batch.to_pylist()]


def column(source: Source, name: str) -> list[object]:
    return [row[name] for row in rows_of(source)]


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path

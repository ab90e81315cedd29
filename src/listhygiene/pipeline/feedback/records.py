"""Records of a JSON export: a JSON array, an object holding the array (Mailgun's ``items``,
Postmark's ``Bounces``), one object, or JSON lines (one object a line, read a block at a time,
as webhook payloads are usually kept). CSV files are read by Arrow in blocks
(:func:`csv_batches`), every column as text."""

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.feedback.base import BATCH, FeedbackInputError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["csv_batches", "json_records", "kind_of", "sniff"]

#: Keys under which an export object holds its records.
_LISTS = ("items", "Bounces", "Messages", "events", "Records", "results", "data")


def kind_of(path: Path) -> str:
    """``json``, ``csv`` or ``parquet``, from the name, else from the first byte."""
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl", ".ndjson"):
        return "json"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv", ".txt"):
        return "csv"
    with path.open("rb") as file:
        head = file.read(4)
    if head == b"PAR1":
        return "parquet"
    return "json" if head.lstrip()[:1] in (b"[", b"{") else "csv"


def sniff(path: Path) -> dict[str, Any] | list[str]:
    """The first record of a JSON file, or the header of a CSV file (for format detection)."""
    kind = kind_of(path)
    if kind == "json":
        for record in json_records(path):
            return record
        return {}
    if kind == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    for batch in csv_batches(path):
        return list(batch.schema.names)
    return []


def json_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every record (a JSON object) of ``path``; a line or a document that is no JSON ends the
    reading with :class:`FeedbackInputError`, naming it."""
    with path.open("rb") as file:
        first = file.read(1)
        while first and first.isspace():
            first = file.read(1)
        file.seek(0)
        if first == b"[":
            yield from _unpacked(_load(path, file.read()))
            return
        # an object alone, or JSON lines: read the first line and decide
        lines = iter(file)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == 1:  # one document over several lines
                    file.seek(0)
                    yield from _unpacked(_load(path, file.read()))
                    return
                raise FeedbackInputError(f"{path}: line {number} is not JSON") from None
            yield from _unpacked(record)
            for more in _blocks(lines, number):
                yield from more


def _blocks(lines: Iterator[bytes], number: int) -> Iterator[list[dict[str, Any]]]:
    while True:
        block = list(islice(lines, BATCH))
        if not block:
            return
        records: list[dict[str, Any]] = []
        for offset, line in enumerate(block, 1):
            if line.strip():
                try:
                    records.extend(_unpacked(json.loads(line)))
                except json.JSONDecodeError:
                    raise FeedbackInputError(f"line {number + offset} is not JSON") from None
        number += len(block)
        yield records


def _load(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FeedbackInputError(f"{path} is not JSON: {exc}") from None


def _unpacked(value: Any) -> list[dict[str, Any]]:
    """The records a JSON value holds."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    if isinstance(value, dict):
        for key in _LISTS:
            if isinstance(value.get(key), list):
                return [v for v in value[key] if isinstance(v, dict)]
        return [value]
    return []


def csv_batches(path: Path, malformed: list[int] | None = None) -> Iterator["pa.RecordBatch"]:
    """The CSV file's record batches, every column as text; a row with the wrong number of
    fields is skipped and counted in ``malformed[0]``."""
    import pyarrow as pa
    import pyarrow.csv as csv

    try:
        names = csv.open_csv(
            path,
            read_options=csv.ReadOptions(block_size=1 << 16),
            parse_options=csv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=lambda _row: "skip"
            ),
        ).schema.names
        reader = csv.open_csv(
            path,
            read_options=csv.ReadOptions(block_size=1 << 22),
            convert_options=csv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=True
            ),
            parse_options=csv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=lambda _row: _skip(malformed)
            ),
        )
    except pa.ArrowInvalid as exc:
        raise FeedbackInputError(f"{path} is not a CSV file Arrow can read: {exc}") from None
    try:
        yield from reader
    except pa.ArrowInvalid as exc:
        raise FeedbackInputError(f"{path}: {exc}") from None


def _skip(malformed: list[int] | None) -> str:
    if malformed is not None:
        malformed[0] += 1
    return "skip"

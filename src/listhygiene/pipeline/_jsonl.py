"""JSON lines: one object per line, read in blocks by pyarrow.json, a broken line kept as a row.

The columns are the keys of the objects in the first MiB (at most 1,000 lines), in the order
they first appear, with the types their values have there (strings when all null or mixed; a
nested object or array is kept as its JSON text). A key first seen further down is not a
column: the schema is fixed before the first batch, and a second pass over a big file to look
for stray keys would double the reading time.

A block is parsed by ``pyarrow.json`` against that schema. When pyarrow refuses a block (a line
that is not JSON, not an object, or a value that does not fit its column), that block is read
line by line instead: a line that is not a JSON object becomes a row of nulls, and a value that
does not fit its column's type becomes null; both are reported as bad records. A blank line is
not a row.

A ``.json`` file is read this way only when it is JSON lines; a JSON document (an array, a
pretty-printed object) is refused with a message saying so.
"""

import json
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

from listhygiene.pipeline._delimited import has_content, next_chunk, whole_lines
from listhygiene.pipeline._encoding import open_text
from listhygiene.pipeline.sources import (
    BadRecord,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    infer_type,
    rebatch,
    unique_names,
    values_to_array,
)

__all__ = ["JsonlSource"]

_HEAD = 1 << 20
_SAMPLE_LINES = 1000
_MIN_CHUNK = 1 << 20
_MAX_CHUNK = 32 << 20


class JsonlSource(Source):
    """A JSON-lines file."""

    def __init__(
        self, path: Path, *, encoding: str | None = None, require_lines: bool = False
    ) -> None:
        self._text = open_text(path, encoding)
        self.info = SourceInfo(kind="jsonl", name=str(path), encoding=self._text.encoding)
        if not has_content(self._text):
            raise SourceError(f"{path} is empty")
        head = self._text.read_head(_HEAD)
        lines = [
            line
            for line in whole_lines(head, at_end=len(head) < _HEAD).decode("utf-8").split("\n")
            if line.strip()
        ][:_SAMPLE_LINES]
        objects = [_object(line)[0] for line in lines]
        if require_lines and (not lines or objects[0] is None):
            raise SourceError(
                f"{path} is not JSON lines (one JSON object per line); "
                "save it as JSON lines (.jsonl), CSV or Parquet"
            )
        self._keys: list[str] = list(dict.fromkeys(k for o in objects if o for k in o))
        if not self._keys:
            raise SourceError(f"{path} has no JSON object with fields in its first lines")
        types = [infer_type([o.get(k) for o in objects if o is not None]) for k in self._keys]
        self._schema = pa.schema(
            [pa.field(n, t) for n, t in zip(unique_names(self._keys), types, strict=True)]
        )
        self._parse_schema = pa.schema(
            [pa.field(k, t) for k, t in zip(self._keys, types, strict=True)]
        )
        self._bytes_per_row = max(16, len(head) // max(1, head.count(b"\n")))

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        pieces = self._read(_MIN_CHUNK, [])
        try:
            return pa.Table.from_batches([next(iter(rebatch(pieces, rows, self._schema)))])
        finally:
            pieces.close()

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        chunk = min(_MAX_CHUNK, max(_MIN_CHUNK, rows * self._bytes_per_row * 5 // 4))
        yield from rebatch(self._read(chunk, self.info.bad_records), rows, self._schema)

    def _read(self, chunk_size: int, bad: list[BadRecord]) -> Generator[pa.Table, None, None]:
        emitted = 0
        position = self._text.start
        with self._text.path.open("rb") as file:
            while chunk := next_chunk(file, position, chunk_size, quotes=False):
                position += len(chunk)
                table = self._parse_with_arrow(chunk)
                if table is None:
                    table = self._parse_lines(chunk, emitted, bad)
                emitted += table.num_rows
                yield table

    def _parse_with_arrow(self, chunk: bytes) -> pa.Table | None:
        try:
            table = pajson.read_json(
                pa.BufferReader(chunk),
                read_options=pajson.ReadOptions(block_size=len(chunk) + 1),
                parse_options=pajson.ParseOptions(
                    explicit_schema=self._parse_schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        return pa.Table.from_arrays([table.column(key) for key in self._keys], schema=self._schema)

    def _parse_lines(self, chunk: bytes, emitted: int, bad: list[BadRecord]) -> pa.Table:
        objects: list[dict[str, Any]] = []
        problems: dict[int, list[str]] = {}
        texts: list[str] = []
        for line in chunk.decode("utf-8").split("\n"):
            if not line.strip():
                continue
            found, problem = _object(line)
            if problem is not None:
                problems[len(objects)] = [problem]
            objects.append(found or {})
            texts.append(line.rstrip("\r"))
        columns = []
        for key, field in zip(self._keys, self._schema, strict=True):
            values, refused = values_to_array([o.get(key) for o in objects], field.type)
            columns.append(values)
            for index in refused:
                problems.setdefault(index, []).append(f"field {key!r} is not {field.type}")
        for index in sorted(problems):
            bad.append(bad_record(emitted + index + 1, "; ".join(problems[index]), texts[index]))
        return pa.Table.from_arrays(columns, schema=self._schema)


def _object(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """The line's object, or None and what is wrong with it."""
    try:
        value = json.loads(line)
    except ValueError:
        return None, "invalid JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, None

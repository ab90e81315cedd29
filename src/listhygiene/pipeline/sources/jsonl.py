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

Bounds (docs/pipeline.md, "Reading"): a line longer than ``MAX_LINE_BYTES``, or a value nested
deeper than ``MAX_DEPTH`` levels, refuses the file with a :class:`SourceError` naming the line.
The depth is checked on every block *before* pyarrow parses it: pyarrow's JSON reader crashes
the process (a stack overflow) on a value nested some ten thousand levels deep, and Python's
``json`` raises ``RecursionError`` from about a thousand. The check is vectorised: only a line
holding more than ``MAX_DEPTH`` opening brackets at all is measured, its strings left out.
"""

import json
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from listhygiene.pipeline.sources.base import (
    MAX_DEPTH,
    BadRecord,
    LineTooLong,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    line_too_long,
    unique_names,
)
from listhygiene.pipeline.sources.batches import infer_type, rebatch, values_to_array
from listhygiene.pipeline.sources.lines import (
    check_first_line,
    has_content,
    next_chunk,
    whole_lines,
)
from listhygiene.pipeline.sources.text import open_text

__all__ = ["JsonlSource"]

_HEAD = 1 << 20
_SAMPLE_LINES = 1000
_MIN_CHUNK = 1 << 20
_MAX_CHUNK = 32 << 20
#: A JSON string, escapes included (its brackets are text, not nesting).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


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
        check_first_line(head, _HEAD, path, self._text.start)
        sampled = whole_lines(head, at_end=len(head) < _HEAD)
        self._check_depth(sampled, 1)
        lines = [line for line in sampled.decode("utf-8").split("\n") if line.strip()][
            :_SAMPLE_LINES
        ]
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
        line = 1
        position = self._text.start
        with self._text.path.open("rb") as file:
            while chunk := self._next(file, position, chunk_size):
                position += len(chunk)
                self._check_depth(chunk, line)
                line += chunk.count(b"\n")
                table = self._parse_with_arrow(chunk)
                if table is None:
                    table = self._parse_lines(chunk, emitted, bad)
                emitted += table.num_rows
                yield table

    def _next(self, file: Any, position: int, size: int) -> bytes:
        try:
            return next_chunk(file, position, size, quotes=False)
        except LineTooLong as exc:
            raise line_too_long(self.info.name, exc.offset) from None

    def _check_depth(self, chunk: bytes, first_line: int) -> None:
        """Refuse the input when a line of ``chunk`` (whose first line is ``first_line`` of the
        file) nests deeper than ``MAX_DEPTH``."""
        if chunk.count(b"[") + chunk.count(b"{") <= MAX_DEPTH:
            return
        data = np.frombuffer(chunk, dtype=np.uint8)
        opens = np.flatnonzero((data == 0x5B) | (data == 0x7B))  # memory: one index a bracket
        starts = np.concatenate(([0], np.flatnonzero(data == 0x0A) + 1, [len(chunk)]))
        per_line = np.diff(np.searchsorted(opens, starts))
        for index in np.flatnonzero(per_line > MAX_DEPTH).tolist():
            if _depth(chunk[starts[index] : starts[index + 1]]) > MAX_DEPTH:
                raise SourceError(
                    f"{self.info.name}: line {first_line + index} holds a value nested deeper "
                    f"than {MAX_DEPTH} levels (the most a value may nest)"
                )

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


def _depth(line: bytes) -> int:
    """How deep a line's JSON nests, strings left out (an unterminated string's brackets count)."""
    brackets = np.frombuffer(_STRING.sub(b"", line).translate(None, _NOT_BRACKETS), np.uint8)
    if not len(brackets):
        return 0
    steps = np.where((brackets == 0x5B) | (brackets == 0x7B), 1, -1)
    return int(np.cumsum(steps).max())


def _object(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """The line's object, or None and what is wrong with it."""
    try:
        value = json.loads(line)
    except ValueError:
        return None, "invalid JSON"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, None

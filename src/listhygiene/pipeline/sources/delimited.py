"""CSV and TXT files: pyarrow's CSV parser on chunks cut at record ends, every broken record kept.

pyarrow parses a million-row CSV in a fraction of a second, but its streaming reader cannot say
where in the file a record starts, so a record it cannot make sense of (an unterminated quote
that swallows the lines after it) could be neither repaired nor stepped over. Hence chunks of our
own, whose byte offsets we know:

1. The text (UTF-8, see ``text.py``) is cut into chunks of a few MiB at a line end before
   which the chunk holds an even number of quote characters, that is outside any quoted field;
   when there is no such line end, at the last one.
2. Each chunk goes to ``pyarrow.csv.read_csv`` (every column a string, quoted values may hold
   newlines) on one thread, so that its ``invalid_row_handler`` is told record numbers. A record
   with too many or too few fields is skipped by pyarrow, parsed again here, fitted (missing
   fields null; extra ones joined with the delimiter into the last column, or into the column
   where the row then looks like the chunk's good rows: an unquoted ``Proseware, Inc.`` stays
   the company and the address after it stays in the Email column), put back in its place and
   reported as a bad record.
3. A record that spans lines may be a quote that never ends, swallowing the lines after it:
   pyarrow reads both alike. So a chunk holding any multi-line record is scanned with Python's
   ``csv`` module in strict mode up to the last such record. A quoted field that does not end
   properly (end of data, a quote followed by other text, a record over 1 MiB,
   ``MAX_LINE_BYTES``) is an
   unterminated quote: its first line is kept as one row (bad record "unterminated quote", the
   rest of that line split at the delimiter), and the rest of the chunk is read by the scanner
   from the next line on, so every line after it is its own record again. A record that the
   chunk's end cuts short is left to the next chunk.
4. Should pyarrow refuse a chunk for any other reason, the Python scanner reads that chunk.

No line may be longer than ``MAX_LINE_BYTES`` (1 MiB): a longer one (a file of one huge line,
a binary file) stops the reading with a :class:`SourceError`, after reading at most a chunk past
the limit, never the whole line (docs/pipeline.md, "Reading").

A file without multi-line values never leaves pyarrow; one full of them is read at the Python
scanner's pace (a few seconds per million rows). Blank lines are not records, and neither is a
line of spaces in a table of several columns. An unterminated quote closed by a later quote
that is followed by a delimiter, so that the strict reading succeeds, is taken as a legitimate
multi-line value: nothing can tell the two apart.

A TXT file is one address per line, in a column named ``email``; a line that is empty after
trimming is not a row (PRODUCT.md).
"""

import csv
import itertools
import math
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from listhygiene.email_cells import trim_invisible
from listhygiene.pipeline.sources.base import (
    MAX_LINE_BYTES,
    BadRecord,
    LineTooLong,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    line_too_long,
    unique_names,
)
from listhygiene.pipeline.sources.batches import (
    empty_batch,
    rebatch,
    rebatched_ahead,
    string_schema,
)
from listhygiene.pipeline.sources.lines import (
    HEAD,
    check_first_line,
    has_content,
    next_chunk,
    whole_lines,
)
from listhygiene.pipeline.sources.text import open_text

__all__ = [
    "UNTERMINATED",
    "CsvSource",
    "TxtSource",
    "sniff_delimiter",
]

UNTERMINATED = "unterminated quote"
_DELIMITERS = ",;\t|"
_SNIFF_LINES = 50
_MIN_CHUNK = 256 << 10
_MAX_CHUNK = 32 << 20
#: Columns x chunk bytes one pyarrow parse may take. Its CSV parser sizes each column's buffers
#: from the whole chunk (about 0.65 of its bytes a column, reserved up front), so a chunk of a
#: wide file reserves columns x chunk: 10,000 columns reserve 10 GB of address space for a
#: 1.5 MB file, which the service's parse cap refuses. Past this product, chunks are made
#: narrower, and for a file too wide for even the smallest chunk, Python's csv module parses
#: (its cost is the cells; docs/pipeline.md, "Reading").
_ARROW_SPAN = 768 << 20
#: A record spanning lines is not allowed past this size: it is an unterminated quote.
_RECORD_LIMIT = MAX_LINE_BYTES

#: Bad records of a chunk: (row index in the chunk's table, problem, raw text).
_Problems = list[tuple[int, str, str]]


class CsvSource(Source):
    """A delimited text file: header first, every column a string."""

    def __init__(self, path: Path, *, encoding: str | None = None) -> None:
        self._text = open_text(path, encoding)
        head = self._text.read_head(HEAD)
        check_first_line(head, HEAD, path, self._text.start)
        self._delimiter = sniff_delimiter(head.decode("utf-8", errors="ignore"))
        self.info = SourceInfo(
            kind="csv", name=str(path), encoding=self._text.encoding, delimiter=self._delimiter
        )
        header = _first_record(whole_lines(head, at_end=len(head) < HEAD), self._delimiter)
        if header is None:
            raise SourceError(f"{path} is empty")
        self._names = unique_names(header.fields)
        self._schema = string_schema(self._names)
        self._data_start = self._text.start + header.end
        body = head[header.end :]
        self._bytes_per_row = max(16, len(body) // max(1, body.count(b"\n")))

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        return _first_rows(self._read(HEAD, []), rows, self._schema)

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        chunk = min(_MAX_CHUNK, max(_MIN_CHUNK, rows * self._bytes_per_row * 5 // 4))
        chunk = min(chunk, max(_MIN_CHUNK, _ARROW_SPAN // len(self._names)))
        yield from rebatched_ahead(self._read(chunk, self.info.bad_records), rows, self._schema)

    # -- reading ---------------------------------------------------------------------------------

    def _read(self, chunk_size: int, bad: list[BadRecord]) -> Generator[pa.Table, None, None]:
        emitted = 0
        position = self._data_start
        with self._text.path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            while chunk := self._next(file, position, chunk_size, quotes=True):
                at_end = position + len(chunk) >= size
                table, problems, used = self._parse_chunk(chunk, at_end)
                bad.extend(bad_record(emitted + i + 1, what, text) for i, what, text in problems)
                emitted += table.num_rows
                position += used
                yield table

    def _next(self, file: BinaryIO, position: int, size: int, *, quotes: bool) -> bytes:
        try:
            return next_chunk(file, position, size, quotes=quotes)
        except LineTooLong as exc:
            raise line_too_long(self.info.name, exc.offset) from None

    def _parse_chunk(self, chunk: bytes, at_end: bool) -> tuple[pa.Table, _Problems, int]:
        """The chunk's rows, its bad records (row index, problem, text), and the bytes used."""
        if len(self._names) * len(chunk) > _ARROW_SPAN:  # too wide for pyarrow's parser
            return self._parse_with_python(
                _scan(chunk, self._delimiter), len(chunk), at_end, _Shapes(None)
            )
        try:
            table, skipped = self._parse_with_arrow(chunk)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            records = _scan(chunk, self._delimiter)
            return self._parse_with_python(records, len(chunk), at_end, _Shapes(None))
        shapes = _Shapes(table)
        last = self._last_multiline(table, skipped) if b'"' in chunk else 0
        if last:
            records = _scan(chunk, self._delimiter)
            for record in records:
                if record.number > last:
                    break
                if record.problem == UNTERMINATED:  # the rest of the chunk is read here
                    head, problems = self._merge(table, skipped, record.number, shapes)
                    tail, more, used = self._parse_with_python(
                        itertools.chain([record], records), len(chunk), at_end, shapes
                    )
                    problems += [(head.num_rows + i, what, text) for i, what, text in more]
                    return pa.concat_tables([head, tail]), problems, used
        table, problems = self._merge(table, skipped, None, shapes)
        return table, problems, len(chunk)

    def _parse_with_arrow(self, chunk: bytes) -> tuple[pa.Table, list[tuple[int, int, str]]]:
        skipped: list[tuple[int, int, str]] = []

        def keep_aside(row: pacsv.InvalidRow) -> str:
            skipped.append((row.number, row.actual_columns, row.text))
            return "skip"

        table = pacsv.read_csv(
            pa.py_buffer(chunk),
            read_options=pacsv.ReadOptions(
                column_names=self._names, use_threads=False, block_size=len(chunk) + 1
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=self._delimiter,
                newlines_in_values=True,
                invalid_row_handler=keep_aside,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(self._names, pa.string())
            ),
        )
        if any(number is None for number, _, _ in skipped):  # cannot place them
            raise pa.ArrowInvalid("invalid rows without numbers")
        return table, skipped

    def _parse_with_python(
        self, records: Iterator["_Record"], size: int, at_end: bool, shapes: "_Shapes"
    ) -> tuple[pa.Table, _Problems, int]:
        """Rows of scanned records; a record cut by the chunk's end is left to the next chunk."""
        rows: list[list[str | None]] = []
        problems: _Problems = []
        used = size
        for record in records:
            if record.open_end and record.start > 0 and not at_end:
                used = record.start
                break
            if self._is_blank(record.fields):
                continue
            problem = record.problem
            if problem is None and len(record.fields) != len(self._names):
                problem = self._count_problem(len(record.fields))
            if problem is not None:
                problems.append((len(rows), problem, record.text))
            rows.append(self._fit(record.fields, shapes))
        return self._rows_table(rows), problems, used

    def _last_multiline(self, table: pa.Table, skipped: list[tuple[int, int, str]]) -> int:
        """The number of the chunk's last record that spans lines (0 when none does).

        Such a record may be a quote that never ends, swallowing the lines after it; only the
        strict scan can tell (pyarrow reads the two alike).
        """
        last = max(
            (number for number, _, text in skipped if "\n" in text or "\r" in text), default=0
        )
        for column in table.columns:
            if not _holds_line_break(column):
                continue
            multiline = pc.match_substring_regex(column, r"[\r\n]").to_numpy(zero_copy_only=False)
            indexes = np.flatnonzero(multiline)
            if len(indexes):
                last = max(last, _record_number(int(indexes[-1]), skipped))
        return last

    def _merge(
        self,
        table: pa.Table,
        skipped: list[tuple[int, int, str]],
        limit: int | None,
        shapes: "_Shapes",
    ) -> tuple[pa.Table, _Problems]:
        """pyarrow's good rows with the skipped records put back in place (numbers < limit)."""
        if limit is not None:
            skipped = [s for s in skipped if s[0] < limit]
            total = limit - 1
        else:
            total = table.num_rows + len(skipped)
        good = table.slice(0, total - len(skipped))
        if not skipped:
            return good, []
        rows: list[list[str | None]] = []
        problems: list[str | None] = []
        for _, actual, text in skipped:
            fields, unterminated = _split_line(text, self._delimiter)
            if self._is_blank(fields):
                rows.append([None] * len(self._names))
                problems.append(None)
                continue
            rows.append(self._fit(fields, shapes))
            problems.append(UNTERMINATED if unterminated else self._count_problem(actual))
        numbers = np.array([number for number, _, _ in skipped], dtype=np.int64)
        blank = np.array([problem is None for problem in problems], dtype=bool)
        is_bad = np.zeros(total, dtype=bool)
        is_bad[numbers - 1] = True
        order = np.empty(total, dtype=np.int64)
        order[~is_bad] = np.arange(good.num_rows)
        order[is_bad] = good.num_rows + np.arange(len(skipped))
        keep = np.ones(total, dtype=bool)
        keep[numbers[blank] - 1] = False
        merged = pa.concat_tables([good, self._rows_table(rows)]).take(pa.array(order[keep]))
        positions = np.flatnonzero(is_bad[keep])
        kept = [(text, p) for (_, _, text), p in zip(skipped, problems, strict=True) if p]
        return merged, [
            (int(at), problem, text) for at, (text, problem) in zip(positions, kept, strict=True)
        ]

    def _fit(self, fields: list[str], shapes: "_Shapes") -> list[str | None]:
        """Exactly one value per column: missing fields null at the end; extra fields joined.

        Extra fields are joined (with the delimiter) into the last column, unless joining them
        into another column makes the row fit what the chunk's good rows hold: an unquoted
        ``Proseware, Inc.`` in a Company column then stays the company, and the address after
        it stays in the Email column.
        """
        width = len(self._names)
        if len(fields) <= width:
            return [*fields, *([None] * (width - len(fields)))]
        extra = len(fields) - width
        delimiter = self._delimiter
        placements: list[list[str]] = [
            [*fields[:at], delimiter.join(fields[at : at + extra + 1]), *fields[at + extra + 1 :]]
            for at in range(width)
        ]
        best = max(reversed(placements), key=shapes.fit)  # max keeps the first: the last column
        cells: list[str | None] = list(best)
        return cells

    def _is_blank(self, fields: list[str]) -> bool:
        """A line of spaces in a table of several columns: not a record."""
        return len(self._names) > 1 and len(fields) <= 1 and not "".join(fields).strip()

    def _count_problem(self, found: int) -> str:
        return f"expected {len(self._names)} fields, found {found}"

    def _rows_table(self, rows: list[list[str | None]]) -> pa.Table:
        """The rows as columns: one Arrow array of every cell, column after column, sliced
        (an array per column cost 37 µs each: 0.4 s a chunk at 10,000 columns)."""
        if not rows:
            return self._schema.empty_table()
        count = len(rows)
        cells = pa.array(list(itertools.chain.from_iterable(zip(*rows, strict=True))), pa.string())
        columns = [cells.slice(i * count, count) for i in range(len(self._names))]
        return pa.Table.from_arrays(columns, schema=self._schema)


class TxtSource(Source):
    """One address per line; blank lines are not rows."""

    _SCHEMA = string_schema(["email"])

    def __init__(self, path: Path, *, encoding: str | None = None) -> None:
        self._text = open_text(path, encoding)
        if not has_content(self._text):
            raise SourceError(f"{path} is empty")
        self.info = SourceInfo(kind="txt", name=str(path), encoding=self._text.encoding)

    @property
    def schema(self) -> pa.Schema:
        return self._SCHEMA

    def sample(self, rows: int = 1000) -> pa.Table:
        return _first_rows(self._read(HEAD), rows, self._SCHEMA)

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        chunk = min(_MAX_CHUNK, max(_MIN_CHUNK, rows * 64))
        yield from rebatch(self._read(chunk), rows, self._SCHEMA)

    def _next(self, file: BinaryIO, position: int, size: int) -> bytes:
        try:
            return next_chunk(file, position, size, quotes=False)
        except LineTooLong as exc:
            raise line_too_long(self.info.name, exc.offset) from None

    def _read(self, chunk_size: int) -> Generator[pa.Table, None, None]:
        position = self._text.start
        with self._text.path.open("rb") as file:
            while chunk := self._next(file, position, chunk_size):
                position += len(chunk)
                text = chunk.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
                lines = pa.array(text.split("\n"), pa.string())
                keep = pc.not_equal(trim_invisible(lines), "")
                yield pa.Table.from_arrays([lines.filter(keep)], schema=self._SCHEMA)


# -- delimiter and header ----------------------------------------------------------------------


def sniff_delimiter(text: str) -> str:
    """The delimiter among ``, ; tab |``: csv.Sniffer on the first lines, else by counting.

    The sniffer's answer stands only if the header line holds it (or holds none of them); a
    file with a single column is comma-separated.
    """
    lines = [line for line in text.splitlines()[:_SNIFF_LINES] if line.strip()]
    if not lines:
        return ","
    header = lines[0]
    if not any(d in header for d in _DELIMITERS):
        return ","
    try:
        found = csv.Sniffer().sniff("\n".join(lines), delimiters=_DELIMITERS).delimiter
    except csv.Error:
        found = None
    if found is not None and found in header:
        return found
    return _count_delimiter(lines)


def _count_delimiter(lines: list[str]) -> str:
    """The delimiter the header holds that most other lines hold as often."""
    best, best_score = ",", (-1, -1)
    for candidate in _DELIMITERS:
        in_header = _field_count(lines[0], candidate) - 1
        if in_header == 0:
            continue
        same = sum(_field_count(line, candidate) - 1 == in_header for line in lines[1:])
        if (same, in_header) > best_score:
            best, best_score = candidate, (same, in_header)
    return best


def _field_count(line: str, delimiter: str) -> int:
    try:
        return len(next(csv.reader([line], delimiter=delimiter), []))
    except csv.Error:
        return line.count(delimiter) + 1


def _first_record(data: bytes, delimiter: str) -> "_Record | None":
    """The first record that is not blank (the header); None when there is none."""
    for record in _scan(data, delimiter):
        if record.text.strip():
            return record
    return None


def _first_rows(pieces: Generator[pa.Table, None, None], rows: int, schema: pa.Schema) -> pa.Table:
    """The first ``rows`` rows of a reading, which is then closed."""
    taken: list[pa.Table] = []
    count = 0
    try:
        for piece in pieces:
            taken.append(piece.slice(0, rows - count))
            count += taken[-1].num_rows
            if count >= rows:
                break
    finally:
        pieces.close()
    if not taken:
        return pa.Table.from_batches([empty_batch(schema)])
    return pa.concat_tables(taken)


# -- chunks -------------------------------------------------------------------------------------


# -- fitting a record with too many fields ----------------------------------------------------


class _Shapes:
    """What the cells of each column look like in a chunk's good rows (its first 1,000)."""

    _KINDS = (
        ("empty", re.compile(r"\s*")),
        ("address", re.compile(r"\s*[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+\s*")),
        ("date", re.compile(r"\s*\d{4}-\d{2}-\d{2}.*")),
        ("number", re.compile(r"[\s\d()+./-]*\d[\s\d()+./-]*")),
    )
    _ROWS = 1000

    def __init__(self, table: pa.Table | None) -> None:
        self._table = table
        self._shares: list[dict[str, float]] | None = None

    def fit(self, cells: list[str]) -> float:
        """How well a row's cells look like their columns' (a log-likelihood)."""
        shares = self._columns()
        if not shares:
            return 0.0
        return sum(
            math.log(column[self._kind(cell)]) for column, cell in zip(shares, cells, strict=True)
        )

    def _columns(self) -> list[dict[str, float]]:
        if self._shares is None:
            self._shares = []
            if self._table is not None and self._table.num_rows:
                sample = self._table.slice(0, self._ROWS)
                for column in sample.columns:
                    kinds = [self._kind(value) for value in column.to_pylist()]
                    names = [name for name, _ in self._KINDS] + ["text"]
                    total = len(kinds) + 0.1 * len(names)
                    self._shares.append({n: (kinds.count(n) + 0.1) / total for n in names})
        return self._shares

    @classmethod
    def _kind(cls, value: str | None) -> str:
        if value is None:
            return "empty"
        for name, pattern in cls._KINDS:
            if pattern.fullmatch(value):
                return name
        return "text"


# -- the Python scanner -------------------------------------------------------------------------


@dataclass
class _Record:
    #: 1-based among the chunk's records; blank lines are not counted (as in pyarrow).
    number: int
    #: Byte offsets in the chunk where the record starts and ends (the first line only, for
    #: an unterminated quote).
    start: int
    end: int
    fields: list[str]
    #: ``UNTERMINATED`` for the first line of a quoted field that never ends, else None.
    problem: str | None
    text: str
    #: The chunk ended inside the record's quoted field: the next chunk may complete it.
    open_end: bool = False


class _TooLong(Exception):
    pass


class _Lines:
    """The chunk's lines for ``csv.reader``, from a given line on; counts what it hands out."""

    def __init__(self, lines: list[bytes], first: int) -> None:
        self.lines = lines
        self.position = first
        self._record_start = first
        self._size = 0

    def __iter__(self) -> "_Lines":
        return self

    def __next__(self) -> str:
        if self.position >= len(self.lines):
            raise StopIteration
        line = self.lines[self.position]
        if self.position > self._record_start:
            self._size += len(line)
            if self._size > _RECORD_LIMIT:
                raise _TooLong
        self.position += 1
        return line.decode("utf-8")

    def start_record(self) -> None:
        self._record_start = self.position
        self._size = 0


def _scan(chunk: bytes, delimiter: str) -> Iterator[_Record]:
    """The chunk's records, read strictly; an unterminated quote gives its first line alone."""
    lines = chunk.splitlines(keepends=True)
    offsets = list(itertools.accumulate(map(len, lines), initial=0))
    number = 0
    first = 0
    while first < len(lines):
        feed = _Lines(lines, first)
        reader = csv.reader(feed, delimiter=delimiter, strict=True)
        first = len(lines)
        while True:
            feed.start_record()
            begin = feed.position
            try:
                fields = next(reader)
            except StopIteration:
                break
            except (csv.Error, _TooLong) as exc:
                number += 1
                text = lines[begin].decode("utf-8").rstrip("\r\n")
                fields, unterminated = _split_line(text, delimiter)
                open_end = feed.position == len(lines) and "unexpected end of data" in str(exc)
                swallowed = feed.position - begin > 1
                problem = UNTERMINATED if swallowed or unterminated else None
                yield _Record(
                    number, offsets[begin], offsets[begin + 1], fields, problem, text, open_end
                )
                if swallowed:  # the quote took the lines after it: read them again
                    first = begin + 1
                    break
                continue
            if not fields:
                continue  # a blank line
            number += 1
            raw = b"".join(lines[begin : feed.position]).decode("utf-8").rstrip("\r\n")
            yield _Record(number, offsets[begin], offsets[feed.position], fields, None, raw)


def _split_line(text: str, delimiter: str) -> tuple[list[str], bool]:
    """A record's fields, read leniently, and whether a quote in it never ends.

    An unterminated quote runs to the end of the line; the delimiters after it are taken as
    real, since the quote is the mistake.
    """
    lines = text.splitlines(keepends=True) or [""]
    try:
        return next(csv.reader(lines, delimiter=delimiter, strict=True), [""]), False
    except csv.Error as exc:
        unterminated = "unexpected end of data" in str(exc)
    try:
        fields = next(csv.reader(lines, delimiter=delimiter), [""])
    except csv.Error:
        return text.split(delimiter), unterminated
    if unterminated and fields:
        fields[-1:] = fields[-1].split(delimiter)
    return fields, unterminated


def _holds_line_break(column: pa.ChunkedArray) -> bool:
    """Whether any value of a string column may hold a line break (a quick look at its bytes)."""
    for chunk in column.chunks:
        data = chunk.buffers()[2]
        if data is None:
            continue
        raw = data.to_pybytes()
        if b"\n" in raw or b"\r" in raw:
            return True
    return False


def _record_number(index: int, skipped: list[tuple[int, int, str]]) -> int:
    """The record number of pyarrow's ``index``-th good row, skipped records counted."""
    number = index + 1
    for skipped_number, _, _ in skipped:  # in increasing order
        if skipped_number > number:
            break
        number += 1
    return number

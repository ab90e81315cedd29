"""What every reader shares: the :class:`Source` interface, what it reports, and its errors.

The readers (one module per format in this package) all yield Arrow batches of one schema and
keep a broken record as a row, reported in :attr:`SourceInfo.bad_records` (PRODUCT.md,
"Pipeline rows"); what one record may cost is bounded here (docs/pipeline.md, "Reading").
"""

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from listhygiene.errors import InputError

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "BadRecord",
    "LineTooLong",
    "Source",
    "SourceError",
    "SourceInfo",
    "bad_record",
    "line_too_long",
    "mask_url",
    "unique_names",
]

#: Every kind of source, as reported in :attr:`SourceInfo.kind`.
KINDS = ("csv", "txt", "xlsx", "xls", "parquet", "jsonl", "sql", "dataframe")


#: The longest line a text input (CSV, TXT, JSON lines) may have, in bytes of UTF-8; also the
#: most a CSV record spanning lines may take before it is taken for an unterminated quote.
MAX_LINE_BYTES = 1 << 20


#: The deepest a JSON value may nest (arrays and objects, the line's own object counted).
MAX_DEPTH = 64


#: A bad record's text is kept up to this many characters.
_TEXT_LIMIT = 200


class SourceError(InputError):
    """Bad input: the message names the input and says what is wrong and what to do."""


@dataclass
class BadRecord:
    """A broken input record, kept as a row."""

    #: 1-based data-row number (the header not counted) of the row that holds the record.
    row: int
    #: What is wrong: "expected 5 fields, found 7", "unterminated quote", "invalid JSON", ...
    problem: str
    #: The record as it was in the input, cut to 200 characters.
    text: str


@dataclass
class SourceInfo:
    """What was detected about an input."""

    kind: str
    #: The path, the URL with its password masked, or ``<DataFrame>``.
    name: str
    encoding: str | None = None
    delimiter: str | None = None
    #: Broken records kept as rows; filled while :meth:`Source.batches` runs.
    bad_records: list[BadRecord] = field(default_factory=list)


class Source(ABC):
    """An input table, read in batches that all have :attr:`schema`."""

    info: SourceInfo
    #: Whether :meth:`batches` gives the same rows again, in this run and in a resumed one (a
    #: local Parquet file, an in-memory table): the run then stages only the addresses and reads
    #: the input's columns again when it writes (docs/pipeline.md, "Speed").
    rereadable: bool = False

    @property
    @abstractmethod
    def schema(self) -> pa.Schema:
        """Every input column, in order."""

    @abstractmethod
    def sample(self, rows: int = 1000) -> pa.Table:
        """The first ``rows`` rows, for column detection; reading them does not disturb batches."""

    @abstractmethod
    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """The whole input, in order, in batches of about ``rows`` rows."""


class LineTooLong(Exception):
    """A text input's line is longer than :data:`MAX_LINE_BYTES` (at byte ``offset``); the
    readers turn it into a :class:`SourceError` naming the input."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def line_too_long(path: object, offset: int) -> SourceError:
    return SourceError(
        f"{path}: the line at byte offset {offset:,} is longer than {MAX_LINE_BYTES:,} bytes "
        "(the most one line may take); this does not look like an address table"
    )


def bad_record(row: int, problem: str, text: str) -> BadRecord:
    """A :class:`BadRecord` with its text cut to the kept length."""
    return BadRecord(row=row, problem=problem, text=text[:_TEXT_LIMIT])


def unique_names(raw: Sequence[object]) -> list[str]:
    """Header cells as column names: trimmed, non-empty (``column_3``), unique (``Email_2``)."""
    names: list[str] = []
    taken: set[str] = set()
    for position, value in enumerate(raw, start=1):
        name = "" if value is None else str(value).strip()
        name = name or f"column_{position}"
        if name in taken:
            suffix = 2
            while f"{name}_{suffix}" in taken:
                suffix += 1
            name = f"{name}_{suffix}"
        taken.add(name)
        names.append(name)
    return names


def mask_url(url: str) -> str:
    """A database URL that could not be parsed, with anything like a password hidden."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in credentials else url

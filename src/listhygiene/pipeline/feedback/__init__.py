"""Feedback: an email service's event exports read into the verdict store (PRODUCT.md,
"Feedback"; docs/feedback.md). One module per export shape, as ``sources/`` has one per file
format; this module detects the shape and feeds the store::

    base.py       the one event shape, normalisation over Arrow, bad rows by reason
    records.py    JSON documents, arrays and lines; CSV blocks
    sendgrid.py, mailgun.py, ses.py, postmark.py, generic.py   one reader per shape

Later runs apply the events (``listhygiene.verdicts.evidence``); nothing here changes a verdict.
"""

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.feedback import generic, mailgun, postmark, sendgrid, ses
from listhygiene.pipeline.feedback.base import FeedbackInputError, Raw, Tally, batches
from listhygiene.pipeline.feedback.records import sniff

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.verdicts import VerdictStore

__all__ = [
    "FORMATS",
    "FeedbackFile",
    "FeedbackInputError",
    "FeedbackResult",
    "add_feedback",
    "detect_format",
    "read_events",
]

#: The shapes read, in the order ``auto`` tries them.
FORMATS: tuple[str, ...] = ("sendgrid", "mailgun", "ses", "postmark", "generic")
_READERS = {
    "sendgrid": sendgrid,
    "mailgun": mailgun,
    "ses": ses,
    "postmark": postmark,
    "generic": generic,
}


@dataclass
class FeedbackFile:
    """What one file (or table) gave."""

    name: str
    format: str
    tally: Tally = field(default_factory=Tally)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "format": self.format,
            "records": self.tally.records,
            "events": self.tally.events,
            "ignored": self.tally.ignored,
            "bad": dict(self.tally.bad),
        }


@dataclass
class FeedbackResult:
    """What ``feedback add`` did: per file, and the events added and already there."""

    store: str
    files: list[FeedbackFile] = field(default_factory=list)
    added: int = 0
    duplicates: int = 0

    @property
    def bad(self) -> int:
        return sum(sum(f.tally.bad.values()) for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "added": self.added,
            "duplicates": self.duplicates,
            "bad": self.bad,
            "files": [f.as_dict() for f in self.files],
        }

    def lines(self) -> list[str]:
        """One line per file, then the store's: what a person reads."""
        out = []
        for f in self.files:
            t = f.tally
            out.append(
                f"{f.name} ({f.format}): {t.records} records, {t.events} events, "
                f"{t.ignored} not feedback, {t.bad_line()}"
            )
        out.append(f"{self.added} events added to {self.store}, {self.duplicates} already there")
        return out


def detect_format(path: str | os.PathLike[str]) -> str:
    """The export shape of a file, from its first record or header."""
    where = Path(path)
    sample = sniff(where)
    for name in FORMATS:
        if _READERS[name].detect(sample):
            return name
    raise FeedbackInputError(
        f"{where}: cannot tell which email service's export this is; give --format "
        f"({', '.join(FORMATS)})"
    )


def read_events(
    source: "str | os.PathLike[str] | pa.Table | Any",
    *,
    format: str = "auto",
    table: str | None = None,
    query: str | None = None,
) -> tuple[FeedbackFile, Iterator["pa.Table"]]:
    """The events of a file (or of an Arrow table or DataFrame, or a SQL URL with ``table`` or
    ``query``, both in the generic shape) as normalised tables, and what was read (filled as the
    tables are consumed)."""
    if format not in ("auto", *FORMATS):
        raise ValueError(f"unknown feedback format {format!r}: auto, {', '.join(FORMATS)}")
    if isinstance(source, str) and "://" in source:
        from listhygiene.pipeline.sources import open_source

        opened = open_source(source, table=table, query=query)
        name = opened.info.name
        found = FeedbackFile(name, "generic")
        raw: Iterable[Raw] = generic.read_batches(opened.batches(), name)
    elif not isinstance(source, str | os.PathLike):
        import pyarrow as pa

        data = pa.table(source)
        found = FeedbackFile("table", "generic")
        raw = generic.read_batches(data.to_batches(max_chunksize=65_536), "the table")
    else:
        path = Path(source)
        if not path.is_file():
            raise FeedbackInputError(f"{path}: no such file")
        shape = detect_format(path) if format == "auto" else format
        found = FeedbackFile(str(path), shape)
        raw = _READERS[shape].read(path)
    return found, batches(iter(raw), found.tally)


def add_feedback(
    sources: "Iterable[str | os.PathLike[str] | Any] | str | os.PathLike[str]",
    *,
    format: str = "auto",
    verdicts: "str | VerdictStore | None" = None,
    table: str | None = None,
    query: str | None = None,
) -> FeedbackResult:
    """Read event exports into the verdict store (``verdicts``: a store, a SQLAlchemy URL, or
    None for ``LISTHYGIENE_VERDICTS``, else the default store); each event is kept once. Bad rows
    are counted, never raised; a file that cannot be read at all raises
    :class:`FeedbackInputError` (an ``InputError``, exit 3) before anything of it is kept."""
    from listhygiene.verdicts import VerdictStore
    from listhygiene.verdicts.feedback import add_events

    if isinstance(sources, str | os.PathLike) or not isinstance(sources, Iterable):
        sources = [sources]
    given = list(sources)
    url = verdicts if verdicts is not None else os.environ.get("LISTHYGIENE_VERDICTS")
    if isinstance(url, str) and url.strip().lower() == "none":
        raise ValueError("feedback needs a verdict store: --verdicts none keeps none")
    store = url if isinstance(url, VerdictStore) else VerdictStore(url or None)
    result = FeedbackResult(store.shown)
    try:
        for source in given:
            found, tables = read_events(source, format=format, table=table, query=query)
            for events in tables:
                added, again = add_events(store, events, source=found.format)
                result.added += added
                result.duplicates += again
            result.files.append(found)
    finally:
        if store is not url:
            store.close()
    return result

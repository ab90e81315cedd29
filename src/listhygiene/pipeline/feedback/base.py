"""What every reader of an event export gives: batches of events in one shape, and the rows it
could not read, counted by why (docs/feedback.md).

A reader turns its format's records into four columns of raw values (address, event name, time,
bounce kind); :func:`normalise` does the rest for every format at once, over Arrow: the address
read as ``clean`` reads a cell, the time as Unix seconds (numbers, milliseconds or ISO 8601),
and rows that cannot be used set aside with their reason, never raised.
"""

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from listhygiene.errors import InputError
from listhygiene.vocabulary import BOUNCE_TYPES, FeedbackEvent

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EVENT_NAMES", "FeedbackInputError", "Raw", "Tally", "normalise", "raw_batches"]

#: The events as the store knows them.
EVENT_NAMES: tuple[str, ...] = tuple(e.value for e in FeedbackEvent)
#: Rows of one batch of events.
BATCH = 65_536
#: A plain address after cleaning: something, one @, a dotted domain.
_ADDRESS = r"^[^@\s]+@[^@\s]+\.[^@\s.]+$"


class FeedbackInputError(InputError):
    """An event file that cannot be read at all (missing, not the format asked, no events)."""


@dataclass
class Raw:
    """Raw columns of one batch, as a format's reader found them (``None`` where absent).
    ``event`` is already one of :data:`EVENT_NAMES`, or None for a kind of record that is no
    feedback event (SendGrid's ``processed``, ...), or ``"?"`` + the name for one not known."""

    address: list[Any] = field(default_factory=list)
    event: list[str | None] = field(default_factory=list)
    at: list[Any] = field(default_factory=list)
    bounce: list[str | None] = field(default_factory=list)
    #: Rows of the file that could not be split into fields (a CSV row of the wrong width).
    malformed: int = 0

    def add(self, address: Any, event: str | None, at: Any, bounce: str | None = None) -> None:
        self.address.append(address)
        self.event.append(event)
        self.at.append(at)
        self.bounce.append(bounce)

    def __len__(self) -> int:
        return len(self.address)


@dataclass
class Tally:
    """What was read: records, events kept, records that are no feedback event (ignored), and
    bad rows by reason."""

    records: int = 0
    events: int = 0
    ignored: int = 0
    bad: Counter[str] = field(default_factory=Counter)

    def merge(self, other: "Tally") -> None:
        self.records += other.records
        self.events += other.events
        self.ignored += other.ignored
        self.bad.update(other.bad)

    def bad_line(self) -> str:
        """The bad rows in one line, e.g. ``3 bad rows (2 no address, 1 unreadable time)``."""
        total = sum(self.bad.values())
        if not total:
            return "no bad rows"
        parts = ", ".join(f"{n} {why}" for why, n in self.bad.most_common())
        return f"{total} bad row{'s' if total != 1 else ''} ({parts})"


def raw_batches(events: "Iterable[tuple[Any, str | None, Any, str | None]]") -> Iterator[Raw]:
    """(address, event, time, bounce kind) tuples, :data:`BATCH` to a :class:`Raw`."""
    raw = Raw()
    for event in events:
        raw.add(*event)
        if len(raw) >= BATCH:
            yield raw
            raw = Raw()
    if len(raw):
        yield raw


def normalise(raw: Raw, tally: Tally) -> "pa.Table":
    """The usable events of ``raw`` (``address``, ``event``, ``at`` seconds, ``bounce``),
    counting the rest into ``tally``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from listhygiene.email_cells import clean_cells

    tally.records += len(raw) + raw.malformed
    if raw.malformed:
        tally.bad["malformed row"] += raw.malformed
    events = pa.array(raw.event, pa.string())
    ignored = pc.is_null(events)
    tally.ignored += int(pc.sum(pc.cast(ignored, "int64")).as_py() or 0)
    cells = pa.array([None if a is None else str(a) for a in raw.address], pa.string())
    address = clean_cells(cells)
    good_address = pc.fill_null(pc.match_substring_regex(address, _ADDRESS), False)
    known = pc.is_in(events, value_set=pa.array(EVENT_NAMES, pa.string()))
    at = _seconds(raw.at)
    bounce = pc.utf8_lower(
        pa.array([None if b is None else str(b) for b in raw.bounce], pa.string())
    )
    bounce = pc.if_else(
        pc.equal(events, FeedbackEvent.BOUNCED.value), bounce, pa.scalar(None, pa.string())
    )
    bounced = pc.fill_null(pc.equal(events, FeedbackEvent.BOUNCED.value), False)
    good_bounce = pc.or_(
        pc.invert(bounced), pc.fill_null(pc.is_in(bounce, value_set=pa.array(BOUNCE_TYPES)), False)
    )
    checks = [
        ("no address", good_address),
        ("unknown event", pc.fill_null(known, False)),
        ("unreadable time", pc.is_valid(at)),
        ("bounce neither hard nor soft", good_bounce),
    ]
    keep = pc.invert(ignored)
    for reason, good in checks:
        bad = pc.and_(keep, pc.invert(good))
        count = int(pc.sum(pc.cast(bad, "int64")).as_py() or 0)
        if count:
            tally.bad[reason] += count
        keep = pc.and_(keep, good)
    table = pa.table({"address": address, "event": events, "at": at, "bounce": bounce})
    kept = table.filter(keep)
    tally.events += kept.num_rows
    return kept


def _seconds(values: list[Any]) -> "pa.Array":
    """Times as Unix seconds: numbers (seconds, or milliseconds past 1e11), numeric strings, or
    ISO 8601 (a time without a zone is UTC); null where none can be read."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pa.array(
        [None if v is None or isinstance(v, bool) else str(v).strip() for v in values], pa.string()
    )
    numeric = pc.cast(
        pc.if_else(
            pc.match_substring_regex(text, r"^\d+(\.\d+)?$"), text, pa.scalar(None, pa.string())
        ),
        pa.float64(),
    )
    numeric = pc.if_else(pc.greater(numeric, 1e11), pc.divide(numeric, 1000.0), numeric)
    iso = pc.if_else(pc.is_null(numeric), text, pa.scalar(None, pa.string()))
    try:
        stamped = pc.cast(_zoned(iso), pa.timestamp("ns", tz="UTC"))
        parsed = pc.divide(pc.cast(pc.cast(stamped, pa.int64()), pa.float64()), 1e9)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some cell is no ISO time: one by one
        parsed = pa.array([_one(v) for v in iso.to_pylist()], pa.float64())
    return pc.coalesce(numeric, parsed)


def _zoned(iso: "pa.Array") -> "pa.Array":
    """ISO times in the form Arrow's cast reads: ``T`` between date and time, a zone (``Z``
    when none), at most nine decimals."""
    import pyarrow.compute as pc

    text = pc.replace_substring_regex(iso, r"^(\d{4}-\d\d-\d\d) ", r"\1T")
    text = pc.replace_substring_regex(text, r"(\.\d{9})\d+", r"\1")
    zoned = pc.match_substring_regex(text, r"(Z|[+-]\d\d:?\d\d)$")
    dated_only = pc.match_substring_regex(text, r"^\d{4}-\d\d-\d\d$")
    text = pc.if_else(dated_only, pc.binary_join_element_wise(text, "T00:00:00", ""), text)
    return pc.if_else(zoned, text, pc.binary_join_element_wise(text, "Z", ""))


def _one(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def batches(raw_batches: Iterator[Raw], tally: Tally) -> Iterator["pa.Table"]:
    """Normalised tables of a reader's raw batches."""
    for raw in raw_batches:
        table = normalise(raw, tally)
        if table.num_rows:
            yield table

"""Feedback events in the verdict store: what an email service reported of mail sent to an address
(PRODUCT.md, "Feedback"; docs/feedback.md).

Events are kept under the same keyed hash as verdicts (never the address), one row per (key,
event, time): loading the same export twice, or two exports that overlap, adds each event once.
Codes only ever grow at their end, like ``codes.py``'s. :func:`evidence_of` sums an address's
events up as what :func:`listhygiene.verdicts.evidence.apply_evidence` needs, and
:class:`Feedback` is the two together, as a run or the service applies them.
"""

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from listhygiene.db.engine import transaction
from listhygiene.verdicts.evidence import Taught, apply_evidence
from listhygiene.verdicts.schema import events
from listhygiene.vocabulary import BOUNCE_TYPES, FeedbackEvent

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.results import VerificationResult
    from listhygiene.verdicts.store import VerdictStore

__all__ = [
    "BOUNCES",
    "EVENTS",
    "Feedback",
    "add_events",
    "event_counts",
    "evidence_of",
    "has_events",
]

#: Event codes in the store (append only).
EVENTS: tuple[str, ...] = tuple(e.value for e in FeedbackEvent)
#: A bounce's kind in the store (append only).
BOUNCES: tuple[str, ...] = BOUNCE_TYPES
#: Rows per statement when events are written or looked up.
_CHUNK = 50_000
_HARD = BOUNCES.index("hard")
_ENGAGED = (EVENTS.index("clicked"), EVENTS.index("replied"))
_SQLITE_INSERT = (
    "INSERT INTO verdict_events (key, event, at, bounce, source, added_at) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key, event, at) DO NOTHING"
)
_POSTGRES_INSERT = (
    "INSERT INTO verdict_events (key, event, at, bounce, source, added_at) "
    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (key, event, at) DO NOTHING"
)
# One row per key: the newest hard bounce, the newest click or reply, and the flags.
_SUMMED = (
    "SELECT key, "
    f"max(CASE WHEN event = {EVENTS.index('bounced')} AND bounce = {_HARD} THEN at END), "
    f"max(CASE WHEN event IN {_ENGAGED} THEN at END), "
    f"max(CASE WHEN event = {EVENTS.index('complained')} THEN 1 ELSE 0 END), "
    f"max(CASE WHEN event = {EVENTS.index('unsubscribed')} THEN 1 ELSE 0 END) "
    "FROM verdict_events WHERE {where} GROUP BY key"
)


def has_events(store: "VerdictStore") -> bool:
    """Whether the store holds any feedback event (a run without them pays nothing more)."""
    with store._errors(), store.engine.connect() as conn:
        return conn.execute(sa.select(events.c.key).limit(1)).first() is not None


def add_events(
    store: "VerdictStore", table: "pa.Table", *, source: str, added_at: float | None = None
) -> tuple[int, int]:
    """Keep events: ``table`` has ``address`` (normalised), ``event`` (one of :data:`EVENTS`),
    ``at`` (Unix seconds) and ``bounce`` (``hard``, ``soft`` or null). Returns (added, already
    there): an event is one (address, event, time)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not table.num_rows:
        return 0, 0
    moment = time.time() if added_at is None else added_at
    keys = pa.array(store.hashes(table.column("address").to_pylist()), pa.string())
    codes = pc.index_in(table.column("event"), value_set=pa.array(EVENTS, pa.string()))
    bounce = pc.index_in(table.column("bounce"), value_set=pa.array(BOUNCES, pa.string()))
    rows = pa.table({"key": keys, "event": codes, "at": table.column("at"), "bounce": bounce})
    # one row per (key, event, at) within the batch too, in key order (writers lock alike)
    rows = rows.group_by(["key", "event", "at"], use_threads=False).aggregate([("bounce", "min")])
    rows = rows.sort_by([("key", "ascending"), ("event", "ascending"), ("at", "ascending")])
    rows = rows.select(["key", "event", "at", "bounce_min"])  # the statement's order
    added = 0
    with store._errors(), transaction(store.engine, write=True) as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        statement = _SQLITE_INSERT if store.dialect == "sqlite" else _POSTGRES_INSERT
        try:
            for batch in rows.to_batches(max_chunksize=_CHUNK):
                columns = [c.to_pylist() for c in batch.columns]
                values = zip(
                    *columns,
                    [source] * batch.num_rows,
                    [moment] * batch.num_rows,
                    strict=True,
                )
                cursor.executemany(statement, list(values))
                added += max(int(cursor.rowcount), 0)  # both drivers: the rows inserted
        finally:
            cursor.close()
    return added, table.num_rows - added


def evidence_of(store: "VerdictStore", addresses: "pa.Array") -> "pa.Table":
    """The addresses (normalised) that have events, each once: ``address``, ``bounced_at``
    (the newest hard bounce), ``engaged_at`` (the newest click or reply), ``complained`` and
    ``unsubscribed``; times in Unix seconds, null when none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pc.unique(pc.drop_null(addresses)).to_pylist()
    hashed = store.hashes(wanted)
    found: list[tuple[Any, ...]] = []
    with store._errors(), store.engine.connect() as conn:
        for chunk in _chunks(sorted(hashed), _CHUNK):
            found += _lookup(conn, store.dialect, chunk)
    schema = pa.schema(
        [
            ("key", pa.string()),
            ("bounced_at", pa.float64()),
            ("engaged_at", pa.float64()),
            ("complained", pa.bool_()),
            ("unsubscribed", pa.bool_()),
        ]
    )
    table = pa.Table.from_pylist(
        [
            dict(zip(schema.names, (k, b, e, bool(c), bool(u)), strict=True))
            for k, b, e, c, u in found
        ],
        schema=schema,
    )
    at = pc.index_in(table.column("key"), value_set=pa.array(hashed, pa.string()))
    address = pc.take(pa.array(wanted, pa.string()), at)
    return table.drop_columns(["key"]).add_column(0, "address", address)


def _lookup(conn: sa.Connection, dialect: str, keys: list[str]) -> list[tuple[Any, ...]]:
    if dialect == "sqlite":
        sql = _SUMMED.format(where="key IN (SELECT value FROM json_each(:keys))")
        return [tuple(r) for r in conn.execute(sa.text(sql), {"keys": json.dumps(keys)})]
    sql = _SUMMED.format(where="key = ANY(:keys)")
    return [tuple(r) for r in conn.execute(sa.text(sql), {"keys": keys})]


def event_counts(store: "VerdictStore") -> dict[str, int]:
    """Events kept, by event (``bounced`` split into ``bounced_hard`` and ``bounced_soft``)."""
    query = sa.select(events.c.event, events.c.bounce, sa.func.count()).group_by(
        events.c.event, events.c.bounce
    )
    counts: dict[str, int] = {}
    with store._errors(), store.engine.connect() as conn:
        for event, bounce, count in conn.execute(query):
            name = EVENTS[event]
            if name == "bounced":
                name += f"_{BOUNCES[bounce] if bounce is not None else 'hard'}"
            counts[name] = counts.get(name, 0) + int(count)
    return dict(sorted(counts.items()))


@dataclass
class Feedback:
    """A store's events as a run (or the service) applies them: nothing is looked up when the
    store holds none."""

    store: "VerdictStore"
    #: Seconds a click or reply counts for: the ``valid`` max age.
    engaged_max_age: float
    #: Seconds between two looks at whether the store holds events: None for once (a run),
    #: a number for a process that lives on (the service sees events added meanwhile).
    recheck: float | None = None
    present: bool | None = None
    _seen_at: float = field(default=0.0, repr=False)

    @property
    def active(self) -> bool:
        stale = self.recheck is not None and time.monotonic() - self._seen_at > self.recheck
        if self.present is None or (stale and not self.present):
            self.present = has_events(self.store)
            self._seen_at = time.monotonic()
        return self.present

    def apply_results(
        self, pairs: Sequence[tuple[str, "VerificationResult"]]
    ) -> list[tuple[str, "VerificationResult"]]:
        """(submitted address, result) pairs verified now, with what the events teach: the
        service's way to :meth:`apply` (its results are models, not tables)."""
        from listhygiene.results import KEY, results_table
        from listhygiene.statuses import Evidence

        if not pairs or not self.active:
            return list(pairs)
        table = results_table((r.email, r) for _, r in pairs)
        applied, _ = self.apply(table, key=KEY)
        changed = ("status", "reason", "score", "is_deliverable", *_EVIDENCE)
        out = []
        for (given, result), row in zip(
            pairs, applied.select(list(changed)).to_pylist(), strict=True
        ):
            if row["evidence"] != Evidence.NONE.value or row["complained"] or row["unsubscribed"]:
                result = result.model_copy(update=_validated(row))
            out.append((given, result))
        return out

    def apply(
        self,
        results: "pa.Table",
        *,
        key: str,
        checked_at: "pa.Array | float | None" = None,
        now: float | None = None,
    ) -> tuple["pa.Table", Taught]:
        """``results`` (the address in column ``key``) with what the store's events teach;
        ``checked_at``: when each was verified (default: now)."""
        from listhygiene.results import no_evidence

        moment = time.time() if now is None else now
        if not self.active:
            for name, column in no_evidence(results.num_rows).items():
                if name not in results.column_names:
                    results = results.append_column(name, column)
            return results, Taught()
        found = evidence_of(self.store, results.column(key))
        return apply_evidence(
            results,
            found,
            key=key,
            checked_at=moment if checked_at is None else checked_at,
            now=moment,
            engaged_max_age=self.engaged_max_age,
        )


_EVIDENCE = ("evidence", "evidence_at", "complained", "unsubscribed")


def _validated(row: dict[str, Any]) -> dict[str, Any]:
    """A row of :meth:`Feedback.apply_results` as the model's field values."""
    from listhygiene.statuses import Evidence, Reason, Status

    return {
        **row,
        "status": Status(row["status"]),
        "reason": Reason(row["reason"]) if row["reason"] else None,
        "evidence": Evidence(row["evidence"]),
    }


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]

"""SendGrid: the Event Webhook's JSON (an array of events per POST, or one event a line as they
are usually kept) and a CSV of the same fields (``email``, ``event``, ``timestamp``, ``type``,
``status``, ...), Unix seconds.

``bounce`` is a hard bounce unless its ``type`` is ``blocked`` or its ``status`` is a 4.x.x
(SendGrid's own split of bounces and blocks); ``spamreport`` is a complaint, ``unsubscribe`` and
``group_unsubscribe`` unsubscriptions; ``processed``, ``deferred``, ``dropped`` and
``group_resubscribe`` are no feedback event.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from listhygiene.pipeline.feedback.base import Raw, raw_batches
from listhygiene.pipeline.feedback.records import csv_batches, json_records, kind_of

__all__ = ["detect", "read"]

_EVENTS = {
    "delivered": "delivered",
    "bounce": "bounced",
    "open": "opened",
    "click": "clicked",
    "spamreport": "complained",
    "unsubscribe": "unsubscribed",
    "group_unsubscribe": "unsubscribed",
}


def detect(sample: Mapping[str, Any] | list[str]) -> bool:
    keys = {k.lower() for k in sample}
    return "sg_event_id" in keys or {"email", "event", "timestamp"} <= keys


def read(path: Path) -> Iterator[Raw]:
    if kind_of(path) == "json":
        yield from raw_batches(_event(r) for r in json_records(path))
        return
    malformed = [0]
    for batch in csv_batches(path, malformed):
        names = {n.lower(): n for n in batch.schema.names}
        columns = {
            k: batch.column(names[k]).to_pylist() if k in names else [None] * batch.num_rows
            for k in ("email", "event", "timestamp", "type", "status")
        }
        rows = zip(*columns.values(), strict=True)
        records = (dict(zip(columns, row, strict=True)) for row in rows)
        for raw in raw_batches(_event(r) for r in records):
            raw.malformed, malformed[0] = malformed[0], 0
            yield raw


def _event(record: Mapping[str, Any]) -> tuple[Any, str | None, Any, str | None]:
    event = _EVENTS.get(str(record.get("event") or "").lower())
    bounce = None
    if event == "bounced":
        soft = str(record.get("type") or "").lower() == "blocked" or str(
            record.get("status") or ""
        ).startswith("4")
        bounce = "soft" if soft else "hard"
    return record.get("email"), event, record.get("timestamp"), bounce

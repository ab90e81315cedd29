"""Mailgun: the Events API's JSON (``{"items": [...], "paging": ...}``, pages saved as they come)
and webhook payloads (``{"signature": ..., "event-data": {...}}``), as a document or one a line.

Each event has ``event``, ``recipient`` and ``timestamp`` (Unix seconds with a fraction).
``failed`` is a bounce, hard when its ``severity`` is ``permanent``, soft when ``temporary``;
``accepted``, ``rejected``, ``stored`` and list events are no feedback event.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from listhygiene.pipeline.feedback.base import Raw, raw_batches
from listhygiene.pipeline.feedback.records import json_records

__all__ = ["detect", "read"]

_EVENTS = {
    "delivered": "delivered",
    "failed": "bounced",
    "opened": "opened",
    "clicked": "clicked",
    "complained": "complained",
    "unsubscribed": "unsubscribed",
}


def detect(sample: Mapping[str, Any] | list[str]) -> bool:
    if not isinstance(sample, Mapping):
        return False
    return "event-data" in sample or {"recipient", "event"} <= set(sample)


def read(path: Path) -> Iterator[Raw]:
    return raw_batches(_event(r) for r in json_records(path))


def _event(record: Mapping[str, Any]) -> tuple[Any, str | None, Any, str | None]:
    data: Mapping[str, Any] = record.get("event-data") or record
    event = _EVENTS.get(str(data.get("event") or "").lower())
    bounce = None
    if event == "bounced":
        bounce = "hard" if str(data.get("severity") or "").lower() == "permanent" else "soft"
    return data.get("recipient"), event, data.get("timestamp"), bounce

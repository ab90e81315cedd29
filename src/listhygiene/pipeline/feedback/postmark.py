"""Postmark: webhook payloads (``RecordType``: ``Bounce``, ``Delivery``, ``Open``, ``Click``,
``SpamComplaint``, ``SubscriptionChange``) and the Bounces API's JSON (``{"Bounces": [...]}``),
as a document, an array or one a line.

A bounce's ``Type`` decides: ``HardBounce`` and ``BadEmailAddress`` are hard bounces,
``SpamComplaint`` a complaint, ``Unsubscribe`` an unsubscription, every other type (``SoftBounce``,
``Transient``, ``DnsError``, ``AutoResponder``, ...) soft. A ``SubscriptionChange`` that suppresses
sending is an unsubscription. Times: ``BouncedAt``, ``DeliveredAt``, ``ReceivedAt`` or
``ChangedAt`` (ISO 8601, up to seven decimals).
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from listhygiene.pipeline.feedback.base import Raw, raw_batches
from listhygiene.pipeline.feedback.records import json_records

__all__ = ["detect", "read"]

_HARD = frozenset({"HardBounce", "BadEmailAddress"})


def detect(sample: Mapping[str, Any] | list[str]) -> bool:
    if not isinstance(sample, Mapping):
        return False
    return "RecordType" in sample or {"Type", "Email", "BouncedAt"} <= set(sample)


def read(path: Path) -> Iterator[Raw]:
    return raw_batches(_event(r) for r in json_records(path))


def _event(record: Mapping[str, Any]) -> tuple[Any, str | None, Any, str | None]:
    kind = str(record.get("RecordType") or "Bounce")
    if kind in ("Bounce", "SpamComplaint"):
        bounce_type = str(record.get("Type") or "")
        address, at = record.get("Email"), record.get("BouncedAt")
        if kind == "SpamComplaint" or bounce_type == "SpamComplaint":
            return address, "complained", at, None
        if bounce_type == "Unsubscribe":
            return address, "unsubscribed", at, None
        return address, "bounced", at, "hard" if bounce_type in _HARD else "soft"
    address = record.get("Recipient") or record.get("Email")
    if kind == "Delivery":
        return address, "delivered", record.get("DeliveredAt"), None
    if kind in ("Open", "Click"):
        return address, "opened" if kind == "Open" else "clicked", record.get("ReceivedAt"), None
    if kind == "SubscriptionChange" and record.get("SuppressSending"):
        return address, "unsubscribed", record.get("ChangedAt"), None
    return None, None, None, None  # no feedback event

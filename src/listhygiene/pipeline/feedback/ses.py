"""Amazon SES: notifications as SNS delivers them
(``{"Type": "Notification", "Message": "<JSON>"}``) or their inner message alone, both of
SES's notifications (``notificationType``) and of its event publishing (``eventType``), as a
document, an array or one a line.

A ``Bounce`` gives one event per ``bouncedRecipients`` entry, hard when ``bounceType`` is
``Permanent`` (``Transient`` and ``Undetermined`` are soft); a ``Complaint`` one per
``complainedRecipients``; a ``Delivery`` one per ``recipients``; ``Open`` and ``Click`` (event
publishing) one per ``mail.destination``. ``Send``, ``Reject``, ``DeliveryDelay`` and the rest
are no feedback event. Times are the ISO 8601 ``timestamp`` of the bounce, complaint, delivery,
open or click, else the mail's.
"""

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from listhygiene.pipeline.feedback.base import Raw, raw_batches
from listhygiene.pipeline.feedback.records import json_records

__all__ = ["detect", "read"]


def detect(sample: Mapping[str, Any] | list[str]) -> bool:
    if not isinstance(sample, Mapping):
        return False
    return (sample.get("Type") == "Notification" and "Message" in sample) or bool(
        {"notificationType", "eventType"} & set(sample)
    )


def read(path: Path) -> Iterator[Raw]:
    return raw_batches(e for r in json_records(path) for e in _events(_message(r)))


def _message(record: Mapping[str, Any]) -> Mapping[str, Any]:
    message = record.get("Message")
    if isinstance(message, str):
        try:
            inner = json.loads(message)
        except json.JSONDecodeError:
            return {}
        return inner if isinstance(inner, dict) else {}
    return record


_Event = tuple[Any, str | None, Any, str | None]


def _events(message: Mapping[str, Any]) -> Iterator[_Event]:
    kind = str(message.get("notificationType") or message.get("eventType") or "")
    mail = message.get("mail") or {}
    fallback = mail.get("timestamp")
    if kind == "Bounce":
        bounce = message.get("bounce") or {}
        hard = str(bounce.get("bounceType")) == "Permanent"
        for recipient in bounce.get("bouncedRecipients") or [{}]:
            yield (
                recipient.get("emailAddress"),
                "bounced",
                bounce.get("timestamp") or fallback,
                "hard" if hard else "soft",
            )
    elif kind == "Complaint":
        complaint = message.get("complaint") or {}
        for recipient in complaint.get("complainedRecipients") or [{}]:
            at = complaint.get("timestamp") or fallback
            yield (recipient.get("emailAddress"), "complained", at, None)
    elif kind == "Delivery":
        delivery = message.get("delivery") or {}
        for address in delivery.get("recipients") or [None]:
            yield (address, "delivered", delivery.get("timestamp") or fallback, None)
    elif kind in ("Open", "Click"):
        detail = message.get(kind.lower()) or {}
        for address in mail.get("destination") or [None]:
            yield (
                address,
                "opened" if kind == "Open" else "clicked",
                detail.get("timestamp") or fallback,
                None,
            )
    else:
        yield (None, None, None, None)  # no feedback event: counted as ignored

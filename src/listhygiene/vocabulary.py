"""The product's words, spelled once: job statuses, webhook events, backend kinds, forms, plans
and rate limits (PRODUCT.md, spec/form-a.md and spec/form-b.md; docs/results.md lists them).

The service, the clients, the pipeline, the CLI and the integrations import these rather than
spelling them again; ``tests/test_statuses.py`` pins every consumer to this module. A result's own
statuses and reasons are in :mod:`listhygiene.statuses`.
"""

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "BACKEND_KINDS",
    "BOUNCE_TYPES",
    "DEFAULT_PLAN",
    "FORMS",
    "FORM_A_EVENTS",
    "FORM_A_RATE_LIMITS",
    "FORM_B_EVENTS",
    "JOB_EVENTS",
    "JOB_KINDS",
    "PLANS",
    "PLAN_LIMITS",
    "SERVICE_PLAN_LIMITS",
    "TERMINAL_JOB_STATUSES",
    "Event",
    "FeedbackEvent",
    "JobStatus",
    "is_terminal",
]


class JobStatus(StrEnum):
    """The states of a file job (form A) or a bulk job (form B)."""

    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


#: States a job does not leave: stop waiting.
TERMINAL_JOB_STATUSES: frozenset[JobStatus] = frozenset({JobStatus.COMPLETED, JobStatus.FAILED})


def is_terminal(status: str) -> bool:
    """Whether a job in ``status`` is over (completed or failed)."""
    return status in TERMINAL_JOB_STATUSES


class FeedbackEvent(StrEnum):
    """What an email service reports of mail sent to an address (PRODUCT.md, "Feedback")."""

    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    CLICKED = "clicked"
    REPLIED = "replied"
    OPENED = "opened"
    UNSUBSCRIBED = "unsubscribed"


#: A bounce's kind: ``hard`` (the mailbox does not exist) or ``soft`` (a passing refusal).
BOUNCE_TYPES: tuple[str, ...] = ("hard", "soft")


class Event(StrEnum):
    """Webhook event names of both forms (spec/form-a.md and spec/form-b.md, "Webhooks")."""

    FILE_COMPLETED = "file.completed"
    FILE_FAILED = "file.failed"
    VERIFICATION_COMPLETED = "verification.completed"
    BULK_COMPLETED = "bulk.completed"
    BULK_FAILED = "bulk.failed"
    CREDITS_LOW = "credits.low"


#: The events a key may subscribe to, per form.
FORM_A_EVENTS: tuple[Event, ...] = (Event.FILE_COMPLETED, Event.FILE_FAILED)
FORM_B_EVENTS: tuple[Event, ...] = (
    Event.VERIFICATION_COMPLETED,
    Event.BULK_COMPLETED,
    Event.BULK_FAILED,
    Event.CREDITS_LOW,
)
#: Form -> the (completed, failed) events of its jobs: what a waiting run watches for.
JOB_EVENTS: Mapping[str, tuple[Event, Event]] = MappingProxyType(
    {"a": (Event.FILE_COMPLETED, Event.FILE_FAILED), "b": (Event.BULK_COMPLETED, Event.BULK_FAILED)}
)

#: The two API forms of the service.
FORMS: tuple[str, ...] = ("a", "b")
#: Form A's jobs are file jobs; form B's are bulk jobs.
JOB_KINDS: tuple[str, ...] = ("file", "bulk")

#: What verifies a run's addresses: this machine's engine, or a remote service in form A or B
#: (``clean --backend``, docs/backends.md).
BACKEND_KINDS: tuple[str, ...] = ("local", "form-a", "form-b")

#: Form B's plans (spec/form-b.md, "Limits"); ``keys create --plan``.
PLANS: tuple[str, ...] = ("free", "starter", "professional", "enterprise")
#: ``keys create`` without ``--plan`` (PRODUCT.md).
DEFAULT_PLAN: Final = "professional"
#: Plan -> (requests per hour, requests per day), as the spec says. Enterprise is "custom":
#: None, so a client does not guess it and keeps to what the service's headers say.
PLAN_LIMITS: Mapping[str, tuple[int, int] | None] = MappingProxyType(
    {
        "free": (100, 1_000),
        "starter": (1_000, 10_000),
        "professional": (10_000, 100_000),
        "enterprise": None,
    }
)
#: What our service enforces for a key without its own overrides: the spec's limits, and for
#: the "custom" enterprise plan ten times professional (docs/service.md).
SERVICE_PLAN_LIMITS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {plan: limits or (100_000, 1_000_000) for plan, limits in PLAN_LIMITS.items()}
)

#: Form A: requests per minute per endpoint type (spec/form-a.md, "Limits").
FORM_A_RATE_LIMITS: Mapping[str, int] = MappingProxyType(
    {"single": 6_000, "bulk": 1_500, "file": 300, "other": 200}
)

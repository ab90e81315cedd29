"""Webhook registrations and the durable delivery outbox, on the service's store.

Registrations belong to one key and one form; a key sees only its own. A delivery is a row of
``webhook_outbox`` carrying its URL, secret and the exact body to send, so it survives a restart
and is made even if its webhook is deleted since. :func:`due` claims the rows it returns for a
lease (their ``next_attempt_at`` moves on), so that several servers on one database do not send
the same delivery at once, and a server that dies mid-delivery leaves it to be retried.

All functions are synchronous (SQLAlchemy); the service calls them in the thread pool.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, delete, insert, select, update

from listhygiene.service.store.models import Webhook, WebhookOutbox, new_id, utcnow
from listhygiene.service.store.store import Store

__all__ = [
    "GAVE_UP",
    "OutboxRow",
    "WebhookRow",
    "create",
    "delete_webhook",
    "due",
    "enqueue",
    "get",
    "get_delivery",
    "list_webhooks",
    "mark_delivered",
    "mark_failed",
    "subscribed",
]

#: ``next_attempt_at`` of a delivery given up on: never due again.
GAVE_UP = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass(frozen=True)
class WebhookRow:
    id: str
    api_key_id: str
    form: str
    url: str
    events: list[str]
    secret: str
    is_active: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class OutboxRow:
    id: int
    webhook_id: str | None
    url: str
    event: str
    payload: str
    secret: str | None
    attempts: int
    next_attempt_at: datetime
    delivered_at: datetime | None
    last_error: str | None


_WEBHOOK_COLUMNS = (
    Webhook.id,
    Webhook.api_key_id,
    Webhook.form,
    Webhook.url,
    Webhook.events,
    Webhook.secret,
    Webhook.is_active,
    Webhook.created_at,
    Webhook.updated_at,
)
_OUTBOX_COLUMNS = (
    WebhookOutbox.id,
    WebhookOutbox.webhook_id,
    WebhookOutbox.url,
    WebhookOutbox.event,
    WebhookOutbox.payload,
    WebhookOutbox.secret,
    WebhookOutbox.attempts,
    WebhookOutbox.next_attempt_at,
    WebhookOutbox.delivered_at,
    WebhookOutbox.last_error,
)


def _webhook(row: object) -> WebhookRow:
    return WebhookRow(*row)  # type: ignore[misc]


def _outbox_row(row: object) -> OutboxRow:
    return OutboxRow(*row)  # type: ignore[misc]


def create(
    store: Store, key_id: str, form: str, url: str, events: Sequence[str], secret: str
) -> WebhookRow:
    """Register ``url`` for ``events`` of ``form`` on ``key_id``."""
    webhook_id, now = new_id(), utcnow()
    with store.transaction(write=True) as conn:
        conn.execute(
            insert(Webhook).values(
                id=webhook_id,
                api_key_id=key_id,
                form=form,
                url=url,
                events=list(events),
                secret=secret,
                is_active=True,
                created_at=now,
                updated_at=now,
            )
        )
    return WebhookRow(webhook_id, key_id, form, url, list(events), secret, True, now, now)


def list_webhooks(store: Store, key_id: str, form: str) -> list[WebhookRow]:
    """``key_id``'s webhooks of ``form``, oldest first."""
    with store.transaction() as conn:
        rows = conn.execute(
            select(*_WEBHOOK_COLUMNS)
            .where(Webhook.api_key_id == key_id, Webhook.form == form)
            .order_by(Webhook.id)
        ).all()
    return [_webhook(r) for r in rows]


def get(store: Store, key_id: str, form: str, webhook_id: str) -> WebhookRow | None:
    """One of ``key_id``'s webhooks of ``form``; None for an unknown or another key's id."""
    with store.transaction() as conn:
        row = conn.execute(
            select(*_WEBHOOK_COLUMNS).where(
                Webhook.id == webhook_id, Webhook.api_key_id == key_id, Webhook.form == form
            )
        ).first()
    return None if row is None else _webhook(row)


def delete_webhook(store: Store, key_id: str, form: str, webhook_id: str) -> bool:
    """Delete one of ``key_id``'s webhooks; False if there is no such webhook of that key."""
    with store.transaction(write=True) as conn:
        # Deliveries already queued keep their URL and secret; they lose the link only.
        conn.execute(
            update(WebhookOutbox)
            .where(
                WebhookOutbox.webhook_id == webhook_id,
                WebhookOutbox.webhook_id.in_(
                    select(Webhook.id).where(
                        Webhook.id == webhook_id,
                        Webhook.api_key_id == key_id,
                        Webhook.form == form,
                    )
                ),
            )
            .values(webhook_id=None)
        )
        result = conn.execute(
            delete(Webhook).where(
                Webhook.id == webhook_id, Webhook.api_key_id == key_id, Webhook.form == form
            )
        )
    return bool(result.rowcount)


def subscribed(
    store: Store,
    key_id: str,
    form: str,
    event: str | None = None,
    *,
    conn: Connection | None = None,
) -> list[WebhookRow]:
    """``key_id``'s active webhooks of ``form`` (subscribed to ``event`` if given)."""

    def work(c: Connection) -> list[WebhookRow]:
        rows = c.execute(
            select(*_WEBHOOK_COLUMNS)
            .where(Webhook.api_key_id == key_id, Webhook.form == form, Webhook.is_active)
            .order_by(Webhook.id)
        ).all()
        found = [_webhook(r) for r in rows]
        return [w for w in found if event is None or event in w.events]

    if conn is not None:
        return work(conn)
    with store.transaction() as own:
        return work(own)


def enqueue(
    store: Store,
    *,
    url: str,
    event: str,
    payload: str,
    secret: str | None,
    webhook_id: str | None = None,
    conn: Connection | None = None,
) -> int:
    """Queue a delivery of ``payload`` (the exact body) to ``url``, due now; returns its id.

    Pass ``conn`` to write it in the transaction of the event that causes it.
    """
    now = utcnow()
    statement = (
        insert(WebhookOutbox)
        .values(
            webhook_id=webhook_id,
            url=url,
            event=event,
            payload=payload,
            secret=secret,
            attempts=0,
            next_attempt_at=now,
            created_at=now,
        )
        .returning(WebhookOutbox.id)
    )
    if conn is not None:
        return int(conn.execute(statement).scalar_one())
    with store.transaction(write=True) as own:
        return int(own.execute(statement).scalar_one())


def due(
    store: Store, now: datetime, limit: int, *, lease: timedelta = timedelta(seconds=60)
) -> list[OutboxRow]:
    """Up to ``limit`` undelivered deliveries due at ``now``, claimed for ``lease``.

    A claimed delivery is not due again until the lease ends, unless it is marked first.
    """
    query = (
        select(*_OUTBOX_COLUMNS)
        .where(WebhookOutbox.delivered_at.is_(None), WebhookOutbox.next_attempt_at <= now)
        .order_by(WebhookOutbox.next_attempt_at, WebhookOutbox.id)
        .limit(limit)
    )
    # A look first, without the write lock: the outbox is polled twice a second and is mostly
    # empty, and on SQLite each write transaction queues every other writer of the file, the
    # server's admissions included, behind it (docs/service.md, "Fairness").
    with store.transaction() as conn:
        if conn.execute(query.with_only_columns(WebhookOutbox.id)).first() is None:
            return []
    with store.transaction(write=True) as conn:
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        rows = [_outbox_row(r) for r in conn.execute(query).all()]
        if rows:
            conn.execute(
                update(WebhookOutbox)
                .where(WebhookOutbox.id.in_([r.id for r in rows]))
                .values(next_attempt_at=now + lease)
            )
    return rows


def get_delivery(store: Store, delivery_id: int) -> OutboxRow | None:
    """One delivery, for inspection."""
    with store.transaction() as conn:
        row = conn.execute(select(*_OUTBOX_COLUMNS).where(WebhookOutbox.id == delivery_id)).first()
    return None if row is None else _outbox_row(row)


def mark_delivered(store: Store, delivery_id: int, when: datetime | None = None) -> None:
    """Record a successful attempt."""
    with store.transaction(write=True) as conn:
        conn.execute(
            update(WebhookOutbox)
            .where(WebhookOutbox.id == delivery_id)
            .values(
                delivered_at=when or utcnow(),
                attempts=WebhookOutbox.attempts + 1,
                last_error=None,
            )
        )


def mark_failed(
    store: Store, delivery_id: int, next_attempt_at: datetime | None, error: str
) -> None:
    """Record a failed attempt: retried at ``next_attempt_at``, or never again if None."""
    with store.transaction(write=True) as conn:
        conn.execute(
            update(WebhookOutbox)
            .where(WebhookOutbox.id == delivery_id)
            .values(
                attempts=WebhookOutbox.attempts + 1,
                next_attempt_at=next_attempt_at or GAVE_UP,
                last_error=error[:2000],
            )
        )

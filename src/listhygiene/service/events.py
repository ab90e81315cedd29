"""A closed job's webhook event, queued in the transaction that closes it.

The job worker hands :func:`announce_job` to the store's ``finish_job`` / ``fail_job``, which
call it with their connection once the job is closed (a transactional outbox: the event exists
exactly when the job is closed, even across a crash; docs/service.md, "Webhooks"). The store
knows nothing of payloads or deliveries; this module turns its record into the form's event.
"""

from typing import Any

from listhygiene.service.delivery import notify_sync
from listhygiene.service.store import Store
from listhygiene.service.store.jobs import StoredJob
from listhygiene.service.wire import bulk_event_data, file_event_data

__all__ = ["announce_job"]


def announce_job(store: Store, conn: Any, job: StoredJob) -> None:
    """Queue the event of closed ``job`` on ``conn``: ``file.completed`` / ``file.failed`` for
    form A's webhooks, ``bulk.completed`` / ``bulk.failed`` for form B's and the submission's
    ``webhook_url``."""
    done = job.status == "completed"
    if job.form == "a":
        event = "file.completed" if done else "file.failed"
        notify_sync(store, job.api_key_id, "a", event, file_event_data(job), conn=conn)
        return
    event = "bulk.completed" if done else "bulk.failed"
    notify_sync(
        store,
        job.api_key_id,
        "b",
        event,
        bulk_event_data(job),
        extra_url=job.webhook_url,
        conn=conn,
    )

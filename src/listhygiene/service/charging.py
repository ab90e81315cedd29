"""Verifying on a key's credits, for the synchronous routes of both forms (form A
``/verify/single`` and ``/verify/bulk``, form B ``/verify``).

Credits are reserved before any work (coalesced with the other requests waiting,
``store/batching.py``), the credits of unknown results go back afterwards, and everything goes
back when the verification fails or times out (docs/service.md, "Keys, credits and rate
limits"). The verification runs as *interactive* work on the engine, ahead of any job's
(docs/service.md, "Fairness").
"""

import asyncio
import logging

from fastapi import Request

from listhygiene.engine import Engine
from listhygiene.engine.lists import is_disposable, is_free, is_role
from listhygiene.engine.syntax import parse_address
from listhygiene.errors import ServiceError
from listhygiene.results import VerificationResult
from listhygiene.service.store import Store
from listhygiene.service.store.batching import StoreBatches
from listhygiene.statuses import Facts, MailboxOutcome, Reason

__all__ = ["DEFAULT_SYNC_DEADLINE", "out_of_time", "verify_charged"]

log = logging.getLogger(__name__)

#: Seconds a synchronous form A request (``/verify/single``, ``/verify/bulk``) may verify: under
#: the 30 s time-out common to HTTP clients and proxies.
DEFAULT_SYNC_DEADLINE = 25.0


async def verify_charged(
    request: Request,
    key_id: str,
    emails: list[str],
    *,
    check_smtp: bool,
    insufficient: type[ServiceError],
    timeout: float | None = None,  # noqa: ASYNC109 - credits are refunded on time-out
    deadline: float | None = None,
) -> tuple[dict[str, VerificationResult], int]:
    """Verify ``emails`` on ``key_id``'s credits: ``({input: result}, credits kept)``.

    As many credits as distinct addresses are reserved first (``insufficient`` is raised when the
    balance does not have them); once verified, the credits of unknown results (free) are
    refunded, and so is everything if the verification fails or exceeds ``timeout`` seconds
    (``TimeoutError``). With ``deadline`` instead, what is not verified after that many seconds
    is answered unknown (``smtp_timeout``, free, to be retried) and the rest stands: a
    synchronous request never outlasts its client (docs/service.md).
    """
    if timeout is not None and deadline is not None:
        raise ValueError("give a timeout or a deadline, not both")
    store: Store = request.app.state.store
    engine: Engine = request.app.state.engine

    def distinct(email: str) -> str:
        parsed = parse_address(email)
        return parsed.email if parsed is not None else email

    wanted = {distinct(e) for e in emails}
    batches = StoreBatches.for_loop(store)
    if not await batches.reserve(key_id, len(wanted)):  # coalesced (store/batching.py)
        raise insufficient(details=f"{len(wanted)} credits needed")

    found: dict[str, VerificationResult] = {}

    async def run() -> None:
        # interactive: a client is waiting, so its lookups and sessions go before any job's
        # (docs/service.md, "Fairness"); keys take turns among themselves
        verified = engine.verify_each(
            emails, check_smtp=check_smtp, priority="interactive", tenant=key_id
        )
        async for given, result in verified:
            found[str(given)] = result

    # Not asyncio.wait_for: it waits for the cancelled verification to wind down (an SMTP step
    # can take its own time limit to notice), and the answer must not wait for that.
    task = asyncio.ensure_future(run())
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, never logged
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout if deadline is None else deadline)
        if done:
            task.result()
        elif deadline is None:
            raise TimeoutError
        else:
            task.cancel()
            late = [e for e in emails if e not in found]
            log.info(
                "%d of %d addresses past the %.0f s deadline", len(late), len(emails), deadline
            )
            found.update({e: out_of_time(e, check_smtp=check_smtp) for e in late})
    except BaseException:
        task.cancel()
        # synchronous (one quick UPDATE): an await could be cancelled too, and the refund lost
        store.refund_credits(key_id, len(wanted))
        raise
    feedback = getattr(request.app.state, "feedback", None)
    if feedback is not None:  # what mail sent to the list taught (docs/feedback.md)
        found = dict(await asyncio.to_thread(feedback.apply_results, list(found.items())))
    kept = len({distinct(given) for given, r in found.items() if r.credits_used > 0})
    if len(wanted) > kept:
        await batches.refund(key_id, len(wanted) - kept)
    return found, kept


def out_of_time(email: str, *, check_smtp: bool) -> VerificationResult:
    """The result of an address a synchronous request had no time left for: unknown,
    ``smtp_timeout`` (a temporary reason: verify it again later), free; with the flags that
    need no network (disposable, role, free) as measured."""
    parsed = parse_address(email)
    if parsed is None:
        return VerificationResult.from_facts(email, Facts(syntax_valid=False))
    facts = Facts(
        syntax_valid=True,
        smtp_checked=check_smtp,
        mailbox=MailboxOutcome.UNDETERMINED if check_smtp else MailboxOutcome.NOT_CHECKED,
        undetermined_reason=Reason.SMTP_TIMEOUT,
        is_disposable=is_disposable(parsed.domain),
        is_role=is_role(parsed.local_part),
        is_free=is_free(parsed.domain),
    )
    return VerificationResult.from_facts(parsed.email, facts, domain=parsed.domain_unicode)

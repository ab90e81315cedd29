"""What mail sent to the list taught, applied to results: the one rule of PRODUCT.md, "Feedback",
vectorised over Arrow, used by the pipeline (``pipeline/verdict_memory.py``) and the service
(``service/charging.py``, ``service/worker.py``) alike.

For each address, from its events (``verdicts/feedback.py``, ``evidence_of``):

- a **hard bounce** stands when it is newer than the verification, or the address is at a
  catch-all domain (whose probe says nothing of the mailbox, so no verification is newer
  evidence than a bounce), and no click or reply came after it. It makes the address
  ``invalid``, reason ``bounced`` (an address the verification already found invalid keeps
  its own reason);
- a **click or reply** stands when it is within the ``valid`` max age and no hard bounce came
  after it. It makes an address of a catch-all domain (status ``catchall``) ``valid``: the one
  exception to "a catch-all domain is never reported valid";
- opens, deliveries and soft bounces are no evidence; ``complained`` and ``unsubscribed`` are
  flags only.

``evidence`` says which stands (``none``, ``engaged``, ``bounced``) and ``evidence_at`` when it
came, whether or not it changed the status (an engaged address that was already valid shows
``engaged``).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from listhygiene.statuses import DEFAULT_SCORES, VALID_WITHOUT_SMTP_SCORE, Evidence, Reason, Status

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EVIDENCE_COUNTS", "Taught", "apply_evidence"]

#: The summary's ``feedback`` counts (distinct addresses), in order.
EVIDENCE_COUNTS = ("bounced", "catchalls_confirmed", "engaged", "complained", "unsubscribed")


@dataclass(frozen=True)
class Taught:
    """What feedback did to a table of results: addresses made ``invalid`` by a hard bounce,
    catch-all addresses made ``valid`` by engagement, addresses with engagement standing, and
    the flags set."""

    bounced: int = 0
    catchalls_confirmed: int = 0
    engaged: int = 0
    complained: int = 0
    unsubscribed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in EVIDENCE_COUNTS}

    def __add__(self, other: "Taught | Mapping[str, int]") -> "Taught":
        theirs = other.as_dict() if isinstance(other, Taught) else other
        return Taught(**{n: getattr(self, n) + int(theirs.get(n, 0)) for n in EVIDENCE_COUNTS})


def apply_evidence(
    results: "pa.Table",
    found: "pa.Table",
    *,
    key: str,
    checked_at: "pa.Array | float",
    now: float,
    engaged_max_age: float,
) -> tuple["pa.Table", Taught]:
    """``results`` (result columns, the address in column ``key``) with what ``found`` (an
    :func:`~listhygiene.verdicts.feedback.evidence_of` table: ``address``, ``bounced_at``,
    ``engaged_at``, ``complained``, ``unsubscribed``; seconds) teaches; ``checked_at``: when
    each result (or all) was verified, Unix seconds. The evidence columns are set on every row
    (``none`` where nothing stands)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from listhygiene.results import no_evidence

    rows = results.num_rows
    for name, column in no_evidence(rows).items():  # a table without them gets them
        if name not in results.column_names:
            results = results.append_column(name, column)
    if not rows or not found.num_rows:
        return results, Taught()
    at = pc.index_in(results.column(key), value_set=found.column("address"))

    def taken(name: str) -> "pa.Array":
        return pc.take(found.column(name), at)

    bounced_at, engaged_at = taken("bounced_at"), taken("engaged_at")
    when = (
        checked_at
        if isinstance(checked_at, pa.Array | pa.ChunkedArray)
        else pa.scalar(float(checked_at))
    )
    catchall = pc.fill_null(results.column("is_catchall"), False)
    after_engaged = pc.or_kleene(pc.is_null(engaged_at), pc.greater_equal(bounced_at, engaged_at))
    bounce = _true(
        pc.and_kleene(
            pc.or_kleene(pc.greater(bounced_at, when), catchall), pc.fill_null(after_engaged, True)
        )
    )
    bounce = pc.and_kleene(bounce, pc.is_valid(bounced_at))
    recent = pc.less_equal(pc.subtract(pa.scalar(now), engaged_at), engaged_max_age)
    engaged = _true(
        pc.and_kleene(
            recent, pc.or_kleene(pc.is_null(bounced_at), pc.greater(engaged_at, bounced_at))
        )
    )
    status = results.column("status")
    made_invalid = pc.and_kleene(bounce, pc.not_equal(status, Status.INVALID.value))
    confirmed = pc.and_kleene(engaged, pc.equal(status, Status.CATCHALL.value))

    evidence = pc.if_else(
        bounce,
        Evidence.BOUNCED.value,
        pc.if_else(engaged, Evidence.ENGAGED.value, Evidence.NONE.value),
    )
    seconds = pc.if_else(
        bounce, bounced_at, pc.if_else(engaged, engaged_at, pa.scalar(None, pa.float64()))
    )
    evidence_at = pc.cast(
        pc.cast(pc.round(pc.multiply(seconds, 1_000_000)), pa.int64()),
        pa.timestamp("us", tz="UTC"),
    )
    valid_score = pc.if_else(
        pc.fill_null(results.column("smtp_check"), False),
        DEFAULT_SCORES[Status.VALID],
        VALID_WITHOUT_SMTP_SCORE,
    )
    updates = {
        "status": pc.if_else(
            made_invalid, Status.INVALID.value, pc.if_else(confirmed, Status.VALID.value, status)
        ),
        "reason": pc.if_else(
            made_invalid,
            pa.scalar(Reason.BOUNCED.value),
            pc.if_else(confirmed, pa.scalar(None, pa.string()), results.column("reason")),
        ),
        "score": pc.if_else(
            made_invalid,
            DEFAULT_SCORES[Status.INVALID],
            pc.if_else(confirmed, valid_score, results.column("score")),
        ),
        "is_deliverable": pc.if_else(
            made_invalid, False, pc.if_else(confirmed, True, results.column("is_deliverable"))
        ),
        "evidence": evidence,
        "evidence_at": evidence_at,
        "complained": pc.or_kleene(_true(taken("complained")), results.column("complained")),
        "unsubscribed": pc.or_kleene(_true(taken("unsubscribed")), results.column("unsubscribed")),
    }
    schema = results.schema
    for name, values in updates.items():
        index = schema.get_field_index(name)
        results = results.set_column(
            index, schema.field(index), pc.cast(values, schema.field(index).type)
        )
    taught = Taught(
        bounced=_count(made_invalid),
        catchalls_confirmed=_count(confirmed),
        engaged=_count(engaged),
        complained=_count(_true(taken("complained"))),
        unsubscribed=_count(_true(taken("unsubscribed"))),
    )
    return results, taught


def _true(mask: "pa.Array | pa.ChunkedArray") -> "pa.Array":
    import pyarrow.compute as pc

    return pc.fill_null(mask, False)


def _count(mask: "pa.Array | pa.ChunkedArray") -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.cast(mask, "int64")).as_py() or 0)

"""How long a stored verdict may stand in for a new verification (PRODUCT.md, "Verdict store").

Mailboxes decay: a list loses about a quarter of its good addresses a year, so a `valid` verdict
is trusted for a month; an `invalid` one (a mailbox that was deleted, a domain without mail) rarely
comes back, so for three months; a full mailbox (`risky`) is a passing state, a week. `unknown`
is never reused: it says the run could not tell. The defaults are in :data:`DEFAULT_MAX_AGE`;
``--max-age 30d`` sets every status, ``--max-age valid=14d,risky=1d`` some, and both mix
(``--max-age 30d,risky=2d``). See docs/pipeline.md "Verdict store".
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from listhygiene.durations import parse_duration
from listhygiene.statuses import BEFORE_SMTP_REASONS, Status

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEFAULT_MAX_AGE", "Freshness", "parse_duration", "parse_max_age"]

DAY = 86400.0
#: Seconds a verdict of each status stays fresh (``unknown``: never reused).
DEFAULT_MAX_AGE: Mapping[str, float] = {
    Status.VALID.value: 30 * DAY,
    Status.INVALID.value: 90 * DAY,
    Status.RISKY.value: 7 * DAY,
    Status.DISPOSABLE.value: 90 * DAY,
    Status.CATCHALL.value: 30 * DAY,
    Status.ROLE.value: 30 * DAY,
    Status.UNKNOWN.value: 0.0,
}


def parse_max_age(text: str) -> dict[str, float]:
    """``30d`` (every status), ``valid=14d,risky=1d`` (those), or both mixed, in any order
    (``risky=2d,30d``) -> seconds by status. ``unknown`` cannot be given: it is never reused."""
    statuses = sorted({s.value for s in Status} - {Status.UNKNOWN.value})
    every: dict[str, float] = {}
    some: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        status, sep, duration = part.partition("=")
        if not sep:
            every = dict.fromkeys(statuses, parse_duration(part))
            continue
        status = status.strip().lower()
        if status not in statuses:
            known = ", ".join(statuses)
            raise ValueError(f"{status!r} has no max age to set (one of {known}; unknown never)")
        some[status] = parse_duration(duration)
    if not every and not some:
        raise ValueError(f"{text!r} gives no max age")
    return {**every, **some}


@dataclass(frozen=True)
class Freshness:
    """Which stored verdicts may be reused: young enough for their status, never ``unknown``,
    and checked at least as deeply as the run wants (a DNS-only verdict never stands in for an
    SMTP one; an SMTP verdict may stand in for a DNS-only run)."""

    max_age: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MAX_AGE))

    @classmethod
    def of(cls, max_age: "str | float | Mapping[str, float] | None") -> "Freshness":
        """From the API's ``max_age``: a duration or ``STATUS=DURATION`` list, seconds for every
        status, a mapping of status to seconds, or None for the defaults."""
        ages = dict(DEFAULT_MAX_AGE)
        if isinstance(max_age, str):
            ages.update(parse_max_age(max_age))
        elif isinstance(max_age, int | float):
            ages.update({s: float(max_age) for s in ages if s != Status.UNKNOWN.value})
        elif max_age is not None:
            unknown = set(max_age) - set(ages)
            if unknown:
                raise ValueError(f"not statuses: {', '.join(sorted(unknown))}")
            ages.update({s: float(v) for s, v in max_age.items()})
        ages[Status.UNKNOWN.value] = 0.0
        return cls(ages)

    def limit(self, status: str) -> float:
        return float(self.max_age.get(status, 0.0))

    def reusable(self, stored: "pa.Table", *, check_smtp: bool, now: float) -> "pa.Array":
        """Which rows of a :meth:`VerdictStore.fetch` table may stand in for a verification
        (vectorised: one mask over the whole table). A run with SMTP takes a verdict checked
        without it only when the verdict came before SMTP (:data:`BEFORE_SMTP_REASONS`)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        before_smtp = pa.array(sorted(BEFORE_SMTP_REASONS), pa.string())

        status = stored.column("status")
        limits = pc.fill_null(
            pc.index_in(status, value_set=pa.array(list(self.max_age), pa.string())), -1
        )
        seconds = pa.array([*self.max_age.values(), 0.0], pa.float64())
        max_age = pc.take(seconds, pc.if_else(pc.less(limits, 0), len(self.max_age), limits))
        young = pc.less_equal(pc.subtract(pa.scalar(now), stored.column("checked_at")), max_age)
        deep_enough = (
            pc.or_(stored.column("smtp_check"), pc.is_in(stored.column("reason"), before_smtp))
            if check_smtp
            else pa.scalar(True)
        )
        return pc.and_(pc.and_(young, pc.greater(max_age, 0.0)), deep_enough)

    @property
    def longest(self) -> float:
        """The oldest a reusable verdict can be: ``prune`` drops what is older."""
        return max(self.max_age.values())

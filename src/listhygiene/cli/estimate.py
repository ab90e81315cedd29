"""``listhygiene clean INPUT --estimate``: what the run would do, as a short table for people
(``--json`` prints :meth:`Estimate.as_dict <listhygiene.pipeline.Estimate.as_dict>` instead).
The work is :func:`listhygiene.estimate`'s; this only words it."""

from typing import TYPE_CHECKING

from listhygiene.durations import format_duration

if TYPE_CHECKING:
    from listhygiene.pipeline import Estimate

__all__ = ["describe"]


def describe(estimate: "Estimate") -> list[str]:
    """The plain output's lines."""
    e = estimate
    rows = [
        ("rows", f"{e.rows:,}", f"{e.empty:,} without an address, {e.bad_records:,} bad records"),
        ("distinct addresses", f"{e.distinct:,}", f"{e.invalid_syntax:,} invalid by syntax"),
        (
            "reused verdicts",
            f"{e.reused:,}",
            f"from {e.verdict_store}" if e.verdict_store else "no verdict store",
        ),
        ("left to verify", f"{e.to_verify:,}", f"on the {e.backend} backend"),
        _credits(e),
        _time(e),
    ]
    width = max(len(value) for _, value, _ in rows) + 2
    lines = [f"{e.source} (column {e.email_column}): an estimate, nothing was verified"]
    lines += [f"  {label:<20}{value:>{width}}   {note}" for label, value, note in rows]
    return lines


def _credits(e: "Estimate") -> tuple[str, str, str]:
    if e.credits is None:
        return ("credits", "-", "the local engine charges none")
    c = e.credits
    short = "enough" if c.enough else f"{c.needed - c.balance:,} short"
    return (
        "credits",
        f"{c.needed:,}",
        f"asked for before it starts; balance {c.balance:,}: {short}",
    )


def _time(e: "Estimate") -> tuple[str, str, str]:
    t = e.time
    if not t.domains:
        return ("time", "-", "nothing to verify")
    what = (
        f"{t.domains:,} domains, {t.sessions:,} SMTP sessions"
        if t.check_smtp
        else f"{t.domains:,} domains, DNS only (no SMTP)"
    )
    limited = f"; set by {t.limited_by}" if t.limited_by else ""
    return ("time (estimate)", format_duration(t.seconds), what + limited)

"""When to ask again after a temporary refusal (greylisting, 421); see docs/engine.md, "Retries".

A greylisting host refuses a new (client, sender, recipient) triplet and accepts it once some
delay has passed since it first saw it. Asking earlier costs the host a session and changes
nothing; asking much later only makes the run longer. So waits are measured from a domain's first
refusal, and each retry goes at the shortest wait that can pass:

1. a delay the reply names ("try again in 30 seconds", "Greylisted for 5 minutes", "come back in
   00:05:00"), plus a small margin; if that is longer than the run is willing to wait, no retry
   in this run: long waits belong to the pipeline's second pass (``--retry-unknown-after``);
2. else the wait that already passed on the same host (a host keeps one delay for all triplets);
3. else the next point of the ``retry_delays`` schedule, skipping points already known to fail
   (this domain's own retries, and the host's refusals of other triplets).

What a host's greylisting has shown (:class:`HostGreylisting`) is the host's, not a triplet's: a
fleet sharing a store shares it (``host_memory.FleetMemory``), so a worker retries at the wait
another learnt to pass and never at one another learnt to fail.
"""

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

__all__ = ["HostGreylisting", "margin", "named_delay", "next_retry"]

_SECONDS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600}
_SECONDS |= {"hr": 3600, "hour": 3600}
_UNIT = r"(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b"
# Conservative: a retry word, at most a few words without digits or a sentence's end, then
# "in"/"after"/"for" and an amount with a unit (or H:MM:SS, as milter-greylist says it).
_NAMED = re.compile(
    r"\b(?:try(?:\s+again)?|retry|resend|come\s+back|wait|gr[ae]ylist(?:ed|ing)?|deferred)\b"
    r"[^0-9.;:]{0,40}?\b(?:in|after|for)\s+(?:at\s+least\s+)?"
    r"(?:(\d{1,2}):(\d{2}):(\d{2})\b|(\d{1,6})\s*" + _UNIT + r"(?:,?\s*(?:and\s+)?(\d{1,6})\s*"
    r"(seconds?|secs?|s)\b)?)",
    re.IGNORECASE,
)
#: A named delay longer than a day is not a greylisting delay; ignore it.
_MAX_NAMED = 86_400.0


def named_delay(text: str) -> float | None:
    """Seconds a temporary refusal asks us to wait, when its text says so; else None."""
    match = _NAMED.search(text)
    if match is None:
        return None
    hours, minutes, seconds, amount, unit, extra, _ = match.groups()
    if hours is not None:
        value = int(hours) * 3600 + int(minutes) * 60 + int(seconds)
    else:
        value = int(amount) * _unit_seconds(unit) + (int(extra) if extra else 0)
    return float(value) if value <= _MAX_NAMED else None


def _unit_seconds(unit: str) -> int:
    word = unit.lower().rstrip("s") or "s"
    return _SECONDS.get(word, _SECONDS.get(word[:1], 1))


def margin(delay: float) -> float:
    """Slack after a named delay: servers count whole seconds and compare either way."""
    return min(1.0, 0.1 + 0.1 * delay)


@dataclass
class HostGreylisting:
    """What one host's greylisting has shown this run, as waits from a triplet's first refusal."""

    #: The shortest wait after which a refused triplet was accepted.
    passed: float | None = None
    #: The longest wait after which a refused triplet was still refused.
    refused: float = 0.0

    def saw_pass(self, waited: float) -> None:
        self.passed = waited if self.passed is None else min(self.passed, waited)

    def saw_refusal(self, waited: float) -> None:
        self.refused = max(self.refused, waited)

    def facts(self) -> dict[str, Any]:
        """What a fleet shares of it (``host:<ip>`` in the store): nothing before it shows."""
        facts: dict[str, Any] = {}
        if self.passed is not None:
            facts["greylist_passed"] = round(self.passed, 3)
        if self.refused:
            facts["greylist_refused"] = round(self.refused, 3)
        return facts

    def merge(self, facts: Mapping[str, Any]) -> None:
        """Take what another worker's triplets showed: the shorter wait that passed, the
        longer one still refused (the host keeps one delay for every triplet)."""
        for name, saw in (
            ("greylist_passed", self.saw_pass),
            ("greylist_refused", self.saw_refusal),
        ):
            with contextlib.suppress(TypeError, ValueError):
                waited = float(facts[name]) if facts.get(name) is not None else -1.0
                if 0.0 <= waited <= _MAX_NAMED:  # a wait, not garbage
                    saw(waited)


def next_retry(
    *,
    schedule: tuple[float, ...],
    max_wait: float,
    tried: float,
    named: float | None = None,
    host: HostGreylisting | None = None,
) -> float | None:
    """Seconds after the domain's first refusal at which to ask again; None: not in this run.

    ``schedule`` are the waits between retries when nothing better is known (empty: no retries
    at all); ``max_wait`` the longest wait a named or learnt delay may ask for (the schedule's own
    sum, if longer, counts instead); ``tried`` the longest wait after which this domain was still
    refused (0 after its first refusal).
    """
    if not schedule:
        return None
    floor = max(tried, host.refused if host is not None else 0.0)
    bound = max(sum(schedule), max_wait)
    if named is not None:
        target = named + margin(named)
        if target > floor:
            return target if target <= bound else None
        # it was refused after the delay it named: fall back on what else is known
    if host is not None and host.passed is not None and floor < host.passed <= bound:
        return host.passed
    return next((point for point in accumulate(schedule) if point > floor), None)

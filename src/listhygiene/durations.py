"""Durations as people write them on a command line: ``90``, ``90s``, ``15m``, ``12h``, ``30d``,
``2w`` (``sec`` and ``min`` too). One reading for every option that takes one
(``--retry-unknown-after``, ``--max-age``)."""

import re

__all__ = ["parse_duration"]

_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds; ValueError naming the text when it is not a duration."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 15m, 12h, 30d, 2w)")
    return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]

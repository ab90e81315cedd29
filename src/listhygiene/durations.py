"""Durations as people write them on a command line: ``90``, ``90s``, ``15m``, ``12h``, ``30d``,
``2w`` (``sec`` and ``min`` too). One reading for every option that takes one
(``--retry-unknown-after``, ``--max-age``), and :func:`format_duration` for the way back."""

import re

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds; ValueError naming the text when it is not a duration."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 15m, 12h, 30d, 2w)")
    return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``37 min``, ``2 h 10 min``, ``3 d 4 h``: the two largest units,
    rounded to the smaller (seconds shown only under ten minutes)."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    minutes = round(whole / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(round(whole / 3600), 24)
    return f"{days} d {hours} h" if hours else f"{days} d"

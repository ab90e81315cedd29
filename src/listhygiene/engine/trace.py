"""A recorder of one verification's conversation, for support and debugging
(``listhygiene explain``; docs/engine.md, "Explaining one address").

The recorder is handed down through a context variable that the run's tasks inherit (the
resolver's lookups and the prober's sessions are tasks of the run), so no signature of the hot
path changes. When nothing records, each DNS query and SMTP exchange pays one
``ContextVar.get`` returning None: nothing is formatted, timed or kept.
"""

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Trace", "TraceEvent", "active", "recording"]


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One step: when (ms since the trace started), what kind, and what was said."""

    at_ms: float
    kind: str  # "dns", "connect", "send", "reply", "note", "decision"
    text: str
    #: How long the step took (a query's answer, a command's reply), when it is a round trip.
    took_ms: float | None = None
    #: Who was talked to ("127.0.0.5:2525", the nameserver), when known.
    peer: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_ms": round(self.at_ms, 1),
            "kind": self.kind,
            "peer": self.peer,
            "text": self.text,
            "took_ms": None if self.took_ms is None else round(self.took_ms, 1),
        }


@dataclass
class Trace:
    """The events of one verification, in the order they happened."""

    started: float = field(default_factory=time.perf_counter)
    events: list[TraceEvent] = field(default_factory=list)

    def now_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def add(self, kind: str, text: str, *, took_ms: float | None = None, peer: str = "") -> None:
        self.events.append(TraceEvent(self.now_ms(), kind, text, took_ms, peer))


_CURRENT: ContextVar[Trace | None] = ContextVar("listhygiene_trace", default=None)


def active() -> Trace | None:
    """The recorder of the current task, if one records."""
    return _CURRENT.get()


@contextlib.contextmanager
def recording(trace: Trace) -> Iterator[Trace]:
    """Record what the engine does inside this block (and in the tasks it starts)."""
    token = _CURRENT.set(trace)
    try:
        yield trace
    finally:
        _CURRENT.reset(token)

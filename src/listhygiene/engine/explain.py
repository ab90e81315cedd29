"""One address's whole verification, told step by step (``listhygiene explain``; docs/engine.md,
"Explaining one address"): the DNS questions and answers, each SMTP command and reply with its
round trip, the row of the decision table that decided, and what the engine's sessions cost the
mail hosts (its ``politeness``, the counts a run's summary has).

A fresh engine is used, so that nothing comes from a cache: what is printed is what was asked.
The catch-all probe (a random local part) is part of the conversation and shows as such.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from listhygiene.engine.engine import Engine
from listhygiene.engine.settings import EngineSettings
from listhygiene.engine.trace import Trace, recording
from listhygiene.results import VerificationResult
from listhygiene.statuses import ROW_CONDITIONS, decision_row

__all__ = ["Explanation", "explain"]

#: The catch-all probe's recipient (engine/probe.py, ``_random_local``).
_PROBE = re.compile(r"^RCPT TO:<lh-[a-z0-9]{14}@")


@dataclass(frozen=True)
class Explanation:
    """The result, the recorded conversation, the deciding row of the decision table, and the
    engine's :attr:`~listhygiene.engine.Engine.politeness` once it had decided."""

    result: VerificationResult
    trace: Trace
    row: int
    politeness: dict[str, int] = field(
        default_factory=lambda: {
            "sessions": 0,
            "max_sessions_one_host": 0,
            "limits_met": 0,
            "bans": 0,
        }
    )

    def as_dict(self) -> dict[str, Any]:
        return {
            "result": self.result.model_dump(mode="json"),
            "events": [event.as_dict() for event in self.trace.events],
            "decision": {
                "row": self.row,
                "condition": ROW_CONDITIONS[self.row],
                "status": self.result.status.value,
                "reason": self.result.reason.value if self.result.reason else None,
            },
            "politeness": dict(self.politeness),
        }

    def lines(self) -> list[str]:
        """The conversation as text, one step a line."""
        out = [f"explaining {self.result.email or '(empty)'}"]
        arrows = {"send": ">>", "reply": "<<", "dns": "DNS", "connect": "TCP", "note": "--"}
        for event in self.trace.events:
            took = f"  ({event.took_ms:.1f} ms)" if event.took_ms is not None else ""
            peer = f" {event.peer}" if event.peer else ""
            head = f"{event.at_ms:9.1f} ms {arrows.get(event.kind, event.kind):>3}{peer}"
            text = event.text
            if event.kind == "send" and _PROBE.search(text):
                text += "   (catch-all probe: a random local part)"
            first, *rest = text.splitlines() or [""]
            out.append(f"{head}  {first}{took}")
            out.extend(f"{' ' * len(head)}  {line}" for line in rest)
        r = self.result
        out.append(
            f"decision: row {self.row} of the decision table ({ROW_CONDITIONS[self.row]}) -> "
            f"{r.status.value}" + (f", reason {r.reason.value}" if r.reason else "")
        )
        facts = r.facts
        out.append(
            f"facts: dns={facts.dns.value} smtp_checked={facts.smtp_checked} "
            f"mailbox={facts.mailbox.value} catchall={r.is_catchall} disposable={r.is_disposable}"
            f" role={r.is_role} free={r.is_free}"
        )
        if r.suggestion:
            out.append(f"did you mean: {r.suggestion}")
        if r.mx_provider:
            out.append(f"mail provider: {r.mx_provider}")
        out.append(f"politeness: {_politeness(self.politeness)}")
        return out


def _politeness(counts: dict[str, int]) -> str:
    """The counts as one line: 1 session, at most 1 at once to one host, 0 limits met, 0 bans."""

    def plural(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    return (
        f"{plural(counts.get('sessions', 0), 'session')}, at most "
        f"{counts.get('max_sessions_one_host', 0)} at once to one host, "
        f"{plural(counts.get('limits_met', 0), 'limit')} met, "
        f"{plural(counts.get('bans', 0), 'ban')}"
    )


async def explain(
    email: str, settings: EngineSettings | None = None, *, check_smtp: bool | None = None
) -> Explanation:
    """Verify ``email`` with a fresh engine, recording every step."""
    engine = Engine(settings)
    trace = Trace()
    try:
        with recording(trace):
            result = await engine.verify(email, check_smtp=check_smtp)
    finally:
        await engine.aclose()
    row, _, _ = decision_row(result.facts)
    return Explanation(result, trace, row, dict(engine.politeness))

"""``summary.json``: what a run did, built once at its end from what each stage tallied.

The shape is the product's (docs/pipeline.md, "Summary"); :class:`Summary` holds a run's facts,
frozen, and :meth:`Summary.as_dict` spells them in that shape. :func:`merged_summary` spells the
same shape for a chunk merge, from the chunks' summaries; both are here so that they cannot
drift apart.
"""

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from listhygiene._version import __version__
from listhygiene.pipeline.advice import TOP_SUGGESTIONS
from listhygiene.pipeline.layout import STATUSES, status_file
from listhygiene.pipeline.writer import Written

__all__ = [
    "POLITENESS_KEYS",
    "Summary",
    "merged_advice",
    "merged_health",
    "merged_summary",
    "run_health",
    "run_politeness",
    "uncertain_credits",
]

#: Domains listed in ``top_domains``.
TOP_DOMAINS = 15
#: The keys of the summary's ``politeness`` (docs/pipeline.md, "Politeness"), all integers.
POLITENESS_KEYS = ("sessions", "max_sessions_one_host", "limits_met", "bans")
#: Of those, the one that is a peak rather than a count: attempts and chunks take its maximum.
_PEAKS = frozenset({"max_sessions_one_host"})


@dataclass(frozen=True)
class Summary:
    """The facts of one finished run."""

    #: The source as detected (:class:`~listhygiene.pipeline.sources.SourceInfo`).
    info: Any
    email_column: str
    out: str
    backend: str
    check_smtp: bool | None
    rows: int
    bad_records: list[dict[str, Any]]
    distinct: int
    written: Written
    #: ``verified``, ``reused``, ``retried`` addresses.
    counters: Mapping[str, int]
    resumed: bool
    uncertain_credits: Mapping[str, int]
    started_at: datetime
    timings: Mapping[str, float]
    health: Mapping[str, Any]
    quality: Mapping[str, Any]
    verdicts: Mapping[str, int]
    #: What the run's SMTP sessions cost the mail hosts (:func:`run_politeness`).
    politeness: Mapping[str, Any] | None = None
    verdict_store: Mapping[str, Any] | None = None
    #: What the store's feedback events taught (``RunVerdicts.feedback``; docs/feedback.md).
    feedback: Mapping[str, Any] | None = None
    finished_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_dict(self) -> dict[str, Any]:
        written = self.written
        by_status = {s: int(written.by_status[s]) for s in STATUSES}
        per_domain: dict[str, Counter[str]] = {}
        for (domain, status), n in written.domains.items():
            if domain:
                per_domain.setdefault(domain, Counter())[status] += n
        top = sorted(per_domain.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        summary: dict[str, Any] = {
            "listhygiene_version": __version__,
            "input": {
                "name": self.info.name,
                "kind": self.info.kind,
                "encoding": self.info.encoding,
                "delimiter": self.info.delimiter,
                "email_column": self.email_column,
                "rows": self.rows,
                "bad_records": self.bad_records,
            },
            "output": {
                "folder": self.out,
                "files": _files(by_status),
            },
            "backend": {"name": self.backend, "check_smtp": self.check_smtp},
            "rows": {
                "total": self.rows,
                "by_status": by_status,
                "by_reason": dict(sorted(written.reasons.items())),
                "empty_email": written.blank,
            },
            "addresses": {
                "distinct": self.distinct,
                "duplicate_rows": self.rows - written.blank - self.distinct,
                "verified": int(self.counters.get("verified", 0)),
                "reused": int(self.counters.get("reused", 0)),
                "retried": int(self.counters.get("retried", 0)),
                "resumed": self.resumed,
            },
            "credits": {"used": int(written.credits), **self.uncertain_credits},
            **written.advice.summary(),  # suggestions, mx_providers (pipeline/advice.py)
            "top_domains": [
                {"domain": d, "rows": sum(c.values()), "by_status": dict(c)}
                for d, c in top[:TOP_DOMAINS]
            ],
            "timings": {
                "started_at": _iso(self.started_at),
                "finished_at": _iso(self.finished_at),
                "seconds": {k: round(v, 3) for k, v in self.timings.items()},
            },
            "health": {**self.health, "accepted": bool(self.health.get("problem"))},
            "quality": dict(self.quality),
            "verdicts": dict(self.verdicts),
            "politeness": run_politeness(self.politeness),
        }
        if self.verdict_store is not None:
            summary["verdict_store"] = dict(self.verdict_store)
        if self.feedback is not None:
            summary["feedback"] = dict(self.feedback)
        return summary


def uncertain_credits(backend: Any) -> dict[str, int]:
    """``{"uncertain": N}`` when requests the backend sent may have been charged without their
    answer arriving (form A batches that timed out: docs/backends.md); else nothing."""
    uncertain = int(getattr(backend, "uncertain_credits", 0) or 0)
    return {"uncertain": uncertain} if uncertain else {}


def run_health(
    stored: Mapping[str, Any] | None, current: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The health of the whole run: what earlier attempts of a resumed run measured, plus this
    attempt's (a resumed run that probes nothing must not forget that the first one could not
    reach port 25)."""
    from listhygiene.engine.health import RunHealth

    counts = ("domains_probed", "domains_reached", "domains_unreachable", "domains_blocked")
    if not stored and not current:
        return {}
    total = {
        name: int((stored or {}).get(name, 0)) + int((current or {}).get(name, 0))
        for name in counts
    }
    health = RunHealth(
        domains_probed=total["domains_probed"],
        domains_reached=total["domains_reached"],
        domains_unreachable=total["domains_unreachable"],
        domains_blocked=total["domains_blocked"],
    )
    return health.as_dict()


def run_politeness(*parts: Mapping[str, Any] | None) -> dict[str, int]:
    """What the SMTP sessions of several parts of one run cost the mail hosts, as the summary's
    ``politeness``: the attempts of a resumed run, or the chunks of a merged one. ``sessions``,
    ``limits_met`` and ``bans`` add up; ``max_sessions_one_host`` is the largest (attempts follow
    each other, and chunks split by domain mostly talk to different hosts: a sum would overstate).
    A part that is None or lacks a key (a remote backend, which cannot know; a summary written
    before the field existed) counts zeros, so the four keys are always there."""
    total = dict.fromkeys(POLITENESS_KEYS, 0)
    for part in parts:
        for key in POLITENESS_KEYS:
            value = _whole((part or {}).get(key))
            total[key] = max(total[key], value) if key in _PEAKS else total[key] + value
    return total


def merged_summary(
    parts: list[dict[str, Any]],
    split: Mapping[str, Any],
    out: str,
    expected_rows: int,
    file_rows: Mapping[str, int],
    health: Mapping[str, Any],
) -> dict[str, Any]:
    """One run's summary from the chunks': counts added up (each distinct address is in one
    chunk, so the sums are the list's), the top domains ranked again."""
    first = parts[0]
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    addresses: Counter[str] = Counter()
    credits: dict[str, float] = {}
    verdicts: Counter[str] = Counter()
    domains: dict[str, dict[str, Any]] = {}
    empty = 0
    for part in parts:
        rows = part.get("rows", {})
        by_status.update({k: int(v) for k, v in rows.get("by_status", {}).items()})
        by_reason.update({k: int(v) for k, v in rows.get("by_reason", {}).items()})
        empty += int(rows.get("empty_email", 0))
        for key, value in (part.get("addresses") or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                addresses[key] += value
        for key, value in (part.get("credits") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                credits[key] = credits.get(key, 0) + value
        verdicts.update({k: int(v) for k, v in (part.get("verdicts") or {}).items()})
        for entry in part.get("top_domains") or []:
            # a domain is in one chunk, or a giant one in several (each lists it: it is big)
            seen = domains.setdefault(entry["domain"], {"domain": entry["domain"], "rows": 0})
            seen["rows"] += int(entry["rows"])
            statuses = Counter(seen.get("by_status") or {})
            statuses.update(entry.get("by_status") or {})
            seen["by_status"] = dict(statuses)
    starts = [p.get("timings", {}).get("started_at") for p in parts]
    phases: Counter[str] = Counter()
    for part in parts:
        phases.update(part.get("timings", {}).get("seconds", {}))
    top = sorted(domains.values(), key=lambda e: (-int(e["rows"]), e["domain"]))[:TOP_DOMAINS]
    source = first.get("input", {})
    merged = {
        "listhygiene_version": first.get("listhygiene_version"),
        "input": {
            "name": split.get("source", source.get("name")),
            "kind": split.get("kind", source.get("kind")),
            "encoding": split.get("encoding"),
            "delimiter": split.get("delimiter"),
            "email_column": split.get("email_column", source.get("email_column")),
            "rows": expected_rows,
            "bad_records": list(split.get("bad_records", [])),
            "chunks": len(parts),
        },
        "merged_from": [p["output"]["folder"] for p in parts],
        "output": {
            "folder": out,
            "files": _files(file_rows),
        },
        "backend": dict(first.get("backend", {})),
        "rows": {
            "total": sum(int(p["rows"]["total"]) for p in parts),
            "by_status": {s: int(by_status.get(s, 0)) for s in STATUSES},
            "by_reason": dict(sorted(by_reason.items())),
            "empty_email": empty,
        },
        "addresses": {
            **dict(addresses),
            "resumed": any((p.get("addresses") or {}).get("resumed") for p in parts),
        },
        "credits": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in credits.items()},
        **merged_advice(parts),
        "top_domains": top,
        "timings": {
            "started_at": min((s for s in starts if s), default=None),
            "finished_at": _iso(datetime.now(UTC)),
            # the chunks' phases added up: work done on all workers, not wall time
            "seconds": {k: round(v, 3) for k, v in phases.items()},
        },
        "health": {**health, "accepted": bool(health["problem"])},
        "verdicts": {k: int(verdicts.get(k, 0)) for k in ("reused", "verified", "changed")},
        # sessions, limits met and bans added up; the most at once to one host, the largest
        "politeness": run_politeness(*(part.get("politeness") for part in parts)),
    }
    taught = [p["feedback"] for p in parts if isinstance(p.get("feedback"), Mapping)]
    if taught:  # each address is in one chunk: the counts add up
        merged["feedback"] = {
            k: sum(_whole(t.get(k)) for t in taught) for k in taught[0] if k != "events"
        } | {"events": max(_whole(t.get("events")) for t in taught)}
    return merged


def merged_advice(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The chunks' ``suggestions`` and ``mx_providers`` added up, in the shape of one run's
    (:meth:`Advice.summary <listhygiene.pipeline.advice.Advice.summary>`). Exact: a suggestion
    belongs to a domain, and a domain to one chunk (a giant domain cut across chunks is a known
    one, never "corrected")."""
    pairs: Counter[tuple[str, str]] = Counter()
    providers: Counter[str] = Counter()
    rows = domains = 0
    for part in parts:
        suggestions = part.get("suggestions") or {}
        rows += int(suggestions.get("rows", 0))
        domains += int(suggestions.get("domains", 0))
        for entry in suggestions.get("top") or []:
            pairs[(entry["domain"], entry["suggested"])] += int(entry["rows"])
        providers.update({k: int(v) for k, v in (part.get("mx_providers") or {}).items()})
    top = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SUGGESTIONS]
    return {
        "suggestions": {
            "rows": rows,
            "domains": domains,
            "top": [{"domain": d, "suggested": s, "rows": n} for (d, s), n in top],
        },
        "mx_providers": dict(sorted(providers.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def merged_health(healths: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The chunks' domain counts added up, judged by the engine's own rule
    (:class:`listhygiene.engine.health.RunHealth`)."""
    from listhygiene.engine.health import RunHealth

    total = RunHealth()
    for health in healths:
        for name in ("domains_probed", "domains_reached", "domains_unreachable", "domains_blocked"):
            setattr(total, name, getattr(total, name) + int((health or {}).get(name) or 0))
    return total.as_dict()


def _files(rows: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """The summary's ``output.files``: each status's file and its row count."""
    return {s: {"path": status_file(s), "rows": int(rows[s])} for s in STATUSES}


def _whole(value: Any) -> int:
    """A count read back from JSON: a non-negative integer, anything else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")

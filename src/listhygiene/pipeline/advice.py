"""Typo suggestions and mail providers in a clean run (docs/results.md, "Extra columns").

The per-status files keep exactly the input's columns and form A's result columns unless the
user asks for more (``--columns +suggestion,+mx_provider``, ``extra_columns=``); the summary and
the report always count both. Suggestions are made at write time, per distinct domain, against
the big providers and the list's own most common domains (engine/suggest.py); the provider comes
with each address's result (engine/providers.py), none for a verdict reused from the verdict
store, which does not keep it.
"""

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listhygiene.engine.suggest import Suggester
from listhygiene.errors import ConfigurationError
from listhygiene.results import EXTRA_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["COMMON_DOMAINS", "Advice", "common_domains", "parse_extra_columns"]

#: The list's most common domains taken as candidates (and as known, never "corrected").
COMMON_DOMAINS = 200
#: A domain counts among the list's own only with at least this many rows.
COMMON_MIN_ROWS = 5
#: Suggestions listed in the summary.
TOP_SUGGESTIONS = 15


def parse_extra_columns(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"+suggestion,+mx_provider"``, ``"suggestion"`` or a list of names -> the extra
    columns in :data:`EXTRA_FIELDS` order; an unknown name is a usage error."""
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = {str(p).strip().lstrip("+") for p in parts if str(p).strip()}
    unknown = sorted(names - set(EXTRA_FIELDS))
    if unknown:
        raise ConfigurationError(
            f"unknown extra column(s) {', '.join(unknown)}; the extra columns are "
            f"{', '.join(EXTRA_FIELDS)}"
        )
    return tuple(name for name in EXTRA_FIELDS if name in names)


def common_domains(db: Any, rows: str, limit: int = COMMON_DOMAINS) -> list[str]:
    """The most common domains of the run's rows (``rows``: a DuckDB relation of the staged
    parts with an ``_address`` column), most common first."""
    found = db.execute(
        f"SELECT lower(split_part(_address, '@', -1)) AS d, count(*) AS n FROM {rows} "
        "WHERE _address IS NOT NULL GROUP BY d HAVING count(*) >= ? ORDER BY n DESC, d LIMIT ?",
        [COMMON_MIN_ROWS, limit],
    ).fetchall()
    return [str(d) for d, _ in found if d]


@dataclass
class Advice:
    """The extra columns of each written batch, and their tallies for the summary."""

    suggester: Suggester = field(default_factory=Suggester)
    #: Rows per (domain, suggested domain).
    suggestions: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Rows per provider (``none``: no mail host, or not known).
    providers: Counter[str] = field(default_factory=Counter)

    def columns(
        self, emails: "pa.Array", domains: "pa.Array", providers: "pa.Array"
    ) -> dict[str, "pa.Array"]:
        """``suggestion`` and ``mx_provider`` for a batch (nulls where the email is empty)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        unique = pc.unique(domains).to_pylist()
        better = {d: self.suggester.domain(d) for d in unique if d}
        found = pa.array([better.get(d) if d else None for d in unique], pa.string())
        if found.null_count == len(found):  # the usual batch: no typo at all, no string work
            suggested = pa.nulls(len(domains), pa.string())
            suggestion = suggested
        else:
            where = pc.index_in(domains, value_set=pa.array(unique, pa.string()))
            suggested = pc.take(found, where)
            local = pc.replace_substring_regex(emails, r"@[^@]*$", "")
            suggestion = pc.if_else(
                pc.is_valid(suggested),
                pc.binary_join_element_wise(local, suggested, "@"),
                pa.scalar(None, pa.string()),
            )
        for (domain, to), n in _pairs(domains, suggested).items():
            self.suggestions[(domain, to)] += n
        counts = pc.value_counts(pc.fill_null(providers, "none")).to_pylist()
        self.providers.update({c["values"]: c["counts"] for c in counts})
        return {"suggestion": suggestion, "mx_provider": providers}

    def summary(self) -> dict[str, Any]:
        """``suggestions`` and ``mx_providers`` of ``summary.json``."""
        top = sorted(self.suggestions.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SUGGESTIONS]
        return {
            "suggestions": {
                "rows": sum(self.suggestions.values()),
                "domains": len(self.suggestions),
                "top": [{"domain": d, "suggested": s, "rows": n} for (d, s), n in top],
            },
            "mx_providers": dict(sorted(self.providers.items(), key=lambda kv: (-kv[1], kv[0]))),
        }


def _pairs(domains: "pa.Array", suggested: "pa.Array") -> Mapping[tuple[str, str], int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.is_valid(suggested)
    if not pc.any(mask).as_py():
        return {}
    table = pa.table({"d": pc.filter(domains, mask), "s": pc.filter(suggested, mask)})
    grouped = table.group_by(["d", "s"]).aggregate([([], "count_all")]).to_pylist()
    return {(g["d"], g["s"]): int(g["count_all"]) for g in grouped}

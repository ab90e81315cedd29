"""Typo suggestions and mail providers in a clean run (docs/results.md, "Extra columns").

The per-status files keep exactly the input's columns and form A's result columns unless the
user asks for more (``--columns +suggestion,+mx_provider``, ``extra_columns=``); the summary and
the report always count both. Suggestions are made at write time, per distinct domain, against
the big providers and the list's own most common domains (engine/suggest.py); the provider comes
with each address's result (engine/providers.py), also with a verdict reused from the verdict
store, which keeps it per domain.
"""

from collections import Counter
from collections.abc import Iterable
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
    """The extra columns of each written batch, and their tallies for the summary.

    A row's domain and provider are those of its result's profile (pipeline/worktables.py), so
    the suggestion is found once per profile and the tallies are counted per profile from the
    rows written of each, never per row (docs/pipeline.md, "Speed")."""

    suggester: Suggester = field(default_factory=Suggester)
    #: Rows per (domain, suggested domain).
    suggestions: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Rows per provider (``none``: no mail host, or not known).
    providers: Counter[str] = field(default_factory=Counter)

    def suggested(self, domains: "pa.Array") -> "pa.Array":
        """The domain suggested instead of each of ``domains`` (the profiles'), null where
        none (and where the domain is empty)."""
        import pyarrow as pa

        better = {d: self.suggester.domain(d) for d in set(domains.to_pylist()) if d}
        return pa.array([better.get(d) if d else None for d in domains.to_pylist()], pa.string())

    def suggestion(self, emails: "pa.Array", suggested: "pa.Array", index: Any) -> "pa.Array":
        """The ``suggestion`` column of a batch: each email's local part at the domain its
        profile (``index``, into ``suggested`` from :meth:`suggested`) suggests, else null."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if suggested.null_count == len(suggested):  # the usual list: no typo, no string work
            return pa.nulls(len(emails), pa.string())
        taken = suggested.take(pa.array(index))
        if taken.null_count == len(taken):
            return pa.nulls(len(emails), pa.string())
        local = pc.replace_substring_regex(emails, r"@[^@]*$", "")
        return pc.if_else(
            pc.is_valid(taken),
            pc.binary_join_element_wise(local, taken, "@"),
            pa.scalar(None, pa.string()),
        )

    def count(
        self,
        domains: "pa.Array",
        suggested: "pa.Array",
        providers: "pa.Array",
        rows: Iterable[int],
    ) -> None:
        """Add the rows written of each profile (``rows``, in profile order) to the tallies."""
        for domain, to, provider, n in zip(
            domains.to_pylist(), suggested.to_pylist(), providers.to_pylist(), rows, strict=True
        ):
            if not n:
                continue
            if to is not None:
                self.suggestions[(domain, to)] += n
            self.providers["none" if provider is None else provider] += n

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

"""The report's sections on mail providers and typo suggestions (pipeline/advice.py counts them):
a bar per provider, and a table of the domains that look like typos with what they likely mean.
The view model only; ``templates/report.html.j2`` lays it out."""

from collections.abc import Mapping
from typing import Any

from listhygiene.engine.providers import LABELS

__all__ = ["PROVIDER_COLOURS", "providers_chart", "suggestions_view"]

#: One colour per provider (the big hosted ones first), a grey for the rest.
PROVIDER_COLOURS: dict[str, str] = {
    "google": "#4285f4",
    "microsoft": "#00a4ef",
    "yahoo": "#6001d2",
    "proofpoint": "#d9480f",
    "mimecast": "#1c7c54",
    "zoho": "#e8a200",
    "fastmail": "#2b5a9b",
    "icloud": "#7a8699",
    "barracuda": "#0a6ebd",
    "amazon": "#ff9900",
    "self_hosted": "#14999b",
    "other": "#a3acb9",
    "none": "#d5dae2",
}
BAR = 230
LABEL = 170
ROW = 26
#: Suggestions listed in the table.
MAX_SUGGESTIONS = 10


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def providers_chart(providers: Mapping[str, Any], total: int) -> dict[str, Any]:
    """Horizontal bars, rows per provider, largest first."""
    items = sorted(((str(k), _count(v)) for k, v in providers.items()), key=lambda i: (-i[1], i[0]))
    peak = max([n for _, n in items] + [1])
    bars = []
    for index, (name, count) in enumerate(items):
        label = "no mail host / not known" if name == "none" else LABELS.get(name, name)
        bars.append(
            {
                "provider": name,
                "label": label,
                "count": count,
                "share": f"{100 * count / total:.1f}%" if total else "—",
                "colour": PROVIDER_COLOURS.get(name, PROVIDER_COLOURS["other"]),
                "y": index * ROW,
                "width": round(max(BAR * count / peak, 2.0 if count else 0.0), 1),
            }
        )
    return {
        "bars": bars,
        "label_width": LABEL,
        "bar_width": BAR,
        "width": LABEL + BAR + 110,
        "height": max(len(bars), 1) * ROW,
    }


def suggestions_view(suggestions: Mapping[str, Any]) -> dict[str, Any]:
    """The suggestions' count and the top pairs (domain as written, domain likely meant)."""
    top = suggestions.get("top")
    rows = [
        {
            "domain": str(item.get("domain") or ""),
            "suggested": str(item.get("suggested") or ""),
            "rows": _count(item.get("rows")),
        }
        for item in (top if isinstance(top, list) else [])
        if isinstance(item, Mapping)
    ][:MAX_SUGGESTIONS]
    return {
        "rows": _count(suggestions.get("rows")),
        "domains": _count(suggestions.get("domains")),
        "top": rows,
    }

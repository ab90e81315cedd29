"""``report.html``: the summary of a clean run, drawn for a person rather than written for a parser.

``summary.json`` is the record; this page is what someone opens to see whether the list is any
good and whether the run can be trusted. It is one self-contained file: inline CSS, inline SVG
charts, no JavaScript, no font or URL from outside, so it looks the same offline, attached to a
ticket or years later (GX's own Data Docs load their styles from CDNs and fall apart offline).

The arithmetic of the charts lives here, in a view model; the template only lays it out. Every
string that came from the input (file name, domains, bad records) reaches the page through
Jinja2's autoescaping, never as markup.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

import jinja2

from listhygiene.pipeline.layout import STATUSES
from listhygiene.pipeline.report_advice import providers_chart, suggestions_view
from listhygiene.statuses import Reason, Status

__all__ = ["STATUS_COLOURS", "politeness_line", "render_report"]

#: One colour per status, the same in every chart, table and legend of the page.
STATUS_COLOURS: dict[str, str] = {
    Status.VALID: "#2f9e5a",
    Status.INVALID: "#d64545",
    Status.UNKNOWN: "#8b95a5",
    Status.RISKY: "#e3a008",
    Status.DISPOSABLE: "#8b5cc7",
    Status.CATCHALL: "#3b7fc4",
    Status.ROLE: "#14999b",
}
#: Colour of anything not one of the seven (a status the report does not know).
OTHER_COLOUR = "#c3c9d3"

#: The status each reason leads to, so a reason's bar wears its status's colour.
REASON_STATUS: dict[str, str] = {
    Reason.INVALID_SYNTAX: Status.INVALID,
    Reason.NO_MAIL_SERVER: Status.INVALID,
    Reason.MAILBOX_NOT_FOUND: Status.INVALID,
    Reason.MAILBOX_DISABLED: Status.INVALID,
    Reason.DISPOSABLE_DOMAIN: Status.DISPOSABLE,
    Reason.CATCH_ALL: Status.CATCHALL,
    Reason.MAILBOX_FULL: Status.RISKY,
    Reason.ROLE_ACCOUNT: Status.ROLE,
}

#: Run phases in the order they happen, and their colours in the timing bar.
PHASES: dict[str, str] = {
    "read": "#9db4d0",
    "verify": "#3b5b8c",
    "write": "#6f8fbf",
    "quality": "#c2cfe0",
}

#: What the run does when a check fails, as the summary's ``quality.mode`` names it.
QUALITY_MODES: dict[str, str] = {
    "fail": "a failed check fails the run",
    "warn": "a failed check only warns",
    "off": "checks off",
}

#: Bad input records listed before "and N more".
MAX_BAD_RECORDS = 20
#: Top domains shown in the table.
MAX_DOMAINS = 15


def render_report(summary: Mapping[str, Any]) -> str:
    """The HTML page for one run's summary (the dict written as ``summary.json``)."""
    return _environment().get_template("report.html.j2").render(view=_view(summary))


def prepare() -> None:
    """Compile the template now (jinja2 keeps it), not when the first report is rendered."""
    _environment().get_template("report.html.j2")


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("listhygiene.pipeline", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["num"] = number
    environment.filters["pct"] = percent
    environment.filters["secs"] = seconds
    return environment


# --- formatting -----------------------------------------------------------------------------


def number(value: Any) -> str:
    """1234567 -> "1,234,567"; anything that is not a number -> "—"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def percent(share: float | None) -> str:
    """0.6123 -> "61.2%"."""
    return "—" if share is None else f"{share * 100:.1f}%"


def seconds(value: Any) -> str:
    """Durations as a person reads them: "0.4 s", "28.9 s", "2 min 05 s", "1 h 02 min"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _share(part: Any, whole: Any) -> float | None:
    if not isinstance(part, int | float) or not isinstance(whole, int | float) or whole <= 0:
        return None
    return part / whole


def _when(stamp: Any) -> str:
    """An ISO time as "22 Nov 2026, 12:00:00 UTC"; anything else as given."""
    if not isinstance(stamp, str) or not stamp:
        return "—"
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    zone = moment.tzname()
    zone = "UTC" if zone in ("UTC", "UTC+00:00") else zone
    return f"{moment.day} {moment:%b %Y, %H:%M:%S}" + (f" {zone}" if zone else "")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def colour(status: str) -> str:
    return STATUS_COLOURS.get(status, OTHER_COLOUR)


# --- the view -------------------------------------------------------------------------------


def _view(summary: Mapping[str, Any]) -> dict[str, Any]:
    source = _map(summary.get("input"))
    rows = _map(summary.get("rows"))
    addresses = _map(summary.get("addresses"))
    timings = _map(summary.get("timings"))
    health = _map(summary.get("health"))
    backend = _map(summary.get("backend"))
    total = _count(rows.get("total", source.get("rows")))
    by_status = {str(k): _count(v) for k, v in _map(rows.get("by_status")).items()}
    quality = _map(summary.get("quality"))
    return {
        "version": summary.get("listhygiene_version") or "",
        "input": {
            "name": str(source.get("name") or "(unnamed input)"),
            "facts": _input_facts(source),
        },
        "total": total,
        "ran_at": _when(timings.get("started_at")),
        "total_seconds": _map(timings.get("seconds")).get("total"),
        "backend": {
            "name": str(backend.get("name") or "—"),
            "smtp": backend.get("check_smtp"),
        },
        "problem": health.get("problem") or None,
        "health": _health(health),
        "politeness": _politeness(summary.get("politeness"), str(backend.get("name") or "")),
        "cards": _cards(total, by_status, rows, addresses, _map(summary.get("credits"))),
        "statuses": _status_chart(by_status, total),
        "reasons": _reason_chart(_map(rows.get("by_reason")), total),
        "domains": _domains(_list(summary.get("top_domains"))),
        "providers": providers_chart(_map(summary.get("mx_providers")), total),
        "suggestions": suggestions_view(_map(summary.get("suggestions"))),
        "quality": _quality(quality),
        "verdicts": _verdicts(_map(summary.get("verdicts")), _map(summary.get("verdict_store"))),
        "feedback": _feedback(_map(summary.get("feedback"))),
        "bad_records": _bad_records(_list(source.get("bad_records"))),
        "timings": _timings(timings),
        "files": _files(_map(summary.get("output")), total),
        "legend": [{"status": s, "colour": colour(s)} for s in STATUSES],
    }


def _input_facts(source: Mapping[str, Any]) -> list[tuple[str, str]]:
    delimiter = source.get("delimiter")
    shown = (
        None
        if delimiter is None
        else {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}.get(delimiter, delimiter)
    )
    facts = [
        ("format", source.get("kind")),
        ("encoding", source.get("encoding")),
        ("delimiter", shown),
        ("email column", source.get("email_column")),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def _health(health: Mapping[str, Any]) -> dict[str, Any] | None:
    if not health or "domains_probed" not in health:
        return None
    return {
        "probed": _count(health.get("domains_probed")),
        "reached": _count(health.get("domains_reached")),
        "unreachable": _count(health.get("domains_unreachable")),
        "blocked": _count(health.get("domains_blocked")),
    }


#: Where a run that met the hosts' limits is sent (the notice and the summary's documentation).
POLITENESS_DOC = 'docs/engine.md, "Hosts that defend themselves"'


def _politeness(politeness: Any, backend: str) -> dict[str, Any] | None:
    """The summary's ``politeness`` as one line, and whether the hosts said we went too far
    (a limit met or a ban: then the page says so at the top). None for a summary without it.
    ``remote``: a remote backend's run, whose SMTP sessions the service opened (all zeros)."""
    if not isinstance(politeness, Mapping):
        return None
    limits = _count(politeness.get("limits_met"))
    bans = _count(politeness.get("bans"))
    return {
        "line": politeness_line(politeness),
        "limits_met": limits,
        "bans": bans,
        "warned": bool(limits or bans),
        "remote": backend not in ("", "local") and not _count(politeness.get("sessions")),
        "doc": POLITENESS_DOC,
    }


def politeness_line(politeness: Mapping[str, Any]) -> str:
    """The summary's ``politeness`` for a person: "3 SMTP sessions opened, at most 1 at once to
    one mail host, 0 limits met, 0 bans"."""
    return (
        f"{_plural(_count(politeness.get('sessions')), 'SMTP session')} opened, at most "
        f"{number(_count(politeness.get('max_sessions_one_host')))} at once to one mail host, "
        f"{_plural(_count(politeness.get('limits_met')), 'limit')} met, "
        f"{_plural(_count(politeness.get('bans')), 'ban')}"
    )


def _plural(count: int, word: str) -> str:
    return f"{number(count)} {word}{'' if count == 1 else 's'}"


def _cards(
    total: int,
    by_status: Mapping[str, int],
    rows: Mapping[str, Any],
    addresses: Mapping[str, Any],
    credits: Mapping[str, Any],
) -> list[dict[str, Any]]:
    empty = _count(rows.get("empty_email"))
    distinct = addresses.get("distinct")
    verified = _count(addresses.get("verified"))
    reused = _count(addresses.get("reused"))
    valid_share = _share(by_status.get(Status.VALID, 0), total)
    return [
        {
            "label": "Rows",
            "accent": None,
            "value": number(total),
            "note": f"{number(empty)} with no email" if empty else "every row has an email",
        },
        {
            "label": "Distinct addresses",
            "accent": None,
            "value": number(distinct),
            "note": f"{number(verified)} verified, {number(reused)} reused",
        },
        {
            "label": "Duplicate rows",
            "accent": None,
            "value": number(addresses.get("duplicate_rows")),
            "note": f"{percent(_share(addresses.get('duplicate_rows'), total))} of rows",
        },
        {
            "label": "Credits used",
            "accent": None,
            "value": number(credits.get("used")),
            "note": "unknown results are free",
        },
        {
            "label": "Valid",
            "value": percent(valid_share),
            "note": f"{number(by_status.get(Status.VALID, 0))} rows",
            "accent": colour(Status.VALID),
        },
    ]


#: Geometry of the status column chart, in SVG user units.
CHART_WIDTH, CHART_TOP, CHART_HEIGHT = 500, 28, 190


def _status_chart(by_status: Mapping[str, int], total: int) -> dict[str, Any]:
    names = [*STATUSES, *sorted(set(by_status).difference(STATUSES))]
    peak = max([by_status.get(name, 0) for name in names] + [1])
    slot = CHART_WIDTH / len(names)
    width = min(56.0, slot * 0.62)
    bars = []
    for index, name in enumerate(names):
        count = by_status.get(name, 0)
        height = CHART_HEIGHT * count / peak
        if count and height < 2:
            height = 2.0  # a status with rows is never invisible
        centre = slot * index + slot / 2
        bars.append(
            {
                "status": name,
                "count": count,
                "share": percent(_share(count, total)),
                "colour": colour(name),
                "x": round(centre - width / 2, 1),
                "y": round(CHART_TOP + CHART_HEIGHT - height, 1),
                "width": round(width, 1),
                "height": round(height, 1),
                "centre": round(centre, 1),
                "track_x": round(centre - slot * 0.43, 1),
                "track_width": round(slot * 0.86, 1),
            }
        )
    return {
        "bars": bars,
        "width": CHART_WIDTH,
        "top": CHART_TOP - 4,
        "baseline": CHART_TOP + CHART_HEIGHT,
        "height": CHART_TOP + CHART_HEIGHT + 44,
    }


#: Geometry of the reasons chart: label column, bar column, value column.
REASON_LABEL, REASON_BAR, REASON_ROW = 140, 240, 26


def _reason_chart(by_reason: Mapping[str, Any], total: int) -> dict[str, Any]:
    reasons = sorted(
        ((str(reason), _count(count)) for reason, count in by_reason.items()),
        key=lambda item: (-item[1], item[0]),
    )
    peak = max([count for _, count in reasons] + [1])
    bars = []
    for index, (reason, count) in enumerate(reasons):
        length = REASON_BAR * count / peak
        bars.append(
            {
                "reason": reason,
                "label": reason.replace("_", " "),
                "count": count,
                "share": percent(_share(count, total)),
                "colour": colour(REASON_STATUS.get(reason, Status.UNKNOWN)),
                "y": index * REASON_ROW,
                "width": round(max(length, 2.0 if count else 0.0), 1),
            }
        )
    return {
        "bars": bars,
        "label_width": REASON_LABEL,
        "bar_width": REASON_BAR,
        "row": REASON_ROW,
        "width": REASON_LABEL + REASON_BAR + 110,
        "height": max(len(bars), 1) * REASON_ROW,
    }


def _verdicts(counts: Mapping[str, Any], store: Mapping[str, Any]) -> dict[str, Any] | None:
    """The verdict store's section: reused against verified, what that saved, what changed."""
    if not store:
        return None
    transitions = sorted(
        ((str(k), _count(v)) for k, v in _map(store.get("transitions")).items()),
        key=lambda item: (-item[1], item[0]),
    )
    peak = max([count for _, count in transitions] + [1])
    bars = []
    for index, (transition, count) in enumerate(transitions):
        _, _, after = transition.partition("->")
        bars.append(
            {
                "label": transition.replace("->", " → "),
                "count": count,
                "colour": colour(after.strip()),
                "y": index * REASON_ROW,
                "width": round(max(REASON_BAR * count / peak, 2.0), 1),
            }
        )
    reused, verified = _count(counts.get("reused")), _count(counts.get("verified"))
    return {
        "store": str(store.get("store") or ""),
        "fresh": bool(store.get("fresh")),
        "reused": reused,
        "verified": verified,
        "reused_share": percent(_share(reused, reused + verified)),
        "changed": _count(counts.get("changed")),
        "credits_saved": _count(store.get("credits_saved")),
        "seconds_saved": store.get("seconds_saved"),
        "bars": bars,
        "label_width": REASON_LABEL,
        "bar_width": REASON_BAR,
        "row": REASON_ROW,
        "width": REASON_LABEL + REASON_BAR + 60,
        "height": max(len(bars), 1) * REASON_ROW,
    }


def _feedback(taught: Mapping[str, Any]) -> list[tuple[str, int]] | None:
    """ "What your mail taught" (docs/feedback.md): one line per count, addresses."""
    if not taught:
        return None
    return [
        ("events in the verdict store", _count(taught.get("events"))),
        ("bounced since last verified: now invalid", _count(taught.get("bounced"))),
        (
            "catch-alls confirmed by a click or reply: now valid",
            _count(taught.get("catchalls_confirmed")),
        ),
        ("engaged (a click or reply within the valid max age)", _count(taught.get("engaged"))),
        ("complained", _count(taught.get("complained"))),
        ("unsubscribed", _count(taught.get("unsubscribed"))),
    ]


#: Width of the small stacked bar of each domain row.
DOMAIN_BAR = 220


def _domains(domains: Sequence[Any]) -> dict[str, Any]:
    items = [_map(domain) for domain in domains][:MAX_DOMAINS]
    peak = max([_count(item.get("rows")) for item in items] + [1])
    rows = []
    for item in items:
        count = _count(item.get("rows"))
        by_status = {str(k): _count(v) for k, v in _map(item.get("by_status")).items()}
        length = DOMAIN_BAR * count / peak  # bar length compares domains; segments, statuses
        segments, x = [], 0.0
        for name in [*STATUSES, *sorted(set(by_status).difference(STATUSES))]:
            part = by_status.get(name, 0)
            if not part or not count:
                continue
            width = length * part / count
            segments.append(
                {
                    "status": name,
                    "count": part,
                    "colour": colour(name),
                    "x": round(x, 2),
                    "width": round(width, 2),
                }
            )
            x += width
        rows.append(
            {
                "domain": str(item.get("domain") or "(no domain)"),
                "rows": count,
                "valid_share": percent(_share(by_status.get(Status.VALID, 0), count)),
                "segments": segments,
                "length": round(length, 2),
            }
        )
    return {"rows": rows, "bar_width": DOMAIN_BAR, "more": max(len(domains) - MAX_DOMAINS, 0)}


def _quality(quality: Mapping[str, Any]) -> dict[str, Any] | None:
    if not quality:
        return None
    checks = [
        {
            "name": str(check.get("name") or ""),
            "description": str(check.get("description") or ""),
            "passed": bool(check.get("passed")),
            "details": str(check.get("details") or ""),
        }
        for check in map(_map, _list(quality.get("checks")))
    ]
    return {
        "passed": bool(quality.get("passed")) and all(check["passed"] for check in checks),
        "failed": sum(not check["passed"] for check in checks),
        "mode_text": QUALITY_MODES.get(str(quality.get("mode")), quality.get("mode") or ""),
        "seconds": quality.get("seconds"),
        "checks": checks,
        "skipped": str(quality["skipped"]) if quality.get("skipped") else None,
    }


def _bad_records(records: Sequence[Any]) -> dict[str, Any]:
    shown = []
    for record in map(_map, records[:MAX_BAD_RECORDS]):
        text = str(record.get("text") or "")
        shown.append(
            {
                "row": record.get("row"),
                "problem": str(record.get("problem") or ""),
                "text": text if len(text) <= 90 else text[:89] + "…",
            }
        )
    return {"shown": shown, "total": len(records), "more": max(len(records) - MAX_BAD_RECORDS, 0)}


def _timings(timings: Mapping[str, Any]) -> dict[str, Any]:
    spent = _map(timings.get("seconds"))
    phases = [
        (name, float(spent[name]))
        for name in [*PHASES, *(k for k in spent if k not in PHASES and k != "total")]
        if isinstance(spent.get(name), int | float)
    ]
    total = spent.get("total")
    whole = sum(value for _, value in phases) or 1.0
    segments, x = [], 0.0
    for name, value in phases:
        share = value / whole
        segments.append(
            {
                "phase": name,
                "seconds": value,
                "share": percent(share),
                "colour": PHASES.get(name, OTHER_COLOUR),
                "x": round(x * 100, 3),
                "width": round(share * 100, 3),
            }
        )
        x += share
    return {
        "started": _when(timings.get("started_at")),
        "finished": _when(timings.get("finished_at")),
        "total": total,
        "phases": segments,
    }


def _files(output: Mapping[str, Any], total: int) -> dict[str, Any]:
    files = _map(output.get("files"))
    names = [*(s for s in STATUSES if s in files), *sorted(set(files).difference(STATUSES))]
    listed = []
    for name in names:
        item = _map(files[name])
        listed.append(
            {
                "status": name,
                "colour": colour(name),
                "path": str(item.get("path") or f"{name}.parquet"),
                "rows": _count(item.get("rows")),
                "share": percent(_share(_count(item.get("rows")), total)),
            }
        )
    return {
        "folder": str(output.get("folder") or ""),
        "files": listed,
        "rows": sum(item["rows"] for item in listed),
    }

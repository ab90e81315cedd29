"""report.html shows the numbers, charts and verdicts of a run, escapes input, loads nothing."""

import copy
import importlib.resources
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

from listhygiene.pipeline.report import STATUS_COLOURS, number, percent, render_report, seconds

STATUSES = ["valid", "invalid", "unknown", "risky", "disposable", "catchall", "role"]

#: The shape the pipeline writes as summary.json (the example of the pipeline's contract).
SUMMARY: dict[str, Any] = {
    "listhygiene_version": "0.1.0",
    "input": {
        "name": "sample_data/crm_export.csv",
        "kind": "csv",
        "encoding": "utf-8",
        "delimiter": ",",
        "email_column": "Email",
        "rows": 1000,
        "bad_records": [{"row": 17, "problem": "expected 6 fields, found 8", "text": "..."}],
    },
    "output": {
        "folder": "out/demo",
        "files": {
            "valid": {"path": "valid.parquet", "rows": 612},
            "invalid": {"path": "invalid.parquet", "rows": 150},
            "unknown": {"path": "unknown.parquet", "rows": 60},
            "risky": {"path": "risky.parquet", "rows": 10},
            "disposable": {"path": "disposable.parquet", "rows": 20},
            "catchall": {"path": "catchall.parquet", "rows": 90},
            "role": {"path": "role.parquet", "rows": 58},
        },
    },
    "backend": {"name": "local", "check_smtp": True},
    "rows": {
        "total": 1000,
        "by_status": {
            "valid": 612,
            "invalid": 150,
            "unknown": 60,
            "risky": 10,
            "disposable": 20,
            "catchall": 90,
            "role": 58,
        },
        "by_reason": {
            "mailbox_not_found": 80,
            "invalid_syntax": 50,
            "no_mail_server": 20,
            "smtp_timeout": 30,
            "greylisted": 30,
            "mailbox_full": 10,
            "disposable_domain": 20,
            "catch_all": 90,
            "role_account": 58,
        },
        "empty_email": 12,
    },
    "addresses": {
        "distinct": 870,
        "duplicate_rows": 130,
        "verified": 870,
        "reused": 0,
        "retried": 0,
    },
    "credits": {"used": 810},
    "top_domains": [
        {"domain": "northwind.test", "rows": 120, "by_status": {"valid": 110, "invalid": 10}}
    ],
    "timings": {
        "started_at": "2026-11-22T12:00:00Z",
        "finished_at": "2026-11-22T12:00:31Z",
        "seconds": {"read": 0.4, "verify": 28.9, "write": 0.3, "quality": 1.1, "total": 31.2},
    },
    "health": {
        "domains_probed": 40,
        "domains_reached": 38,
        "domains_unreachable": 2,
        "domains_blocked": 0,
        "problem": None,
    },
    "politeness": {"sessions": 41, "max_sessions_one_host": 2, "limits_met": 0, "bans": 0},
    "quality": {
        "passed": True,
        "mode": "fail",
        "checks": [
            {
                "name": "rows_in_exactly_one_output",
                "description": "...",
                "passed": True,
                "details": "...",
            }
        ],
        "seconds": 1.1,
    },
}


# --- a small DOM, from the stdlib's parser ---------------------------------------------------


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list["Node | str"] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return re.sub(r"\s+", " ", " ".join(parts)).strip()

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list["Node"]:
        found = []
        for child in self.children:
            if isinstance(child, str):
                continue
            if (
                (tag is None or child.tag == tag)
                and (cls is None or cls in child.classes)
                and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
            ):
                found.append(child)
            found.extend(child.all(tag, cls, **attrs))
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> "Node":
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} class={cls} {attrs}>"
        return found[0]


VOID = {"meta", "link", "br", "hr", "img", "input", "source", "col", "area", "base", "wbr"}


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return
        raise AssertionError(f"</{tag}> closes nothing")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


def render(**changes: Any) -> tuple[str, Node]:
    summary = copy.deepcopy(SUMMARY)
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = summary
        for parent in parents:
            target = target[parent]
        target[key] = value
    html = render_report(summary)
    return html, parse(html)


@pytest.fixture(scope="module")
def page() -> Node:
    return render()[1]


# --- tests ----------------------------------------------------------------------------------


def test_header_names_the_input_and_when_it_ran(page: Node) -> None:
    assert page.one("h1").text() == "sample_data/crm_export.csv"
    assert "22 Nov 2026, 12:00:00 UTC" in page.one("header").text()
    assert "sample_data/crm_export.csv" in page.one("head").one("title").text()


def test_cards_show_the_counts_formatted(page: Node) -> None:
    cards = {
        card.one(cls="label").text(): card.one(cls="value").text()
        for card in page.all("div", cls="card")
    }
    assert cards == {
        "Rows": "1,000",
        "Distinct addresses": "870",
        "Duplicate rows": "130",
        "Credits used": "810",
        "Valid": "61.2%",
    }


def test_one_bar_per_status_in_its_colour(page: Node) -> None:
    bars = page.one(id="statuses").all("rect", cls="status-bar")
    assert [bar.attrs["data-status"] for bar in bars] == STATUSES
    assert {bar.attrs["data-status"]: bar.attrs["fill"] for bar in bars} == STATUS_COLOURS
    heights = {bar.attrs["data-status"]: float(bar.attrs["height"]) for bar in bars}
    assert max(heights, key=heights.__getitem__) == "valid"
    assert heights["valid"] / heights["invalid"] == pytest.approx(612 / 150, rel=0.01)
    chart = page.one(id="statuses").text()
    for count in ("612", "150", "60", "10", "20", "90", "58", "61.2%", "15.0%"):
        assert count in chart


def test_reasons_are_bars_sorted_by_count(page: Node) -> None:
    bars = page.one(id="reasons").all("rect", cls="reason-bar")
    assert [bar.attrs["data-reason"] for bar in bars][:2] == ["catch_all", "mailbox_not_found"]
    assert len(bars) == 9
    by_reason = {bar.attrs["data-reason"]: bar.attrs["fill"] for bar in bars}
    assert by_reason["mailbox_not_found"] == STATUS_COLOURS["invalid"]
    assert by_reason["greylisted"] == STATUS_COLOURS["unknown"]


def test_top_domain_row_with_a_stacked_status_bar(page: Node) -> None:
    row = page.one("tr", cls="domain-row")
    cells = [cell.text() for cell in row.all("td")]
    assert cells[:3] == ["northwind.test", "120", "91.7%"]
    segments = row.all("rect", cls="segment")
    assert [s.attrs["data-status"] for s in segments] == ["valid", "invalid"]
    widths = [float(s.attrs["width"]) for s in segments]
    assert widths[0] / widths[1] == pytest.approx(11, rel=0.01)


def test_passing_checks_show_pass_badges(page: Node) -> None:
    check = page.one("li", cls="check")
    assert check.attrs["data-check"] == "rows_in_exactly_one_output"
    assert check.one(cls="badge").text() == "PASS"
    assert not page.all(cls="fail")
    assert "Quality checks passed" in page.one("header").text()


def test_failing_check_shows_a_fail_badge_and_its_details() -> None:
    failing = {
        "name": "file_counts_match_summary",
        "description": "Each output file holds as many rows as the summary says.",
        "passed": False,
        "details": "catchall.parquet holds 90, the summary says 91",
    }
    checks = [*SUMMARY["quality"]["checks"], failing]
    _, page = render(quality__checks=checks, quality__passed=False)
    item = page.one("li", cls="failed")
    assert item.attrs["data-check"] == "file_counts_match_summary"
    assert item.one(cls="badge").text() == "FAIL"
    assert "fail" in item.one(cls="badge").classes
    assert "catchall.parquet holds 90, the summary says 91" in item.text()
    assert "1 of 2 quality checks failed" in page.one("header").text()


def test_health_banner_only_when_a_problem_is_set(page: Node) -> None:
    assert not page.all(id="health-problem")
    problem = "38 of 40 domains could not be reached on the SMTP port"
    _, warned = render(health__problem=problem)
    banner = warned.one(id="health-problem")
    assert problem in banner.text()
    assert banner.attrs["role"] == "alert"


def test_politeness_line_in_the_run_panel(page: Node) -> None:
    line = page.one(id="timings").one(id="politeness")
    assert line.text().startswith(
        "41 SMTP sessions opened, at most 2 at once to one mail host, 0 limits met, 0 bans"
    )
    assert "a limit met is a reply saying we went too far" in line.text()
    assert "warn" not in line.classes
    assert not page.all(id="politeness-warning")


def test_limits_met_or_bans_are_highlighted() -> None:
    for changes in ({"politeness__limits_met": 3}, {"politeness__bans": 1}):
        _, page = render(**changes)
        notice = page.one(id="politeness-warning")
        assert "Mail hosts said we went too fast" in notice.text()
        assert "Hosts that defend themselves" in notice.text()
        assert "warn" in page.one(id="politeness").classes
    _, page = render(politeness__limits_met=1, politeness__bans=1, politeness__sessions=1)
    assert "1 SMTP session opened" in page.one(id="politeness").text()
    assert "1 limit met, 1 ban" in page.one(id="politeness-warning").text()


def test_a_remote_backends_politeness_is_not_known() -> None:
    zeros = {"sessions": 0, "max_sessions_one_host": 0, "limits_met": 0, "bans": 0}
    _, page = render(backend__name="form-a", politeness=zeros)
    assert (
        page.one(id="politeness")
        .text()
        .startswith("not known: the form-a service opened the SMTP sessions")
    )
    _, local = render(politeness=zeros)  # the local engine without SMTP: none opened
    assert local.one(id="politeness").text().startswith("0 SMTP sessions opened")


def test_input_strings_are_escaped() -> None:
    evil = "<script>alert(1)</script>"
    domains = [{"domain": '"><img src=x onerror=alert(2)>', "rows": 3, "by_status": {"valid": 3}}]
    records = [{"row": 5, "problem": "<b>bad</b>", "text": evil}]
    html, page = render(input__name=evil, top_domains=domains, input__bad_records=records)
    assert evil not in html
    assert "<img" not in html
    assert not page.all("script")
    assert not page.all("img")
    assert page.one("h1").text() == evil
    assert page.one("tr", cls="domain-row").all("td")[0].text() == domains[0]["domain"]


def test_nothing_is_loaded_from_outside(page: Node) -> None:
    html = render_report(SUMMARY)
    for node in page.all():
        for name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
            value = node.attrs.get(name, "")
            assert not re.match(r"\s*(https?:)?//", value), f"<{node.tag} {name}={value}>"
    assert not page.all("script")
    assert not page.all("link")
    assert "http://" not in html
    assert "https://" not in html
    assert "@import" not in html
    assert "url(" not in html


def test_bad_records_are_capped_at_twenty() -> None:
    records = [{"row": n, "problem": f"problem {n}", "text": "a,b"} for n in range(1, 26)]
    _, page = render(input__bad_records=records)
    section = page.one(id="bad-records")
    rows = section.one("tbody").all("tr")
    assert len(rows) == 20
    assert [cell.text() for cell in rows[0].all("td")][:2] == ["1", "problem 1"]
    assert "and 5 more" in section.text()


def test_bad_record_shown_with_its_row(page: Node) -> None:
    row = page.one(id="bad-records").one("tbody").one("tr")
    assert [cell.text() for cell in row.all("td")][:2] == ["17", "expected 6 fields, found 8"]


def test_output_files_with_row_counts(page: Node) -> None:
    rows = page.one(id="files").one("tbody").all("tr")
    cells = [[cell.text() for cell in row.all("td")] for row in rows]
    assert [c[0] for c in cells] == STATUSES
    assert cells[0][1:3] == ["valid.parquet", "612"]
    assert "out/demo" in page.one(id="files").text()


def test_timings(page: Node) -> None:
    text = page.one(id="timings").text()
    for shown in ("31.2 s", "28.9 s", "0.4 s", "22 Nov 2026, 12:00:31 UTC", "38 reached"):
        assert shown in text


def test_large_numbers_have_thousands_separators() -> None:
    by_status = dict.fromkeys(STATUSES, 0) | {"valid": 1_234_567}
    _, page = render(rows__by_status=by_status, rows__total=1_234_567)
    assert "1,234,567" in page.one(id="statuses").text()


def test_a_sparse_summary_still_renders() -> None:
    page = parse(render_report({"input": {"name": "empty.csv"}, "rows": {"total": 0}}))
    assert page.one("h1").text() == "empty.csv"
    assert len(page.all("rect", cls="status-bar")) == 7
    assert not page.all(id="politeness")  # a summary written before the field


def test_formatting_helpers() -> None:
    assert number(1234567) == "1,234,567"
    assert number(None) == "—"
    assert percent(0.6123) == "61.2%"
    assert percent(None) == "—"
    assert seconds(28.94) == "28.9 s"
    assert seconds(125) == "2 min 05 s"


def test_template_ships_as_package_data() -> None:
    template = importlib.resources.files("listhygiene.pipeline") / "templates" / "report.html.j2"
    assert template.is_file()

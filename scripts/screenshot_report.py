"""Render ``report.html`` and photograph it with headless Chromium, to look at the page as a person.

Usage::

    .venv/bin/python scripts/screenshot_report.py [SUMMARY_JSON] [--out report.png]

Without a summary path it renders a built-in example run. Prints the PNG's path. Chromium is a
tool for developers only, never a dependency of the package: ``apt-get install -y chromium``.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from listhygiene.pipeline.report import render_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def example_summary() -> dict[str, Any]:
    """A plausible run of 1,000 rows, with a failing check and bad records, to see every part."""
    domains = [
        ("northwind.test", 120, {"valid": 110, "invalid": 10}),
        ("contoso.example", 96, {"valid": 60, "catchall": 30, "role": 6}),
        ("fabrikam.test", 81, {"valid": 51, "unknown": 30}),
        ("gmail.test", 75, {"valid": 70, "invalid": 5}),
        ("tailspin-toys-international-holdings.example", 52, {"catchall": 52}),
        ("mailinator.test", 20, {"disposable": 20}),
        ("adventure-works.test", 18, {"valid": 9, "risky": 9}),
        ("wingtip.test", 12, {"invalid": 12}),
    ]
    by_status = {
        "valid": 612,
        "invalid": 150,
        "unknown": 60,
        "risky": 10,
        "disposable": 20,
        "catchall": 90,
        "role": 58,
    }
    bad_records = [
        {"row": 17 + 13 * i, "problem": "expected 6 fields, found 8", "text": "x," * 30}
        for i in range(23)
    ]
    return {
        "listhygiene_version": "0.1.0",
        "input": {
            "name": "sample_data/crm_export.csv",
            "kind": "csv",
            "encoding": "utf-8",
            "delimiter": ",",
            "email_column": "Email",
            "rows": 1000,
            "bad_records": bad_records,
        },
        "output": {
            "folder": "out/demo",
            "files": {
                status: {"path": f"{status}.parquet", "rows": rows}
                for status, rows in by_status.items()
            },
        },
        "backend": {"name": "local", "check_smtp": True},
        "rows": {
            "total": 1000,
            "by_status": by_status,
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
        "suggestions": {
            "rows": 14,
            "domains": 4,
            "top": [
                {"domain": "gmial.com", "suggested": "gmail.com", "rows": 6},
                {"domain": "hotmial.com", "suggested": "hotmail.com", "rows": 4},
                {"domain": "yahoo.con", "suggested": "yahoo.com", "rows": 3},
                {"domain": "northwind.tset", "suggested": "northwind.test", "rows": 1},
            ],
        },
        "mx_providers": {
            "google": 402,
            "microsoft": 251,
            "self_hosted": 160,
            "proofpoint": 61,
            "other": 58,
            "yahoo": 40,
            "none": 28,
        },
        "top_domains": [
            {"domain": domain, "rows": rows, "by_status": split} for domain, rows, split in domains
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
            "passed": False,
            "mode": "fail",
            "seconds": 1.1,
            "checks": [
                {
                    "name": "rows_in_exactly_one_output",
                    "description": "Every input row is written to exactly one output file.",
                    "passed": True,
                    "details": "1,000 rows expected, 1,000 written, each input row exactly once",
                },
                {
                    "name": "status_allowed",
                    "description": "Every status is one of the seven, and every row is in the "
                    "file of its own status.",
                    "passed": True,
                    "details": "all 1,000 rows have one of the seven statuses and are in that "
                    "status's file",
                },
                {
                    "name": "score_in_range",
                    "description": "Every row has a score between 0 and 1.",
                    "passed": True,
                    "details": "all 1,000 scores are between 0 and 1",
                },
                {
                    "name": "email_present",
                    "description": "The email column exists and no row has a null email.",
                    "passed": True,
                    "details": "all 1,000 rows have an email (or '')",
                },
                {
                    "name": "file_counts_match_summary",
                    "description": "Each output file holds as many rows as the summary says.",
                    "passed": False,
                    "details": "catchall.parquet holds 90, the summary says 91",
                },
            ],
        },
    }


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(html: Path, png: Path, browser: str, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory(prefix="listhygiene-chromium-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            html.resolve().as_uri(),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.exists():
        raise SystemExit(f"chromium failed ({done.returncode}):\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", nargs="?", type=Path, help="a summary.json (default: example)")
    parser.add_argument("--out", type=Path, help="where to write the PNG (default: a temp file)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2200)
    args = parser.parse_args(argv)

    browser = find_browser()
    if browser is None:
        print(
            "chromium is not installed; install it with: apt-get install -y chromium",
            file=sys.stderr,
        )
        return 2
    summary = (
        json.loads(args.summary.read_text(encoding="utf-8")) if args.summary else example_summary()
    )
    folder = Path(tempfile.mkdtemp(prefix="listhygiene-report-"))
    html = folder / "report.html"
    html.write_text(render_report(summary), encoding="utf-8")
    png = args.out or folder / "report.png"
    screenshot(html, png, browser, args.width, args.height)
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())

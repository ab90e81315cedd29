"""Typo suggestions and mail providers in ``clean`` (issue 19, items 1 and 2; docs/results.md,
"Extra columns"): the per-status files keep the input's columns and form A's result columns
unless ``--columns`` / ``extra_columns=`` asks for more; the summary and the report always count
both. Over a sandbox world with the MX host names of the big providers."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.pipeline.run import STATUSES
from listhygiene.results import FORM_A_FIELDS
from listhygiene.sandbox import Sandbox
from tests.conftest import write_contacts


def _mx(host: str) -> list[dict[str, Any]]:
    return [{"preference": 10, "host": host}]


STAFF = [f"p{i}" for i in range(8)]
WORLD = {
    "domains": {
        "gw.test": {"mx": _mx("aspmx.l.google.com"), "mailboxes": ["ann", "bob"]},
        "m365.test": {"mx": _mx("m365-test.mail.protection.outlook.com"), "mailboxes": ["cy"]},
        "northwind-traders.test": {"mx": _mx("mx.northwind-traders.test"), "mailboxes": STAFF},
        # typos: one of a big provider, one of the list's own most common domain
        "outlok.com": {"mx": _mx("mx.outlok.com"), "mailboxes": ["dee"]},
        "northwind-tradres.test": {"mx": _mx("mx.northwind-traders.test"), "mailboxes": ["p0"]},
    },
    "hosts": {
        "aspmx.l.google.com": {},
        "m365-test.mail.protection.outlook.com": {},
        "mx.northwind-traders.test": {},
        "mx.outlok.com": {},
    },
}
ROWS = [
    ("1", "ann@gw.test"),
    ("2", "bob@gw.test"),
    ("3", "cy@m365.test"),
    ("4", "dee@outlok.com"),
    ("5", "p0@northwind-tradres.test"),
    ("6", ""),
    ("7", "ghost@gw.test"),
    *((str(8 + i), f"{p}@northwind-traders.test") for i, p in enumerate(STAFF)),
]


#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


@pytest.fixture(scope="module")
def contacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_contacts(tmp_path_factory.mktemp("advice"), ROWS, header=("id", "Email"))


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for status in STATUSES:
        for row in pq.read_table(out / f"{status}.parquet").to_pylist():
            found[row["id"]] = row
    return found


@pytest.fixture(scope="module")
def runs(
    sandbox: Sandbox, contacts: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    settings = sandbox.engine_settings(helo="verifier.test")
    base = tmp_path_factory.mktemp("runs")
    listhygiene.clean(contacts, base / "plain", settings=settings, verdicts="none")
    listhygiene.clean(
        contacts,
        base / "extra",
        settings=settings,
        verdicts="none",
        extra_columns=["suggestion", "mx_provider"],
    )
    return {"plain": base / "plain", "extra": base / "extra"}


def test_by_default_the_files_keep_form_as_columns(runs: dict[str, Path]) -> None:
    for status in STATUSES:
        names = pq.read_schema(runs["plain"] / f"{status}.parquet").names
        assert names == ["id", "Email", *FORM_A_FIELDS]


def test_extra_columns_come_after_the_result_columns(runs: dict[str, Path]) -> None:
    for status in STATUSES:
        names = pq.read_schema(runs["extra"] / f"{status}.parquet").names
        assert names == ["id", "Email", *FORM_A_FIELDS, "suggestion", "mx_provider"]
    rows = _rows(runs["extra"])
    assert {i: r["suggestion"] for i, r in rows.items() if r["suggestion"]} == {
        "4": "dee@outlook.com",  # a big provider
        "5": "p0@northwind-traders.test",  # the list's own most common domain
    }
    assert {i: rows[i]["mx_provider"] for i in ("1", "3", "4", "6", "7", "8")} == {
        "1": "google",
        "3": "microsoft",
        "4": "self_hosted",
        "6": None,  # no address
        "7": "google",
        "8": "self_hosted",
    }


def test_suggestions_change_no_status(runs: dict[str, Path]) -> None:
    plain, extra = _rows(runs["plain"]), _rows(runs["extra"])
    assert {i: (r["status"], r["email"]) for i, r in plain.items()} == {
        i: (r["status"], r["email"]) for i, r in extra.items()
    }
    assert extra["4"]["status"] == "valid"
    assert extra["4"]["email"] == "dee@outlok.com"


def test_the_summary_counts_both_either_way(runs: dict[str, Path]) -> None:
    for name in ("plain", "extra"):
        summary = json.loads((runs[name] / "summary.json").read_text("utf-8"))
        assert summary["suggestions"] == {
            "rows": 2,
            "domains": 2,
            "top": [
                {
                    "domain": "northwind-tradres.test",
                    "suggested": "northwind-traders.test",
                    "rows": 1,
                },
                {"domain": "outlok.com", "suggested": "outlook.com", "rows": 1},
            ],
        }
        assert summary["mx_providers"] == {
            "self_hosted": 9,
            "google": 3,
            "microsoft": 1,
            "none": 1,  # the row without an address
            "other": 1,  # northwind-tradres.test's MX is not under it
        }


def test_the_report_has_both_sections(runs: dict[str, Path]) -> None:
    page = (runs["plain"] / "report.html").read_text("utf-8")
    assert 'id="providers"' in page
    assert 'data-provider="google"' in page
    assert "Google Workspace / Gmail" in page
    assert 'id="suggestions"' in page
    assert '<td class="domain" title="outlok.com">outlok.com</td>' in page


def _cli(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **sandbox.engine_environment(), "LISTHYGIENE_HELO": "verifier.test"}
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_cli_flag_and_its_bad_values(sandbox: Sandbox, contacts: Path, tmp_path: Path) -> None:
    bad = _cli(
        sandbox, str(contacts), "--out", str(tmp_path / "bad"), "--columns", "+suggestion,+owner"
    )
    assert bad.returncode == 2
    assert "unknown extra column(s) owner" in bad.stderr
    assert "Traceback" not in bad.stderr
    good = _cli(
        sandbox,
        str(contacts),
        "--out",
        str(tmp_path / "ok"),
        "--no-smtp",
        "--columns",
        "+mx_provider",
    )
    assert good.returncode == 0, good.stderr
    names = pq.read_schema(tmp_path / "ok" / "valid.parquet").names
    assert names[-2:] == ["credits_used", "mx_provider"]
    rows = _rows(tmp_path / "ok")
    assert rows["1"]["mx_provider"] == "google"  # without SMTP too

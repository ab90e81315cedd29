"""Form A file jobs over real HTTP (uvicorn on loopback, SQLite, the engine on the sandbox): upload
in every format, follow the job, download and filter the result file, and every bad upload."""

import asyncio
import csv
import io
import json
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openpyxl
import pytest
import xlwt
from sqlalchemy import select

from listhygiene.engine import Engine
from listhygiene.sandbox import Sandbox
from listhygiene.service.app import create_app
from listhygiene.service.store import Store
from listhygiene.service.store.models import WebhookOutbox
from listhygiene.service.upload import MAX_FILE_BYTES, MAX_ROWS
from tests.service.live import LiveServer, a, engine_for

#: One server per module, on the store of tests/service/conftest.py, on SQLite.
STORE_BACKENDS = ("sqlite",)

VALID = "alice.johnson@acme-corp.test"
NO_MAILBOX = "nobody.here@acme-corp.test"
CATCH_ALL = "nina.patel@fabrikam.test"
ROLE = "info@contoso.test"
DISPOSABLE = "quicktest.4821@mailinator.com"
SERVFAIL = "claire.dupont@humongous-insurance.test"  # unknown
RESULT_COLUMNS = [
    "status",
    "score",
    "reason",
    "is_deliverable",
    "is_disposable",
    "is_catchall",
    "is_role",
    "is_free",
    "smtp_check",
]
ACCEPTANCE = {
    "task_id",
    "status",
    "message",
    "file_name",
    "file_size",
    "estimated_count",
    "unique_emails",
    "total_rows",
    "email_column",
    "status_url",
    "created_at",
}
IN_PROGRESS = {
    "job_id",
    "status",
    "file_name",
    "total_emails",
    "processed_emails",
    "progress_percent",
    "valid_emails",
    "invalid_emails",
    "unknown_emails",
    "created_at",
}
COMPLETED = IN_PROGRESS | {
    "role_emails",
    "catchall_emails",
    "disposable_emails",
    "credits_used",
    "process_time_seconds",
    "result_file_path",
    "download_url",
    "completed_at",
}
# The CRM-like upload of most tests: a duplicate (other case), a blank cell, a placeholder,
# a display name, a formula cell and one address of every status.
CONTACTS = [
    ["id", "Name", "Email", "Note"],
    ["1", "Alice", VALID, '=HYPERLINK("http://evil")'],
    ["2", "Nobody", NO_MAILBOX, "+1 555"],
    ["3", "Alice again", VALID.upper(), "-dup"],
    ["4", "Blank", "", "@home"],
    ["5", "Placeholder", "N/A", ""],
    ["6", "Nina", f"Nina Patel <{CATCH_ALL}>", ""],
    ["7", "Info", ROLE, ""],
    ["8", "Quick", DISPOSABLE, ""],
    ["9", "Claire", SERVFAIL, ""],
]
DISTINCT = len({VALID, NO_MAILBOX, CATCH_ALL, ROLE, DISPOSABLE, SERVFAIL})


def csv_bytes(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def xlsx_bytes(rows: list[list[str]]) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def xls_bytes(rows: list[list[str]]) -> bytes:
    book = xlwt.Workbook()
    sheet = book.add_sheet("contacts")
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            sheet.write(r, c, value)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def base_url(sandbox: Sandbox, store: Store) -> Iterator[str]:
    app = create_app(store, engine_for(sandbox), allow_private_webhooks=True)
    with LiveServer(app) as url:
        yield url


@pytest.fixture
def key(store: Store) -> str:
    created, _ = store.create_key("files", 1000)
    return created


@pytest.fixture
def client(base_url: str, key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a(key), timeout=60) as opened:
        yield opened


def upload(
    client: httpx.Client, name: str, content: bytes, email_column: str | None = None
) -> httpx.Response:
    data = {"email_column": email_column} if email_column is not None else None
    return client.post("/verify/file", files={"file": (name, content)}, data=data)


def wait_done(client: httpx.Client, job_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/verify/file/{job_id}").json()
        if body["data"]["status"] in ("completed", "failed"):
            return body["data"]
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def read_csv(response: httpx.Response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.text)))


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["success"] is False
    assert body["code"] == code
    assert body["error"]["code"] == code
    return body


@pytest.fixture(scope="module")
def done(base_url: str, store: Store) -> dict[str, Any]:
    """The CRM-like CSV uploaded once and verified: acceptance, final status, key, result rows."""
    key, _ = store.create_key("done", 100)
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a(key), timeout=60) as client:
        accepted = upload(client, "contacts.csv", csv_bytes(CONTACTS))
        assert accepted.status_code == 200, accepted.text
        job_id = accepted.json()["data"]["task_id"]
        final = wait_done(client, job_id)
        rows = read_csv(client.get(f"/verify/file/{job_id}/results"))
        credits = client.get("/credits").json()["data"]
    return {
        "key": key,
        "accepted": accepted.json(),
        "final": final,
        "rows": rows,
        "credits": credits,
    }


def test_acceptance(done: dict[str, Any]) -> None:
    body = done["accepted"]
    assert (body["success"], body["code"]) == (True, "0")
    data = body["data"]
    assert set(data) == ACCEPTANCE
    assert data["status"] == "pending"
    assert data["file_name"] == "contacts.csv"
    assert data["file_size"] == len(csv_bytes(CONTACTS))
    assert data["total_rows"] == len(CONTACTS) - 1
    assert data["unique_emails"] == data["estimated_count"] == DISTINCT
    assert data["email_column"] == "Email"
    assert data["status_url"] == f"/a/v1/verify/file/{data['task_id']}"
    assert data["created_at"].endswith("Z")


def test_completed_job(done: dict[str, Any]) -> None:
    final = done["final"]
    assert set(final) == COMPLETED
    assert final["status"] == "completed"
    assert final["total_emails"] == final["processed_emails"] == DISTINCT
    assert final["progress_percent"] == 100
    counts = {
        k: final[f"{k}_emails"]
        for k in ("valid", "invalid", "unknown", "role", "catchall", "disposable")
    }
    assert counts == {
        "valid": 1,
        "invalid": 1,
        "unknown": 1,
        "role": 1,
        "catchall": 1,
        "disposable": 1,
    }
    assert sum(counts.values()) == final["total_emails"]
    # one credit per distinct address verified, the unknown one free
    assert final["credits_used"] == DISTINCT - 1
    assert done["credits"]["credits_consumed"] == DISTINCT - 1
    assert done["credits"]["credits_balance"] == 100 - (DISTINCT - 1)
    job_id = final["job_id"]
    assert final["download_url"] == f"/a/v1/verify/file/{job_id}/results"
    assert final["result_file_path"] == final["download_url"]
    assert final["process_time_seconds"] > 0  # probing took some time
    assert final["completed_at"] >= final["created_at"]


def test_result_file_has_every_row_in_order(done: dict[str, Any]) -> None:
    rows = done["rows"]
    assert list(rows[0]) == [*CONTACTS[0], *RESULT_COLUMNS]
    assert [r["id"] for r in rows] == [row[0] for row in CONTACTS[1:]]
    by_id = {r["id"]: r for r in rows}
    assert by_id["1"]["status"] == by_id["3"]["status"] == "valid"  # the duplicate, verified once
    assert by_id["3"]["Email"] == VALID.upper()  # the cell as uploaded
    assert (by_id["2"]["status"], by_id["2"]["reason"]) == ("invalid", "mailbox_not_found")
    for blank in ("4", "5"):  # no address in the cell: invalid, invalid_syntax, not probed
        assert (by_id[blank]["status"], by_id[blank]["reason"]) == ("invalid", "invalid_syntax")
        assert by_id[blank]["smtp_check"] == "false"
    assert by_id["6"]["status"] == "catchall"
    assert by_id["7"]["status"] == "role"
    assert by_id["8"]["status"] == "disposable"
    assert by_id["9"]["status"] == "unknown"
    assert by_id["1"]["reason"] == ""  # null reason: an empty cell
    assert by_id["1"]["is_deliverable"] == "true"
    assert float(by_id["1"]["score"]) >= 0.9


def test_formula_cells_are_escaped(done: dict[str, Any]) -> None:
    by_id = {r["id"]: r for r in done["rows"]}
    assert by_id["1"]["Note"] == '\'=HYPERLINK("http://evil")'
    assert by_id["2"]["Note"] == "'+1 555"
    assert by_id["3"]["Note"] == "'-dup"
    assert by_id["4"]["Note"] == "'@home"


@pytest.mark.parametrize(
    ("params", "statuses"),
    [
        ({"valid": "true", "catchall": "true", "role": "true"}, {"valid", "catchall", "role"}),
        ({"invalid": "true"}, {"invalid"}),
        ({"unknown": "true", "valid": "false"}, {"unknown"}),
        ({"valid": "false", "invalid": "false"}, None),  # no flag true: every row
        ({}, None),
    ],
)
def test_result_filters(
    base_url: str, done: dict[str, Any], params: dict[str, str], statuses: set[str] | None
) -> None:
    job_id = done["final"]["job_id"]
    expected = [r for r in done["rows"] if statuses is None or r["status"] in statuses]
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a(done["key"])) as owner:
        got = read_csv(owner.get(f"/verify/file/{job_id}/results", params=params))
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    if statuses == {"invalid"}:
        assert {r["id"] for r in got} == {"2", "4", "5"}  # blank cells count as invalid


def test_bad_filter_value(base_url: str, done: dict[str, Any]) -> None:
    job_id = done["final"]["job_id"]
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a(done["key"])) as owner:
        response = owner.get(f"/verify/file/{job_id}/results", params={"valid": "maybe"})
    assert_error(response, 400, "4000")


def test_another_keys_job_is_not_found(client: httpx.Client, done: dict[str, Any]) -> None:
    job_id = done["final"]["job_id"]
    assert_error(client.get(f"/verify/file/{job_id}"), 404, "4040")
    assert_error(client.get(f"/verify/file/{job_id}/results"), 404, "4040")
    assert_error(client.get("/verify/file/no-such-job"), 404, "4040")


def test_missing_or_wrong_key(base_url: str, done: dict[str, Any]) -> None:
    job_id = done["final"]["job_id"]
    with httpx.Client(base_url=f"{base_url}/a/v1") as anonymous:
        assert_error(anonymous.get(f"/verify/file/{job_id}"), 401, "4010")
        response = anonymous.post("/verify/file", files={"file": ("a.csv", b"email\nx@y.test\n")})
        assert_error(response, 401, "4010")
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a("lh_wrong")) as wrong:
        assert_error(wrong.get(f"/verify/file/{job_id}/results"), 401, "4010")


@pytest.mark.parametrize("fmt", ["csv", "xlsx", "xls", "txt"])
def test_every_format(client: httpx.Client, fmt: str) -> None:
    rows = [["Company", "E-Mail"], ["Acme", VALID], ["Acme", NO_MAILBOX], ["Fabrikam", CATCH_ALL]]
    if fmt == "txt":
        content = "\n".join(r[1] for r in rows[1:]).encode() + b"\n\n"  # an empty line: no row
        column, header = "email", ["email"]
    else:
        content = {"csv": csv_bytes, "xlsx": xlsx_bytes, "xls": xls_bytes}[fmt](rows)
        column, header = "E-Mail", rows[0]
    accepted = upload(client, f"list.{fmt}", content)
    assert accepted.status_code == 200, accepted.text
    data = accepted.json()["data"]
    assert (data["email_column"], data["total_rows"], data["unique_emails"]) == (column, 3, 3)
    final = wait_done(client, data["task_id"])
    assert final["status"] == "completed"
    got = read_csv(client.get(f"/verify/file/{data['task_id']}/results"))
    assert list(got[0]) == [*header, *RESULT_COLUMNS]
    assert [r["status"] for r in got] == ["valid", "invalid", "catchall"]


def test_named_email_column(client: httpx.Client) -> None:
    rows = [["work_email", "personal_email"], [VALID, CATCH_ALL], [NO_MAILBOX, CATCH_ALL]]
    ambiguous = upload(client, "people.csv", csv_bytes(rows))
    body = assert_error(ambiguous, 400, "4000")
    assert "work_email" in body["error"]["message"]
    assert "email_column" in body["error"]["message"]  # says how to name it
    assert "/tmp" not in body["error"]["message"]  # the upload's name, not a server path
    named = upload(client, "people.csv", csv_bytes(rows), email_column="personal_email")
    assert named.status_code == 200, named.text
    assert named.json()["data"]["email_column"] == "personal_email"
    assert named.json()["data"]["unique_emails"] == 1
    missing = upload(client, "people.csv", csv_bytes(rows), email_column="mail")
    assert "mail" in assert_error(missing, 400, "4000")["error"]["message"]


def test_results_before_completion_and_in_progress_shape(sandbox: Sandbox, tmp_path: Path) -> None:
    engine = PausedEngine(engine_for(sandbox))
    with Store(f"sqlite:///{tmp_path / 'progress.db'}") as store:
        key, _ = store.create_key("progress", 10)
        with (
            LiveServer(create_app(store, engine)) as url,
            httpx.Client(base_url=f"{url}/a/v1", headers=a(key), timeout=30) as client,
        ):
            accepted = upload(client, "two.csv", csv_bytes([["email"], [VALID], [NO_MAILBOX]]))
            job_id = accepted.json()["data"]["task_id"]
            assert engine.started.wait(10)
            status = client.get(f"/verify/file/{job_id}").json()["data"]
            assert set(status) == IN_PROGRESS
            assert status["status"] == "processing"
            assert status["processed_emails"] == 0
            assert status["progress_percent"] == 0
            body = assert_error(client.get(f"/verify/file/{job_id}/results"), 400, "4000")
            assert "processing" in body["error"]["message"]
            engine.go.set()
            assert wait_done(client, job_id)["status"] == "completed"


class PausedEngine:
    """The real engine, held before its first result until ``go`` is set."""

    def __init__(self, engine: Engine) -> None:
        import threading

        self.engine = engine
        self.started = threading.Event()
        self.go = threading.Event()

    async def verify_each(
        self, emails: Any, *, check_smtp: bool | None = None, **lane: Any
    ) -> AsyncIterator[tuple[object, Any]]:
        self.started.set()
        await asyncio.to_thread(self.go.wait, 30)
        async for pair in self.engine.verify_each(emails, check_smtp=check_smtp, **lane):
            yield pair


class FailingEngine:
    async def verify_each(self, emails: Any, *, check_smtp: bool | None = None, **lane: Any) -> Any:
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover


def test_failed_job(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'failed.db'}") as store:
        key, _ = store.create_key("failing", 10)
        with (
            LiveServer(create_app(store, FailingEngine())) as url,  # type: ignore[arg-type]
            httpx.Client(base_url=f"{url}/a/v1", headers=a(key), timeout=30) as client,
        ):
            accepted = upload(client, "one.csv", csv_bytes([["email"], [VALID]]))
            final = wait_done(client, accepted.json()["data"]["task_id"])
            credits = client.get("/credits").json()["data"]
    assert final["status"] == "failed"
    assert final["error"]["code"] == "1000"
    assert "secret internal detail" not in json.dumps(final)
    assert "download_url" not in final
    assert credits["credits_balance"] == 10  # the reservation came back


def test_insufficient_credits(base_url: str, store: Store) -> None:
    key, _ = store.create_key("poor", 2)
    with httpx.Client(base_url=f"{base_url}/a/v1", headers=a(key)) as client:
        rows = [["email"], [VALID], [NO_MAILBOX], [CATCH_ALL]]
        assert_error(upload(client, "three.csv", csv_bytes(rows)), 402, "4020")
        assert client.get("/credits").json()["data"]["credits_balance"] == 2  # nothing taken


def _zip_bomb() -> bytes:
    """An XLSX whose sheet inflates to about 1 GiB."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as sheet:
            block = b"<row>" + b" " * (1024 * 1024 - 11) + b"</row>"
            for _ in range(1024):
                sheet.write(block)
    return out.getvalue()


BAD_UPLOADS: dict[str, Callable[[], tuple[str, bytes]]] = {
    "unsupported extension": lambda: ("contacts.pdf", b"%PDF-1.4"),
    "no extension": lambda: ("contacts", b"email\na@b.test\n"),
    "empty file": lambda: ("empty.csv", b""),
    "header only": lambda: ("header.csv", b"email\n"),
    "binary garbage named .csv": lambda: ("garbage.csv", bytes(range(256)) * 64),
    "garbage named .xlsx": lambda: ("garbage.xlsx", b"PK\x03\x04 not really a zip" * 10),
    "zip bomb named .xlsx": lambda: ("bomb.xlsx", _zip_bomb()),
    "no email column": lambda: ("names.csv", b"first,last\nJane,Doe\nJohn,Roe\n"),
}


@pytest.mark.parametrize("case", sorted(BAD_UPLOADS))
def test_bad_uploads(client: httpx.Client, case: str) -> None:
    name, content = BAD_UPLOADS[case]()
    before = client.get("/credits").json()["data"]["credits_balance"]
    assert_error(upload(client, name, content), 400, "4000")
    assert client.get("/credits").json()["data"]["credits_balance"] == before  # still serving


def test_bad_requests(client: httpx.Client) -> None:
    assert_error(client.post("/verify/file", json={"file": "a.csv"}), 400, "4000")
    no_file = client.post("/verify/file", data={"email_column": "email"}, files={"x": ("a", b"")})
    assert_error(no_file, 400, "4000")
    broken = client.post(
        "/verify/file",
        content=b"--XX\r\nContent-Disposition: form-data; name=",
        headers={"content-type": "multipart/form-data; boundary=XX"},
    )
    assert_error(broken, 400, "4000")


def test_too_large_by_size(client: httpx.Client) -> None:
    line = b"someone@example.test\n"
    just_over = b"email\n" + line * (MAX_FILE_BYTES // len(line) + 1)
    assert len(just_over) > MAX_FILE_BYTES
    body = assert_error(upload(client, "big.csv", just_over), 413, "4130")
    assert str(MAX_FILE_BYTES) in body["error"]["message"]
    # Declared far over the limit: refused before the body is read.
    huge = b"email\n" + line * (2 * MAX_FILE_BYTES // len(line))
    assert_error(upload(client, "huge.csv", huge), 413, "4130")


def test_too_large_while_streaming_without_a_length(client: httpx.Client) -> None:
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        yield b'--XX\r\nContent-Disposition: form-data; name="file"; filename="s.csv"\r\n\r\n'
        yield b"email\n"
        for _ in range(4 * MAX_FILE_BYTES // (1024 * 1024)):  # 80 MiB, if it were all read
            sent += 1024 * 1024
            yield b"a@example.test\n" * (1024 * 1024 // 15) + b"x" * (1024 * 1024 % 15)
        yield b"\r\n--XX--\r\n"

    response = client.post(
        "/verify/file",
        content=body(),
        headers={"content-type": "multipart/form-data; boundary=XX"},
    )
    assert_error(response, 413, "4130")
    assert client.get("/credits").status_code == 200


def test_too_many_rows(client: httpx.Client) -> None:
    at_limit = b"email\n" + b"a@example.test\n" * (MAX_ROWS + 1)
    body = assert_error(upload(client, "rows.csv", at_limit), 413, "4130")
    assert str(MAX_ROWS) in body["error"]["message"]


def test_completion_queues_the_file_completed_event(
    base_url: str, store: Store, client: httpx.Client, key: str
) -> None:
    hook = client.post(
        "/webhooks",
        json={"url": "https://hooks.example.com/files", "events": ["file.completed"]},
    )
    assert hook.status_code == 200, hook.text
    accepted = upload(client, "hooked.csv", csv_bytes([["email"], [VALID], [ROLE]]))
    job_id = accepted.json()["data"]["task_id"]
    final = wait_done(client, job_id)
    with store.transaction() as conn:
        rows = conn.execute(
            select(WebhookOutbox.event, WebhookOutbox.payload).where(
                WebhookOutbox.url == "https://hooks.example.com/files"
            )
        ).all()
    events = [(event, json.loads(payload)) for event, payload in rows]
    mine = [p for e, p in events if e == "file.completed" and p["data"]["job_id"] == job_id]
    assert len(mine) == 1
    data = mine[0]["data"]
    assert set(data) == {
        "job_id",
        "file_name",
        "total_emails",
        "valid_emails",
        "invalid_emails",
        "role_emails",
        "catchall_emails",
        "unknown_emails",
        "disposable_emails",
        "credits_used",
        "process_time_seconds",
        "result_file_path",
        "download_url",
    }
    assert data["file_name"] == "hooked.csv"
    assert (data["total_emails"], data["valid_emails"], data["role_emails"]) == (2, 1, 1)
    assert data["download_url"] == final["download_url"]
    assert mine[0]["event"] == "file.completed"

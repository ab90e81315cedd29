"""XLSX and XLS workbooks (``sources/excel.py``): the first sheet's cells as text, corrupt files
and zip bombs refused."""

import datetime as dt
import io
import os
import re
import zipfile
from pathlib import Path

import openpyxl
import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import BadRecord, SourceError, open_source
from tests.pipeline.sources.helpers import rows_of


def xlsx(path: Path, rows: list[list[object]], extra_sheet: bool = False) -> Path:
    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    if extra_sheet:
        book.create_sheet("other").append(["not", "read"])
    book.save(path)
    return path


def test_xlsx_numbers_dates_and_empty_rows(tmp_path: Path) -> None:
    path = xlsx(
        tmp_path / "people.xlsx",
        [
            [None],
            ["Email", "Phone", "Joined", "Seen", "Score", "Active"],
            [
                "ann@x.com",
                33612345678,
                dt.datetime(2024, 1, 5),
                dt.datetime(2024, 1, 5, 10, 30),
                1.5,
                True,
            ],
            [None, None, None],
            ["bob@y.com", 12.0, dt.date(2023, 12, 31), None, 0, False],
        ],
        extra_sheet=True,
    )
    source = open_source(path)
    assert source.info.kind == "xlsx"
    assert source.schema.names == ["Email", "Phone", "Joined", "Seen", "Score", "Active"]
    assert all(t == pa.string() for t in source.schema.types)
    assert rows_of(source) == [
        {
            "Email": "ann@x.com",
            "Phone": "33612345678",
            "Joined": "2024-01-05",
            "Seen": "2024-01-05T10:30:00",
            "Score": "1.5",
            "Active": "TRUE",
        },
        {
            "Email": "bob@y.com",
            "Phone": "12",
            "Joined": "2023-12-31",
            "Seen": None,
            "Score": "0",
            "Active": "FALSE",
        },
    ]


def test_xlsx_header_only_and_wide_rows(tmp_path: Path) -> None:
    assert rows_of(open_source(xlsx(tmp_path / "h.xlsx", [["Email", "Name"]]))) == []
    wide = open_source(xlsx(tmp_path / "w.xlsx", [["Email"], ["a@x.com", "Ann"]]))
    assert wide.schema.names == ["Email", "column_2"]
    assert rows_of(wide) == [{"Email": "a@x.com", "column_2": "Ann"}]


def test_xlsx_row_wider_than_the_sample_is_kept(tmp_path: Path) -> None:
    rows: list[list[object]] = [["Email", "Name"]] + [[f"u{i}@x.com", "n"] for i in range(1500)]
    rows.append(["late@x.com", "Late", "extra"])
    source = open_source(xlsx(tmp_path / "w.xlsx", rows))
    got = rows_of(source, rows=400)
    assert len(got) == 1501
    assert got[-1] == {"Email": "late@x.com", "Name": "Late,extra"}
    assert source.info.bad_records == [
        BadRecord(1501, "expected 2 fields, found 3", "late@x.com,Late,extra")
    ]


def test_xlsx_empty_sheet(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is empty"):
        open_source(xlsx(tmp_path / "e.xlsx", []))


def test_xls(tmp_path: Path) -> None:
    xlwt = pytest.importorskip("xlwt")
    book = xlwt.Workbook()
    sheet = book.add_sheet("people")
    date_style = xlwt.easyxf(num_format_str="YYYY-MM-DD")
    for col, value in enumerate(["Email", "Phone", "Joined", "Active"]):
        sheet.write(0, col, value)
    sheet.write(1, 0, "ann@x.com")
    sheet.write(1, 1, 33612345678.0)
    sheet.write(1, 2, dt.datetime(2024, 1, 5), date_style)
    sheet.write(1, 3, True)
    sheet.write(3, 0, "bob@y.com")
    sheet.write(3, 1, 2.5)
    book.add_sheet("other").write(0, 0, "not read")
    path = tmp_path / "people.xls"
    book.save(str(path))
    source = open_source(path)
    assert source.info.kind == "xls"
    assert rows_of(source) == [
        {"Email": "ann@x.com", "Phone": "33612345678", "Joined": "2024-01-05", "Active": "TRUE"},
        {"Email": "bob@y.com", "Phone": "2.5", "Joined": None, "Active": None},
    ]


def test_xls_empty(tmp_path: Path) -> None:
    xlwt = pytest.importorskip("xlwt")
    book = xlwt.Workbook()
    book.add_sheet("empty")
    path = tmp_path / "e.xls"
    book.save(str(path))
    with pytest.raises(SourceError, match="is empty"):
        open_source(path)


def _valid_xlsx_bytes(tmp_path: Path) -> bytes:
    return xlsx(tmp_path / "valid.xlsx", [["Email"], ["a@x.com"]]).read_bytes()


@pytest.mark.parametrize("kind", ["random", "truncated", "csv", "other zip"])
def test_corrupt_xlsx(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "bad.xlsx"
    if kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "truncated":
        data = _valid_xlsx_bytes(tmp_path)
        path.write_bytes(data[: len(data) // 2])
    elif kind == "csv":
        path.write_text("email\na@x.com\n")
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("hello.txt", "not a workbook")
    with pytest.raises(SourceError, match=f"^{re.escape(str(path))} is not a valid XLSX file: "):
        open_source(path)


@pytest.mark.parametrize("kind", ["random", "truncated", "xlsx renamed"])
def test_corrupt_xls(tmp_path: Path, kind: str) -> None:
    xlwt = pytest.importorskip("xlwt")
    path = tmp_path / "bad.xls"
    if kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "truncated":
        book = xlwt.Workbook()
        book.add_sheet("s").write(0, 0, "Email")
        buffer = io.BytesIO()
        book.save(buffer)
        path.write_bytes(buffer.getvalue()[:700])
    else:
        path.write_bytes(_valid_xlsx_bytes(tmp_path))
    with pytest.raises(SourceError, match=f"^{re.escape(str(path))} is not a valid XLS file: "):
        open_source(path)


def test_xlsx_zip_bomb_by_ratio(tmp_path: Path) -> None:
    path = tmp_path / "bomb.xlsx"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/worksheets/sheet1.xml", b"\0" * (20 << 20))
    assert path.stat().st_size < 100_000
    with pytest.raises(SourceError, match="zip bomb"):
        open_source(path)


def test_xlsx_zip_bomb_by_declared_size(tmp_path: Path) -> None:
    """A central directory that declares a 3 GiB member is refused before anything inflates."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/worksheets/sheet1.xml", b"<worksheet/>")
    data = bytearray(buffer.getvalue())
    directory = data.index(b"PK\x01\x02")
    data[directory + 24 : directory + 28] = (3 << 30).to_bytes(4, "little")  # uncompressed size
    path = tmp_path / "declared.xlsx"
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"inflate to 3,221,225,472 bytes.*zip bomb"):
        open_source(path)

"""Workbooks for the upload-limit tests and ``benchmarks/uploads.py``: a hostile XLSX whose
shared strings inflate hundreds of megabytes from a few compressed ones, and a legitimate one of
many rows."""

import os
import zipfile
from pathlib import Path

import openpyxl

_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


_PARTS = {
    "[Content_Types].xml": (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>'
    ),
    "_rels/.rels": (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>'
    ),
    "xl/workbook.xml": (
        f'<workbook xmlns="{_NS}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/'
        '2006/relationships"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets>'
        "</workbook>"
    ),
    "xl/_rels/workbook.xml.rels": (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/worksheet" Target="worksheets/sheet1.xml"/>'
        '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>'
    ),
    "xl/worksheets/sheet1.xml": (
        f'<worksheet xmlns="{_NS}"><sheetData>'
        '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"><v>1</v></c></row>'
        '<row r="2"><c r="A2" t="s"><v>2</v></c><c r="B2" t="s"><v>3</v></c></row>'
        "</sheetData></worksheet>"
    ),
}


def hostile_xlsx(path: Path, *, inflated: int = 600 << 20, string_chars: int = 32_000) -> Path:
    """An XLSX whose ``xl/sharedStrings.xml`` holds ``inflated`` bytes of large repeated strings
    (Excel's own cell limit is 32,767 characters), with a stored member of random bytes so that
    the whole file stays under the old zip-bomb guard's ratio of 100 and under 20 MiB. Its sheet
    is two rows: ``email``/``note`` and an address with one of the large strings."""
    count = inflated // (string_chars + 15)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for name, text in _PARTS.items():
            out.writestr(name, text)
        with out.open("xl/sharedStrings.xml", "w", force_zip64=True) as part:
            part.write(
                f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_NS}" count="{count + 3}" '
                f'uniqueCount="{count + 3}"><si><t>email</t></si><si><t>note</t></si>'
                "<si><t>ann@example.com</t></si>".encode()
            )
            chunk = b"<si><t>" + b"x" * string_chars + b"</t></si>"
            for _ in range(count):
                part.write(chunk)
            part.write(b"</sst>")
        # What the deflated strings lack, in bytes that do not compress: ratio about 90.
        pad = max(inflated // 90 - (out.fp.tell() if out.fp is not None else 0), 0)
        out.writestr(zipfile.ZipInfo("xl/media/pad.bin"), os.urandom(pad), zipfile.ZIP_STORED)
    return path


def many_rows_xlsx(path: Path, rows: int, domain: str = "example.com") -> Path:
    """A legitimate workbook: a header and ``rows`` distinct addresses with a few columns."""
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet()
    sheet.append(["id", "name", "email", "company"])
    for i in range(rows):
        sheet.append([i, f"Person {i}", f"person{i}@{domain}", f"Company {i % 97}"])
    book.save(path)
    return path


def heavy_xlsx(path: Path, rows: int = 2_000, string_chars: int = 32_000) -> Path:
    """A workbook within the upload limits that costs the most to hold: every row's second cell
    is the same shared string of ``string_chars`` characters (``rows`` x ``string_chars``
    characters of cells from a file of a few kilobytes)."""
    cells = "".join(
        f'<row r="{n}"><c r="A{n}" t="inlineStr"><is><t>p{n}@example.com</t></is></c>'
        f'<c r="B{n}" t="s"><v>3</v></c></row>'
        for n in range(2, rows + 2)
    )
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for name, text in _PARTS.items():
            if name == "xl/worksheets/sheet1.xml":
                text = (
                    f'<worksheet xmlns="{_NS}"><sheetData><row r="1"><c r="A1" t="s"><v>0</v>'
                    f'</c><c r="B1" t="s"><v>1</v></c></row>{cells}</sheetData></worksheet>'
                )
            out.writestr(name, text)
        out.writestr(
            "xl/sharedStrings.xml",
            f'<sst xmlns="{_NS}"><si><t>email</t></si><si><t>note</t></si><si><t>-</t></si>'
            f"<si><t>{'x' * string_chars}</t></si></sst>",
        )
    return path

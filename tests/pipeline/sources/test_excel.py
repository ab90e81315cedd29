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


# --- the XLSX reader against openpyxl (issue 28, item 3) --------------------------------------

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
_STYLES = (
    f'<styleSheet xmlns="{_MAIN}"><numFmts count="3">'
    '<numFmt numFmtId="164" formatCode="yyyy-mm-dd hh:mm:ss"/>'
    '<numFmt numFmtId="165" formatCode="0.00&quot; days&quot;"/>'
    '<numFmt numFmtId="166" formatCode="[h]:mm:ss"/></numFmts>'
    '<cellXfs count="7"><xf numFmtId="0"/><xf numFmtId="14"/><xf numFmtId="164"/>'
    '<xf numFmtId="166"/><xf numFmtId="165"/><xf numFmtId="22"/><xf numFmtId="49"/></cellXfs>'
    "</styleSheet>"
)


def _package(
    path: Path,
    sheet: str | bytes,
    strings: str | None = None,
    *,
    styles: str | None = _STYLES,
    date1904: bool = False,
) -> Path:
    """An XLSX of hand-written parts: ``sheet`` (the first worksheet's XML), the shared
    strings' XML and the styles'; a second sheet that is not read."""
    overrides = [
        ("/xl/workbook.xml", "sheet.main"),
        ("/xl/worksheets/sheet1.xml", "worksheet"),
        ("/xl/worksheets/sheet2.xml", "worksheet"),
    ]
    if strings is not None:
        overrides.append(("/xl/sharedStrings.xml", "sharedStrings"))
    if styles is not None:
        overrides.append(("/xl/styles.xml", "styles"))
    types = "".join(
        f'<Override PartName="{name}" ContentType="application/'
        f'vnd.openxmlformats-officedocument.spreadsheetml.{kind}+xml"/>'
        for name, kind in overrides
    )
    relations = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        out.writestr(
            "[Content_Types].xml",
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/'
            'vnd.openxmlformats-package.relationships+xml"/>'
            f'<Default Extension="xml" ContentType="application/xml"/>{types}</Types>',
        )
        out.writestr(
            "_rels/.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
            f'relationships"><Relationship Id="rId1" Type="{relations}/officeDocument" '
            'Target="xl/workbook.xml"/></Relationships>',
        )
        out.writestr(
            "xl/workbook.xml",
            f'<workbook xmlns="{_MAIN}" xmlns:r="{relations}">'
            f'<workbookPr date1904="{int(date1904)}"/><sheets>'
            '<sheet name="first" sheetId="1" r:id="rId1"/>'
            '<sheet name="second" sheetId="2" r:id="rId2"/></sheets></workbook>',
        )
        out.writestr(
            "xl/_rels/workbook.xml.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
            f'relationships"><Relationship Id="rId1" Type="{relations}/worksheet" '
            'Target="worksheets/sheet1.xml"/>'
            f'<Relationship Id="rId2" Type="{relations}/worksheet" '
            'Target="/xl/worksheets/sheet2.xml"/></Relationships>',
        )
        out.writestr("xl/worksheets/sheet1.xml", sheet)
        out.writestr(
            "xl/worksheets/sheet2.xml",
            f'<worksheet xmlns="{_MAIN}"><sheetData><row r="1"><c r="A1" t="inlineStr">'
            "<is><t>not read</t></is></c></row></sheetData></worksheet>",
        )
        if strings is not None:
            out.writestr("xl/sharedStrings.xml", strings)
        if styles is not None:
            out.writestr("xl/styles.xml", styles)
    return path


def _sheet(rows: str, before: str = "", after: str = "") -> str:
    return (
        f'{_DECLARATION}<worksheet xmlns="{_MAIN}" xmlns:r="http://schemas.openxmlformats.org/'
        'officeDocument/2006/relationships" xmlns:x14ac="http://schemas.microsoft.com/office/'
        f'spreadsheetml/2009/9/ac"><dimension ref="A1:C3"/>{before}<sheetData>{rows}'
        f'</sheetData>{after}<pageMargins left="0.7" right="0.7" top="0.75" '
        'bottom="0.75" header="0.3" footer="0.3"/></worksheet>'
    )


def _strings(*items: str) -> str:
    return f'{_DECLARATION}<sst xmlns="{_MAIN}" count="{len(items)}">{"".join(items)}</sst>'


def _openpyxl_rows(path: Path) -> list[list[str | None]]:
    """The rows as sources.excel read them through openpyxl before issue 28."""
    import warnings

    from listhygiene.pipeline.sources.excel import _text_row

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
        try:
            sheet = book.worksheets[0]
            sheet.reset_dimensions()
            rows = [_text_row(values) for values in sheet.iter_rows(values_only=True)]
        finally:
            book.close()
    return [row for row in rows if row]


def _new_rows(path: Path) -> tuple[list[list[str | None]], int, bool]:
    """The rows by the new reader; and how many rows expat read one at a time, and whether
    expat read the rest of the sheet."""
    from listhygiene.pipeline.sources.xlsx_sheet import SheetRows, open_package

    with zipfile.ZipFile(path) as archive:
        reader = SheetRows(archive, open_package(archive))
        rows = list(reader)
    return rows, reader.expat_rows, reader.by_expat


def _fast_shapes() -> tuple[str, str]:
    """A sheet of every kind of cell in the shapes writers emit, and its shared strings."""
    strings = _strings(
        "<si><t>plain</t></si>",
        '<si><r><rPr><b/></rPr><t>Bo</t></r><r><t xml:space="preserve">ld </t></r></si>',
        '<si><t>ふりがな</t><rPh sb="0" eb="1"><t>フ</t></rPh><phoneticPr fontId="1"/></si>',
        "<si><t>carriage_x005F_x000D_return &amp; &#233;&#x20AC; &lt;tag&gt;</t></si>",
        '<si><t xml:space="preserve">  spaced  </t></si>',
        "<si><t/></si>",
        "<si/>",
        "<si><t>line\r\nend\rhere</t></si>",
    )
    rows = (
        '<row r="1" spans="1:9" x14ac:dyDescent="0.25"><c r="A1" t="s"><v>0</v></c>'
        '<c r="B1" t="s"><v>1</v></c><c r="C1" t="s"><v>2</v></c><c r="D1" t="s"><v>3</v></c>'
        '<c r="E1" t="s"><v>4</v></c><c r="F1" t="s"><v>5</v></c><c r="G1" t="s"><v>6</v></c>'
        '<c r="H1" t="s"><v>7</v></c></row>'
        '<row r="2"><c r="A2"><v>7</v></c><c r="B2" t="n"><v>007</v></c><c r="C2"><v>-3</v></c>'
        '<c r="D2"><v>12345678901234567890</v></c><c r="E2"><v>1.5</v></c><c r="F2"><v>1E3</v>'
        '</c><c r="G2"><v>2.0</v></c><c r="H2"><v>1e-7</v></c><c r="I2"><v>0</v></c></row>'
        '<row r="3"><c r="A3" s="1"><v>45000</v></c><c r="B3" s="2"><v>43473.50509259259</v>'
        '</c><c r="C3" s="2"><v>0.25</v></c><c r="D3" s="3"><v>1.75</v></c><c r="E3" s="4">'
        '<v>2.5</v></c><c r="F3" s="5"><v>59</v></c><c r="G3" s="5"><v>61.5</v></c>'
        '<c r="H3" s="1"><v>-1</v></c><c r="I3" s="6"><v>3</v></c></row>'
        '<row r="4"><c r="A4" t="e"><v>#N/A</v></c><c r="B4" t="e"><v>#REF!</v></c>'
        '<c r="C4" t="b"><v>1</v></c><c r="D4" t="b"><v>0</v></c><c r="E4" t="str">'
        '<f>A1&amp;B1</f><v>formula text</v></c><c r="F4"><f t="shared" ref="F4:F5" si="0">'
        'C2*2</f><v>-6</v></c><c r="G4" t="d"><v>2024-01-05T10:30:00</v></c>'
        '<c r="H4" t="d"><v>2024-01-05</v></c><c r="I4" t="e"><v>#DIV/0!</v></c></row>'
        '<row r="5"><c r="A5" t="inlineStr"><is><t>inline</t></is></c><c r="C5" t="inlineStr">'
        '<is><t xml:space="preserve"> &amp;spaced&#10;</t></is></c><c r="E5" s="1"/>'
        '<c r="F5"><f t="shared" si="0"/><v>4</v></c><c r="G5" t="inlineStr"/>'
        '<c r="H5" t="s"><v>5</v></c><c r="I5" t="inlineStr"><is><t></t></is></c></row>'
        '<row r="6"/><row r="8"><c r="B8" t="s"><v>6</v></c><c r="C8" t="s"></c></row>'
        '<row r="9"><c r="J9" t="inlineStr"><is><t>far</t></is></c></row>'
    )
    return _sheet(rows), strings


@pytest.mark.parametrize("chunk", [None, 7])
def test_xlsx_cells_as_openpyxl_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int | None
) -> None:
    """Every kind of cell, in the shapes the regular expressions read: the same text as
    openpyxl gave (shared strings with runs, phonetics, ``_x005F_`` and references; numbers,
    dates, elapsed times, a date format that is not one, errors, booleans, formulas, ISO dates,
    inline strings, gaps, empty rows and cells); read in the reader's chunks and in chunks of 7
    bytes."""
    from listhygiene.pipeline.sources import xlsx_sheet

    if chunk is not None:
        monkeypatch.setattr(xlsx_sheet, "CHUNK", chunk)
    sheet, strings = _fast_shapes()
    path = _package(tmp_path / "shapes.xlsx", sheet, strings)
    rows, expat_rows, expat = _new_rows(path)
    assert rows == _openpyxl_rows(path)
    assert expat_rows == 0
    assert not expat  # only the part after sheetData, as it always is
    assert rows[3][:2] == ["#N/A", "#REF!"]
    assert rows[2][:3] == ["2023-03-15", "2019-01-08T12:07:20", "06:00:00"]


def test_xlsx_error_cells_keep_their_text(tmp_path: Path) -> None:
    """An error cell is its text (python-calamine, measured against, reads it as '')."""
    rows = (
        '<row r="1"><c r="A1" t="inlineStr"><is><t>Email</t></is></c><c r="B1" '
        't="inlineStr"><is><t>Score</t></is></c></row><row r="2"><c r="A2" t="e"><v>#N/A'
        '</v></c><c r="B2" t="e"><f>1/0</f><v>#DIV/0!</v></c></row><row r="3"><c r="A3" '
        't="e"><v>#REF!</v></c><c r="B3" t="e"><v>#VALUE!</v></c></row>'
    )
    source = open_source(_package(tmp_path / "errors.xlsx", _sheet(rows)))
    assert rows_of(source) == [
        {"Email": "#N/A", "Score": "#DIV/0!"},
        {"Email": "#REF!", "Score": "#VALUE!"},
    ]


_ODD_SHAPES = {
    # attribute order, quotes and white space the regular expressions do not read
    "attributes": '<row r="1"><c t="s" r="A1"><v>0</v></c><c r=\'B1\' t = "inlineStr"><is>'
    '<t>x</t></is></c><c r="C1" cm="1"><v>5</v></c></row>',
    # cells and rows without r, pretty-printed
    "no references": '\n  <row>\n    <c t="s">\n      <v>0</v>\n    </c>\n    <c/>\n'
    '    <c><v>2</v></c>\n  </row>\n  <row spans="1:3"><c r="C2"><v>3</v></c><c><v>4</v>'
    "</c></row>\n",
    # rich text and phonetics in an inline string, a v with a child, text around values
    "rich inline": '<row r="1"><c r="A1" t="inlineStr"><is><r><t>ri</t></r><r><rPr><i/>'
    '</rPr><t>ch</t></r><rPh sb="0" eb="1"><t>x</t></rPh></is></c>'
    '<c r="B1">x<v>1<b/>2</v>y</c></row>',
    # rows out of order (openpyxl skips them), a repeated row, cells out of order
    "order": '<row r="3"><c r="A3"><v>1</v></c></row><row r="2"><c r="A2"><v>2</v></c>'
    '</row><row r="3"><c r="A3"><v>3</v></c></row><row r="4"><c r="C4"><v>4</v></c>'
    '<c r="A4"><v>5</v></c></row><row r="5"><c r="B5"><v>6</v></c><c r="B5"><v>7</v></c>'
    "</row>",
    # a comment, CDATA and a processing instruction in sheetData: expat reads from there
    "markup": '<row r="1"><c r="A1"><v>1</v></c></row><!-- <row r="9"><c r="A9"><v>9</v>'
    '</c></row> --><row r="2"><c r="A2" t="inlineStr"><is><t><![CDATA[<a&b>]]></t></is>'
    '</c></row><?pi data?><row r="3"><c r="A3"><v>3</v></c></row>',
    # a row number written as a float, lower-case references
    "numbers": '<row r="2.0"><c r="b2"><v>1</v></c></row><row r="3"><c r="c3"><v>2</v></c></row>',
    # a reference openpyxl does not read
    "bad reference": '<row r="1"><c r="$A$1"><v>1</v></c></row>',
    # namespace declarations in sheetData: elements of another namespace are not cells' values
    "namespaces": '<row r="1" xmlns:q="urn:q" q:a="1"><c r="A1"><v>1</v></c></row><row r="2">'
    '<c r="A2" xmlns="urn:other"><v>2</v></c><c r="B2"><v xmlns="urn:other">3</v></c>'
    '<c r="C2"><v>4</v></c></row><row r="3" xmlns="urn:other"><c r="A3"><v>5</v></c></row>',
}


@pytest.mark.parametrize("chunk", [None, 5])
@pytest.mark.parametrize("shape", sorted(_ODD_SHAPES))
def test_xlsx_other_shapes_as_openpyxl_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str, chunk: int | None
) -> None:
    """Rows of other shapes are read by expat, one at a time or from where they start, to the
    same text as openpyxl's, or refused as openpyxl refused them."""
    from listhygiene.pipeline.sources import xlsx_sheet

    if chunk is not None:
        monkeypatch.setattr(xlsx_sheet, "CHUNK", chunk)
    path = _package(
        tmp_path / f"{shape}.xlsx", _sheet(_ODD_SHAPES[shape]), _strings("<si><t>s</t></si>")
    )
    try:
        expected: list[list[str | None]] | None = _openpyxl_rows(path)
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(SourceError, match="is not a valid XLSX file"):
            rows_of(open_source(path))
        return
    rows, expat_rows, expat = _new_rows(path)
    assert rows == expected
    assert expat_rows > 0 or expat


@pytest.mark.parametrize("kind", ["prefixed", "utf-16", "1904"])
def test_xlsx_documents_read_by_expat_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A sheet whose root is prefixed, or not in UTF-8, is read by expat from its start (in
    chunks of 11 bytes here); the 1904 date system moves dates."""
    from listhygiene.pipeline.sources import xlsx_sheet

    monkeypatch.setattr(xlsx_sheet, "CHUNK", 11)
    sheet, strings = _fast_shapes()
    data: str | bytes = sheet
    if kind == "prefixed":
        data = (
            sheet.replace(f'xmlns="{_MAIN}"', f'xmlns:x="{_MAIN}"')
            .replace("<", "<x:")
            .replace("<x:/", "</x:")
            .replace("<x:?xml", "<?xml")
        )
    elif kind == "utf-16":
        data = sheet.replace('encoding="UTF-8"', 'encoding="UTF-16"').encode("utf-16")
    path = _package(tmp_path / f"{kind}.xlsx", data, strings, date1904=kind == "1904")
    rows, _, expat = _new_rows(path)
    assert rows == _openpyxl_rows(path)
    assert expat == (kind != "1904")
    if kind == "1904":
        assert rows[2][0] == "2027-03-16"


@pytest.mark.parametrize(
    ("before", "by_expat"),
    [
        ("<!-- a comment --><?pi?><sheetPr/>", False),
        ('<!-- <sheetData><row r="1"><c r="A1"><v>9</v></c></row> -->', True),
    ],
)
def test_xlsx_markup_before_the_rows(tmp_path: Path, before: str, by_expat: bool) -> None:
    """What precedes sheetData is parsed by expat: a comment there is no matter, and a
    ``<sheetData`` in a comment is not taken for the rows."""
    rows = '<row r="1"><c r="A1"><v>1</v></c></row><row r="2"><c r="A2"><v>2</v></c></row>'
    path = _package(tmp_path / "before.xlsx", _sheet(rows, before=before))
    found, _, expat = _new_rows(path)
    assert found == _openpyxl_rows(path) == [["1"], ["2"]]
    assert expat == by_expat


@pytest.mark.parametrize("chunk", [None, 4099, 61])
def test_xlsx_many_random_sheets_as_openpyxl_read_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int | None
) -> None:
    """Seeded random sheets mixing every shape, read in chunks of the reader's size and of odd
    small sizes (rows, references, characters and end tags cut between chunks): the same rows as
    openpyxl's, cell by cell."""
    import random

    from listhygiene.pipeline.sources import xlsx_sheet

    if chunk is not None:
        monkeypatch.setattr(xlsx_sheet, "CHUNK", chunk)
    random.seed(28)
    strings = _strings(*(f"<si><t>s{i} &amp; ü</t></si>" for i in range(50)))
    cells = [
        '<c r="{ref}"><v>{n}</v></c>',
        '<c r="{ref}" t="s"><v>{s}</v></c>',
        '<c r="{ref}" s="2"><v>{d}</v></c>',
        '<c r="{ref}" s="1" t="n"><v>{n}</v></c>',
        '<c r="{ref}" t="inlineStr"><is><t>in {n} &lt;x&gt;</t></is></c>',
        '<c r="{ref}" t="e"><v>#N/A</v></c>',
        '<c r="{ref}" t="b"><v>{b}</v></c>',
        '<c r="{ref}" s="1"/>',
        '<c r="{ref}"><f>SUM(A1:A2)</f><v>{f}</v></c>',
        '<c t="s" r="{ref}"><v>{s}</v></c>',
        "<c><v>{n}</v></c>",
        '<c r="{ref}" t="inlineStr"><is><r><t>ri</t></r><r><t>ch</t></r></is></c>',
    ]
    for case in range(6):
        lines = []
        number = 0
        for _ in range(random.randint(200, 3000 if chunk is None else 300)):
            number += random.choice([1, 1, 1, 2, 5])
            columns = sorted(random.sample(range(1, 30), random.randint(0, 12)))
            body = "".join(
                random.choice(cells).format(
                    ref=f"{openpyxl.utils.get_column_letter(column)}{number}",
                    n=random.choice(["1", "-2", "3.25", "1e5", "0", "99999999999", "0.1"]),
                    s=random.randrange(50),
                    d=round(random.uniform(1, 60000), 6),
                    b=random.choice("01"),
                    f=random.randint(-5, 5),
                )
                for column in columns
            )
            head = random.choice([f'<row r="{number}">', f'<row r="{number}" spans="1:29">'])
            lines.append(f"{head}{body}</row>")
        if case == 5:  # expat from the middle on
            lines.insert(len(lines) // 2, "<!-- a comment -->")
        path = _package(tmp_path / f"random{case}.xlsx", _sheet("".join(lines)), strings)
        rows, _, by_expat = _new_rows(path)
        assert rows == _openpyxl_rows(path), case
        assert by_expat == (case == 5)


def test_xlsx_sample_export_as_openpyxl_read_it() -> None:
    path = Path(__file__).parents[3] / "sample_data" / "crm_export.xlsx"
    rows, expat_rows, expat = _new_rows(path)
    assert rows == _openpyxl_rows(path)
    assert len(rows) == 1001
    assert (expat_rows, expat) == (0, False)


_BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    '<!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">]>'
)


@pytest.mark.parametrize("part", ["sheet", "shared strings", "external entity"])
def test_xlsx_document_type_declarations_are_refused(tmp_path: Path, part: str) -> None:
    """A part with a DTD (entity expansion, "billion laughs", external entities) is refused,
    its entities never expanded."""
    rows = (
        '<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="2"><c r="A2" t="s"><v>0</v></c></row>'
    )
    sheet = _sheet(rows)
    strings = _strings("<si><t>email</t></si>")
    if part == "sheet":
        sheet = sheet.replace(_DECLARATION, _BOMB).replace(
            "<v>0</v></c></row><row",
            '<v>0</v></c><c r="B1" t="inlineStr"><is><t>&lol2;</t></is></c></row><row',
            1,
        )
    elif part == "shared strings":
        strings = _BOMB + strings.replace(_DECLARATION, "").replace("email", "&lol2;")
    else:
        strings = (
            '<?xml version="1.0"?><!DOCTYPE sst [<!ENTITY secret SYSTEM "file:///etc/passwd">]>'
            + strings.replace(_DECLARATION, "").replace("email", "&secret;")
        )
    path = _package(tmp_path / "dtd.xlsx", sheet, strings)
    with pytest.raises(SourceError) as refused:
        open_source(path)
    message = str(refused.value)
    assert message.startswith(f"{path} is refused: its part xl/")
    assert "document type declaration (DTD)" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "broken",
    [
        '<row r="1"><c r="A1"><v>1</v></c></row><row r="2"><c r="A2"><v>2</v></row>',
        '<row r="1"><c r="A1" t="inlineStr"><is><t>a &bogus; b</t></is></c></row>',
        '<row r="1"><c r="A1" t="inlineStr"><is><t>a &#1; b</t></is></c></row>',
        '<row r="1"><c r="A1" t="inlineStr"><is><t>a \x01 b</t></is></c></row>',
        '<row r="1"><c r="A1" t="s"><v>7</v></c></row>',
        '<row r="1"><c r="A1" t="b"><v>yes</v></c></row>',
    ],
)
def test_xlsx_malformed_sheets_are_not_valid(tmp_path: Path, broken: str) -> None:
    """Malformed XML, a reference to no character, a shared string that is not there, a
    boolean that is not one: refused in one line, as openpyxl refused them."""
    path = _package(tmp_path / "broken.xlsx", _sheet(broken), _strings("<si><t>s</t></si>"))
    with pytest.raises(Exception):  # noqa: B017, PT011 (openpyxl raises whatever its parsers meet)
        _openpyxl_rows(path)
    with pytest.raises(SourceError) as invalid:
        rows_of(open_source(path))
    assert str(invalid.value).startswith(f"{path} is not a valid XLSX file: ")
    assert "\n" not in str(invalid.value)


def test_xlsx_is_read_as_a_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The header and sample read only the start of the sheet, and the first batch is out
    before the sheet is read to its end: the reader never holds the whole sheet
    (python-calamine, measured against, loads it whole)."""
    rows = [["Email", "Name", "Note"]] + [
        [f"user{i}@example.com", f"Name {i}", "x" * (i % 50)] for i in range(60_000)
    ]
    path = xlsx(tmp_path / "big.xlsx", rows)
    size = zipfile.ZipFile(path).getinfo("xl/worksheets/sheet1.xml").file_size
    assert size > 8 << 20
    consumed = {"bytes": 0}
    read = zipfile.ZipExtFile.read

    def counted(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        data = read(self, n)
        if self.name == "xl/worksheets/sheet1.xml":
            consumed["bytes"] += len(data)
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counted)
    source = open_source(path)
    assert consumed["bytes"] <= 2 << 20  # the header and the sample: the start of the sheet
    consumed["bytes"] = 0
    batches = source.batches(1000)
    first = next(batches)
    assert first.num_rows == 1000
    assert consumed["bytes"] <= 2 << 20 < size
    assert sum(batch.num_rows for batch in batches) == 59_000
    assert consumed["bytes"] == size

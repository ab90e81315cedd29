"""Every reader on real files: every record a row, broken ones kept and reported, clear errors."""

import csv
import datetime as dt
import io
import json
import os
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openpyxl
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.sources import BadRecord, Source, SourceError, open_source

POSTGRES_URL = os.environ.get(
    "LISTHYGIENE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def rows_of(source: Source, rows: int = 65_536) -> list[dict[str, object]]:
    batches = list(source.batches(rows))
    assert all(batch.schema == source.schema for batch in batches)
    return [row for batch in batches for row in batch.to_pylist()]


def column(source: Source, name: str) -> list[object]:
    return [row[name] for row in rows_of(source)]


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


# -- CSV: encodings -----------------------------------------------------------------------------

PEOPLE = (
    "name,email,city\n"
    "José Müller,jose@example.com,Zürich\n"
    "Françoise Lefèvre,f@example.fr,Besançon\n"
)


def test_csv_utf8(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "people.csv", PEOPLE))
    assert source.info.kind == "csv"
    assert source.info.name == str(tmp_path / "people.csv")
    assert source.info.encoding == "utf-8"
    assert source.info.delimiter == ","
    assert source.schema == pa.schema([(n, pa.string()) for n in ("name", "email", "city")])
    assert rows_of(source) == [
        {"name": "José Müller", "email": "jose@example.com", "city": "Zürich"},
        {"name": "Françoise Lefèvre", "email": "f@example.fr", "city": "Besançon"},
    ]
    assert source.info.bad_records == []


def test_csv_utf8_with_bom(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "p.csv", PEOPLE, "utf-8-sig"))
    assert source.info.encoding == "utf-8-sig"
    assert source.schema.names == ["name", "email", "city"]
    assert column(source, "name") == ["José Müller", "Françoise Lefèvre"]


@pytest.mark.parametrize(
    ("codec", "reported"), [("utf-16", "utf-16-le"), ("utf-16-be", "utf-16-be")]
)
def test_csv_utf16_with_bom(tmp_path: Path, codec: str, reported: str) -> None:
    data = PEOPLE.encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data
    path = tmp_path / "p.csv"
    path.write_bytes(data)
    source = open_source(path)
    assert source.info.encoding == reported
    assert source.schema.names == ["name", "email", "city"]
    assert column(source, "city") == ["Zürich", "Besançon"]


def test_csv_cp1252_is_detected(tmp_path: Path) -> None:
    text = (
        "name;email;ville\n"
        "Renée Côté;renee@example.fr;Québec\n"
        "Noël Crème;noel@example.fr;Nîmes\n"
        "Åsa Øberg;asa@example.se;Malmö\n"
        "Prix en €;euro@example.fr;Besançon\n"
    )
    source = open_source(write(tmp_path / "latin.csv", text, "cp1252"))
    assert source.info.encoding == "cp1252"
    assert source.info.delimiter == ";"
    assert column(source, "name") == ["Renée Côté", "Noël Crème", "Åsa Øberg", "Prix en €"]


def test_csv_explicit_encoding(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "name,email\nJürgen,j@example.de\n", "latin-1")
    source = open_source(path, encoding="latin-1")
    assert column(source, "name") == ["Jürgen"]


def test_csv_a_bom_beats_the_encoding_asked_for(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "p.csv", PEOPLE, "utf-8-sig"), encoding="cp1252")
    assert source.info.encoding == "utf-8-sig"
    assert column(source, "name")[0] == "José Müller"


def test_csv_unknown_encoding_name(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown encoding 'klingon'"):
        open_source(write(tmp_path / "p.csv", PEOPLE), encoding="klingon")


def test_csv_bytes_that_do_not_decode_past_the_sample(tmp_path: Path) -> None:
    head = "email,name\n" + "".join(f"user{i}@example.com,User {i}\n" for i in range(60_000))
    data = head.encode() + "late@example.com,Andrés\n".encode("cp1252")
    offset = len(head.encode()) + len("late@example.com,Andr")
    assert len(head) > 1 << 20
    path = tmp_path / "mixed.csv"
    path.write_bytes(data)
    with pytest.raises(SourceError) as caught:
        open_source(path)
    message = str(caught.value)
    assert str(path) in message
    assert "utf-8" in message
    assert f"byte offset {offset}" in message
    assert "--encoding" in message


def test_csv_bytes_that_do_not_decode_in_the_encoding_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(b"name,email\nbad \x81 byte,a@example.com\n")
    with pytest.raises(SourceError, match=r"not valid cp1252.*byte 0x81 at byte offset 15"):
        open_source(path, encoding="cp1252")


def test_transcoded_copy_is_removed_with_its_source(tmp_path: Path) -> None:
    import gc

    source = open_source(write(tmp_path / "p.csv", PEOPLE, "cp1252"))
    copy = source._text.path  # type: ignore[attr-defined]
    assert copy.exists()
    assert copy != tmp_path / "p.csv"
    del source
    gc.collect()
    assert not copy.exists()


# -- CSV: delimiters, quoting, header -----------------------------------------------------------


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
def test_csv_delimiters(tmp_path: Path, delimiter: str) -> None:
    lines = [
        ["name", "email", "note"],
        ["Ann", "ann@example.com", "a, b; c"],
        ["Bob", "b@x.org", ""],
    ]
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter, lineterminator="\n").writerows(lines)
    source = open_source(write(tmp_path / "d.csv", buffer.getvalue()))
    assert source.info.delimiter == delimiter
    assert rows_of(source) == [dict(zip(lines[0], row, strict=True)) for row in lines[1:]]


def test_tsv_extension(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "d.tsv", "email\tname\na@x.com\tAnn\n"))
    assert source.info.kind == "csv"
    assert source.info.delimiter == "\t"
    assert column(source, "name") == ["Ann"]


def test_csv_single_column(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "d.csv", "Email\na@x.com\nb@y.com\n"))
    assert source.info.delimiter == ","
    assert column(source, "Email") == ["a@x.com", "b@y.com"]


def test_csv_quoted_fields_with_newlines_delimiters_and_quotes(tmp_path: Path) -> None:
    text = (
        "name,email,address\n"
        '"Doe, Jane",jane@example.com,"12 Main St\nApt 4, Springfield"\n'
        '"Said ""hi""",said@example.com,"a\r\nb"\n'
        "Plain,plain@example.com,Somewhere\n"
    )
    source = open_source(write(tmp_path / "q.csv", text))
    assert rows_of(source) == [
        {
            "name": "Doe, Jane",
            "email": "jane@example.com",
            "address": "12 Main St\nApt 4, Springfield",
        },
        {"name": 'Said "hi"', "email": "said@example.com", "address": "a\r\nb"},
        {"name": "Plain", "email": "plain@example.com", "address": "Somewhere"},
    ]
    assert source.info.bad_records == []


def test_csv_crlf_line_ends_and_blank_lines(tmp_path: Path) -> None:
    text = "email,name\r\n\r\na@x.com,Ann\r\n   \r\nb@y.com,Bob\r\n\r\n"
    source = open_source(write(tmp_path / "w.csv", text))
    assert rows_of(source) == [
        {"email": "a@x.com", "name": "Ann"},
        {"email": "b@y.com", "name": "Bob"},
    ]
    assert source.info.bad_records == []


def test_csv_header_names_made_unique_and_non_empty(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "h.csv", "Email,Email, ,name,Email\n1,2,3,4,5\n"))
    assert source.schema.names == ["Email", "Email_2", "column_3", "name", "Email_3"]
    assert rows_of(source) == [
        {"Email": "1", "Email_2": "2", "column_3": "3", "name": "4", "Email_3": "5"}
    ]


def test_csv_blank_lines_before_the_header(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "h.csv", "\n\nemail,name\na@x.com,Ann\n"))
    assert source.schema.names == ["email", "name"]
    assert column(source, "name") == ["Ann"]


# -- CSV: broken records are kept ----------------------------------------------------------------


def test_csv_too_many_and_too_few_fields(tmp_path: Path) -> None:
    text = (
        "name,email,city\n"
        "Ann,ann@x.com,Paris\n"
        "Bob,bob@x.com,Lyon,extra,more\n"
        "Cid,cid@x.com\n"
        "Dee,dee@x.com,Nice\n"
    )
    source = open_source(write(tmp_path / "b.csv", text))
    assert rows_of(source) == [
        {"name": "Ann", "email": "ann@x.com", "city": "Paris"},
        {"name": "Bob", "email": "bob@x.com", "city": "Lyon,extra,more"},
        {"name": "Cid", "email": "cid@x.com", "city": None},
        {"name": "Dee", "email": "dee@x.com", "city": "Nice"},
    ]
    assert source.info.bad_records == [
        BadRecord(2, "expected 3 fields, found 5", "Bob,bob@x.com,Lyon,extra,more"),
        BadRecord(3, "expected 3 fields, found 2", "Cid,cid@x.com"),
    ]


def test_csv_extra_fields_are_joined_where_the_row_fits(tmp_path: Path) -> None:
    good = [
        f"{i},Person {i},Company {i},p{i}@example.com,+33 1 23 45 67 {i:02d}," for i in range(30)
    ]
    broken = "99,Andre,Proseware, Inc.,andre@proseware.test,,"
    last = "100,Mikael,Nordlicht,mikael@nordlicht.test,+49 89,Met at booth 14, wants a demo"
    text = "id,name,company,email,phone,notes\n" + "\n".join([*good, broken, last]) + "\n"
    source = open_source(write(tmp_path / "crm.csv", text))
    rows = rows_of(source)
    assert rows[30] == {
        "id": "99",
        "name": "Andre",
        "company": "Proseware, Inc.",
        "email": "andre@proseware.test",
        "phone": "",
        "notes": "",
    }
    assert rows[31]["email"] == "mikael@nordlicht.test"
    assert rows[31]["notes"] == "Met at booth 14, wants a demo"
    assert [b.row for b in source.info.bad_records] == [31, 32]


def test_csv_unterminated_quote_in_the_middle(tmp_path: Path) -> None:
    lines = [f"User {i},user{i}@example.com,City {i}" for i in range(1, 21)]
    lines[9] = 'User 10,"user10@example.com,City 10'  # the quote never closes
    lines[14] = 'User 15,user15@example.com,"City\nfifteen"'  # a legitimate multi-line value
    source = open_source(write(tmp_path / "u.csv", "name,email,city\n" + "\n".join(lines) + "\n"))
    rows = rows_of(source)
    assert len(rows) == 20
    assert [row["email"] for row in rows] == [f"user{i}@example.com" for i in range(1, 21)]
    assert rows[9] == {"name": "User 10", "email": "user10@example.com", "city": "City 10"}
    assert rows[14]["city"] == "City\nfifteen"
    assert source.info.bad_records == [
        BadRecord(10, "unterminated quote", 'User 10,"user10@example.com,City 10')
    ]


def test_csv_unterminated_quote_closed_by_a_later_quote(tmp_path: Path) -> None:
    text = (
        "name,email,city\n"
        "Ann,ann@x.com,Paris\n"
        'Bob,"bob@x.com,Lyon\n'
        "Cid,cid@x.com,Nice\n"
        'Dee,"dee@x.com",Rome\n'
        "Eve,eve@x.com,Oslo\n"
    )
    source = open_source(write(tmp_path / "u.csv", text))
    assert column(source, "email") == [
        "ann@x.com",
        "bob@x.com",
        "cid@x.com",
        "dee@x.com",
        "eve@x.com",
    ]
    assert [(b.row, b.problem) for b in source.info.bad_records] == [(2, "unterminated quote")]


def test_csv_unterminated_quote_on_the_last_line(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "u.csv", 'email,name\na@x.com,Ann\n"b@x.com,Bob'))
    assert rows_of(source) == [
        {"email": "a@x.com", "name": "Ann"},
        {"email": "b@x.com", "name": "Bob"},
    ]
    assert source.info.bad_records == [BadRecord(2, "unterminated quote", '"b@x.com,Bob')]


def test_csv_single_column_unterminated_quote(tmp_path: Path) -> None:
    text = 'email\na@x.com\n"b@x.com\nc@x.com\nd@x.com\n'
    source = open_source(write(tmp_path / "u.csv", text))
    assert column(source, "email") == ["a@x.com", "b@x.com", "c@x.com", "d@x.com"]
    assert [b.row for b in source.info.bad_records] == [2]


def test_csv_unterminated_quote_swallowing_past_a_chunk(tmp_path: Path) -> None:
    """The broken quote would swallow several chunks' worth of lines; each stays a row."""
    count = 12_000
    lines = [f"{i},user{i}@example.com,Some company name {i},Some city" for i in range(count)]
    lines[100] = '100,"user100@example.com,Some company name 100,Some city'
    lines[9_000] = '9000,user9000@example.com,"Some company name 9000,Some city'
    path = write(tmp_path / "big.csv", "id,email,company,city\n" + "\n".join(lines) + "\n")
    assert path.stat().st_size > 600_000
    source = open_source(path)
    rows = rows_of(source, rows=1000)
    assert len(rows) == count
    assert [r["email"] for r in rows] == [f"user{i}@example.com" for i in range(count)]
    assert [(b.row, b.problem) for b in source.info.bad_records] == [
        (101, "unterminated quote"),
        (9001, "unterminated quote"),
    ]


def test_csv_every_line_with_an_unterminated_quote(tmp_path: Path) -> None:
    """Pairs of broken lines read as one good record by a lenient parser are taken apart."""
    lines = [f'Name {i},"user{i}@example.com,City {i}' for i in range(50)]
    source = open_source(write(tmp_path / "u.csv", "name,email,city\n" + "\n".join(lines)))
    rows = rows_of(source)
    assert [r["email"] for r in rows] == [f"user{i}@example.com" for i in range(50)]
    assert [b.row for b in source.info.bad_records] == list(range(1, 51))
    assert {b.problem for b in source.info.bad_records} == {"unterminated quote"}


def test_csv_old_mac_line_ends(tmp_path: Path) -> None:
    lines = [f"u{i}@x.com,N{i}" for i in range(20)]
    lines[5] = 'u5@x.com,"N5'
    text = "email,name\r" + "\r".join(lines) + "\r"
    source = open_source(write(tmp_path / "cr.csv", text))
    rows = rows_of(source)
    assert [r["email"] for r in rows] == [f"u{i}@x.com" for i in range(20)]
    assert [(b.row, b.problem) for b in source.info.bad_records] == [(6, "unterminated quote")]


def test_csv_multiline_values_across_chunk_boundaries(tmp_path: Path) -> None:
    count = 12_000
    lines = [f'{i},user{i}@example.com,"Line one {i}\nLine two, with comma"' for i in range(count)]
    path = write(tmp_path / "multi.csv", "id,email,address\n" + "\n".join(lines) + "\n")
    assert path.stat().st_size > 2 * 256 * 1024
    source = open_source(path)
    rows = rows_of(source, rows=500)
    assert len(rows) == count
    assert rows[-1]["address"] == f"Line one {count - 1}\nLine two, with comma"
    assert all(r["address"].startswith(f"Line one {r['id']}\n") for r in rows)
    assert source.info.bad_records == []


def test_csv_bad_record_text_is_cut_to_200_characters(tmp_path: Path) -> None:
    long = "x" * 500
    source = open_source(write(tmp_path / "l.csv", f"a,b\n1,2\n{long},3,4\n"))
    rows_of(source)
    (bad,) = source.info.bad_records
    assert bad.text == f"{long},3,4"[:200]


# -- CSV: empty, header only, missing, chunking, sample ------------------------------------------


@pytest.mark.parametrize("content", ["", "   \n\n \t \r\n"])
def test_csv_empty(tmp_path: Path, content: str) -> None:
    path = write(tmp_path / "empty.csv", content)
    with pytest.raises(SourceError, match=f"^{re.escape(str(path))} is empty$"):
        open_source(path)


def test_csv_header_only(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "h.csv", "email,name\n"))
    assert source.schema.names == ["email", "name"]
    batches = list(source.batches())
    assert sum(b.num_rows for b in batches) == 0
    assert all(b.schema == source.schema for b in batches)
    assert source.sample().num_rows == 0


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(SourceError, match=f"^{re.escape(str(path))}: no such file$"):
        open_source(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "locked.csv", "email\na@x.com\n")
    path.chmod(0)
    with pytest.raises(SourceError, match="cannot be read: Permission denied"):
        open_source(path)


def test_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is a directory"):
        open_source(tmp_path)


def test_unsupported_extension(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"unsupported file type '\.doc'"):
        open_source(write(tmp_path / "x.doc", "hello"))


def test_kind_overrides_the_extension(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "list.dat", "email,name\na@x.com,Ann\n"), kind="csv")
    assert column(source, "name") == ["Ann"]


def test_batches_are_chunked_with_one_schema(tmp_path: Path) -> None:
    text = "id,email\n" + "".join(f"{i},u{i}@example.com\n" for i in range(1050))
    source = open_source(write(tmp_path / "n.csv", text))
    batches = list(source.batches(rows=100))
    assert len(batches) >= 10
    assert sum(b.num_rows for b in batches) == 1050
    assert {b.schema for b in batches} == {source.schema}
    assert [r["id"] for b in batches for r in b.to_pylist()] == [str(i) for i in range(1050)]


def test_sample_does_not_disturb_batches(tmp_path: Path) -> None:
    text = "id,email\n" + "".join(f"{i},u{i}@example.com\n" for i in range(2500)) + "x,y,z\n"
    source = open_source(write(tmp_path / "n.csv", text))
    sample = source.sample(1000)
    assert sample.num_rows == 1000
    assert sample.column("id").to_pylist() == [str(i) for i in range(1000)]
    assert source.info.bad_records == []
    assert len(rows_of(source)) == 2501
    assert [b.row for b in source.info.bad_records] == [2501]
    assert source.sample(5).num_rows == 5


# -- TXT ----------------------------------------------------------------------------------------


def test_txt_one_address_per_line(tmp_path: Path) -> None:
    text = "a@x.com\n\n   \nb@y.com\r\n\u00a0\t\nc@z.com"
    source = open_source(write(tmp_path / "list.txt", text))
    assert source.info.kind == "txt"
    assert source.schema == pa.schema([("email", pa.string())])
    assert column(source, "email") == ["a@x.com", "b@y.com", "c@z.com"]


def test_txt_with_bom_and_surrounding_spaces_kept(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "list.txt", "a@x.com\n  b@y.com  \n", "utf-8-sig"))
    assert source.info.encoding == "utf-8-sig"
    assert column(source, "email") == ["a@x.com", "  b@y.com  "]


def test_txt_utf16(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "list.txt", "a@x.com\nbé@y.com\n", "utf-16"))
    assert column(source, "email") == ["a@x.com", "bé@y.com"]


def test_txt_empty(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is empty"):
        open_source(write(tmp_path / "list.txt", "\n  \n"))


def test_txt_in_batches(tmp_path: Path) -> None:
    text = "".join(f"u{i}@example.com\n\n" for i in range(1050))
    source = open_source(write(tmp_path / "list.txt", text))
    batches = list(source.batches(rows=100))
    assert len(batches) == 11
    assert sum(b.num_rows for b in batches) == 1050


# -- XLSX and XLS -------------------------------------------------------------------------------


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


# -- Parquet, JSONL, DataFrame, Arrow -----------------------------------------------------------


def test_parquet_keeps_types_and_promotes_nulls(tmp_path: Path) -> None:
    table = pa.table(
        {
            "email": ["a@x.com", None, "c@z.com"],
            "age": pa.array([30, None, 41], pa.int32()),
            "nothing": pa.nulls(3),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=2)
    source = open_source(path)
    assert source.info.kind == "parquet"
    assert source.schema == pa.schema(
        [("email", pa.string()), ("age", pa.int32()), ("nothing", pa.string())]
    )
    assert rows_of(source, rows=2) == [
        {"email": "a@x.com", "age": 30, "nothing": None},
        {"email": None, "age": None, "nothing": None},
        {"email": "c@z.com", "age": 41, "nothing": None},
    ]
    assert source.sample(2).num_rows == 2


def test_parquet_from_pandas_has_no_index_column(tmp_path: Path) -> None:
    path = tmp_path / "p.pq"
    pd.DataFrame({"email": ["a@x.com", "b@y.com"]}, index=["r1", "r2"]).to_parquet(path)
    source = open_source(path)
    assert source.schema.names == ["email"]


def test_parquet_chunks(tmp_path: Path) -> None:
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"email": [f"u{i}@x.com" for i in range(1050)]}), path)
    batches = list(open_source(path).batches(rows=100))
    assert len(batches) == 11
    assert sum(b.num_rows for b in batches) == 1050


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.parquet", "email\na@x.com\n")
    with pytest.raises(SourceError, match="is not a valid Parquet file"):
        open_source(path)


def test_jsonl_with_broken_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"email": "a@x.com", "age": 30}),
        "",
        "{not json",
        json.dumps({"email": "b@y.com", "age": 41, "later": "ignored"}),
        json.dumps([1, 2]),
        json.dumps({"email": "d@z.com"}),
    ]
    source = open_source(write(tmp_path / "p.jsonl", "\n".join(lines) + "\n"))
    assert source.info.kind == "jsonl"
    assert source.schema == pa.schema(
        [("email", pa.string()), ("age", pa.int64()), ("later", pa.string())]
    )
    assert rows_of(source) == [
        {"email": "a@x.com", "age": 30, "later": None},
        {"email": None, "age": None, "later": None},
        {"email": "b@y.com", "age": 41, "later": "ignored"},
        {"email": None, "age": None, "later": None},
        {"email": "d@z.com", "age": None, "later": None},
    ]
    assert source.info.bad_records == [
        BadRecord(2, "invalid JSON", "{not json"),
        BadRecord(4, "not a JSON object", "[1, 2]"),
    ]


def test_jsonl_value_that_does_not_fit_its_column(tmp_path: Path) -> None:
    lines = [json.dumps({"email": f"u{i}@x.com", "age": i}) for i in range(1100)]
    lines.append(json.dumps({"email": "late@x.com", "age": "forty"}))
    source = open_source(write(tmp_path / "p.jsonl", "\n".join(lines)))
    assert source.schema.field("age").type == pa.int64()
    rows = rows_of(source)
    assert rows[-1] == {"email": "late@x.com", "age": None}
    assert source.info.bad_records == [BadRecord(1101, "field 'age' is not int64", lines[-1])]


def test_jsonl_keys_first_seen_late_are_not_columns(tmp_path: Path) -> None:
    lines = [json.dumps({"email": f"u{i}@x.com"}) for i in range(1200)]
    lines.append(json.dumps({"email": "late@x.com", "late": 1}))
    source = open_source(write(tmp_path / "p.ndjson", "\n".join(lines)))
    assert source.schema.names == ["email"]
    assert len(rows_of(source, rows=500)) == 1201


def test_json_lines_named_json(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "p.json", '{"email": "a@x.com"}\n{"email": "b@y.com"}\n'))
    assert column(source, "email") == ["a@x.com", "b@y.com"]


@pytest.mark.parametrize("text", ['[{"email": "a@x.com"}]', '{\n  "email": "a@x.com"\n}\n'])
def test_json_document_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(SourceError, match="is not JSON lines"):
        open_source(write(tmp_path / "p.json", text))


def test_jsonl_empty(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is empty"):
        open_source(write(tmp_path / "p.jsonl", "\n\n"))


def test_dataframe(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"Email": ["a@x.com", None, "c@z.com"], "n": [1, 2, 3], "mixed": [1, "two", None]},
        index=[10, 20, 30],
    )
    source = open_source(frame)
    assert source.info.kind == "dataframe"
    assert source.info.name == "<DataFrame>"
    assert source.schema.names == ["Email", "n", "mixed"]
    assert source.schema.field("n").type == pa.int64()
    assert rows_of(source, rows=2) == [
        {"Email": "a@x.com", "n": 1, "mixed": "1"},
        {"Email": None, "n": 2, "mixed": "two"},
        {"Email": "c@z.com", "n": 3, "mixed": None},
    ]
    assert source.sample(1).num_rows == 1


def test_dataframe_with_duplicate_and_non_string_names() -> None:
    frame = pd.DataFrame([["a@x.com", "b@y.com", 1]], columns=["email", "email", 0])
    source = open_source(frame)
    assert source.schema.names == ["email", "email_2", "0"]


def test_dataframe_without_columns_or_rows() -> None:
    with pytest.raises(SourceError, match="<DataFrame> is empty"):
        open_source(pd.DataFrame())
    source = open_source(pd.DataFrame({"email": pd.Series([], dtype=object)}))
    assert source.schema == pa.schema([("email", pa.string())])
    assert rows_of(source) == []


def test_arrow_table() -> None:
    table = pa.table({"email": ["a@x.com"] * 250, "empty": pa.nulls(250)})
    source = open_source(table)
    assert source.info.kind == "dataframe"
    assert source.schema == pa.schema([("email", pa.string()), ("empty", pa.string())])
    batches = list(source.batches(rows=100))
    assert [b.num_rows for b in batches] == [100, 100, 50]


def test_other_objects_are_refused() -> None:
    with pytest.raises(SourceError, match="cannot read a dict"):
        open_source({"email": ["a@x.com"]})  # type: ignore[arg-type]


# -- SQL ----------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    import sqlite3

    path = tmp_path / "people.db"
    with sqlite3.connect(path) as connection:
        connection.execute("create table people (id integer, email text, note)")  # note: no type
        connection.execute('create table "My People" (email text)')
        connection.executemany(
            "insert into people values (?, ?, ?)",
            [(i, f"u{i}@example.com", None if i % 2 else "n") for i in range(1250)],
        )
        connection.execute("insert into people values (1250, 'odd@example.com', 42)")
        connection.execute("insert into people values ('x', 'text-id@example.com', null)")
        connection.execute("insert into \"My People\" values ('quoted@example.com')")
    connection.close()
    return path


def test_sqlite_table(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    source = open_source(url, table="people")
    assert source.info.kind == "sql"
    assert source.info.name == url
    assert source.schema == pa.schema(
        [("id", pa.int64()), ("email", pa.string()), ("note", pa.string())]
    )
    rows = rows_of(source, rows=100)
    assert len(rows) == 1252
    assert rows[1250] == {"id": 1250, "email": "odd@example.com", "note": "42"}
    assert rows[1251] == {"id": None, "email": "text-id@example.com", "note": None}
    assert [(b.row, b.problem) for b in source.info.bad_records] == [
        (1252, "column 'id' is not int64")
    ]


def test_sqlite_query_and_quoted_table(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    source = open_source(url, query="select email from people where id < 3 order by id")
    assert column(source, "email") == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert column(open_source(url, table="My People"), "email") == ["quoted@example.com"]
    assert column(open_source(url, table="main.people"), "id")[:2] == [0, 1]


def test_sql_errors_name_the_url(sqlite_db: Path) -> None:
    url = f"sqlite:///{sqlite_db}"
    with pytest.raises(SourceError, match=f"^{re.escape(str(url))}: no such table: nope$"):
        open_source(url, table="nope")
    with pytest.raises(SourceError, match=f"^{re.escape(str(url))}: .*syntax error"):
        open_source(url, query="selec oops")
    with pytest.raises(SourceError, match="exactly one of a table"):
        open_source(url)
    with pytest.raises(SourceError, match="exactly one of a table"):
        open_source(url, table="people", query="select 1")
    with pytest.raises(SourceError, match="no such database file"):
        open_source(f"sqlite:///{sqlite_db.parent / 'missing.db'}", table="people")
    assert not (sqlite_db.parent / "missing.db").exists()


def test_unknown_url_scheme() -> None:
    with pytest.raises(SourceError, match="not a database SQLAlchemy can read"):
        open_source("nosuchdb://host/db", table="t")


def test_duckdb_file(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("duckdb_engine")
    path = tmp_path / "people.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute(
        "create table people as select i as id, 'u' || i || '@example.com' as email, "
        "date '2024-01-01' + i::integer as joined from range(1500) t(i)"
    )
    connection.close()
    source = open_source(f"duckdb:///{path}", table="people")
    assert source.schema.field("email").type == pa.string()
    assert source.schema.field("joined").type == pa.date32()
    batches = list(source.batches(rows=500))
    assert [b.num_rows for b in batches] == [500, 500, 500]
    query = open_source(f"duckdb:///{path}", query="select email from main.people where id = 7")
    assert column(query, "email") == ["u7@example.com"]


def _postgres() -> Any:
    """An autocommit connection to the test database (the test is skipped without one)."""
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(POSTGRES_URL, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {POSTGRES_URL}: {exc}")


@pytest.fixture
def postgres_table() -> Iterator[str]:
    connection = _postgres()
    name = f"LH_people_{uuid.uuid4().hex[:10]}"  # mixed case: must be quoted
    connection.execute(f'create table "{name}" (id int, "Email" text, joined date, spent numeric)')
    with connection.cursor() as cursor:
        cursor.executemany(
            f'insert into "{name}" values (%s, %s, %s, %s)',
            [(i, f"u{i}@example.com", dt.date(2024, 1, 1), 1.5) for i in range(2500)],
        )
    try:
        yield name
    finally:
        connection.execute(f'drop table if exists "{name}"')
        connection.close()


def test_postgres_table_is_streamed(postgres_table: str) -> None:
    source = open_source(POSTGRES_URL, table=postgres_table)
    assert source.info.name == POSTGRES_URL
    assert source.schema.names == ["id", "Email", "joined", "spent"]
    assert source.schema.field("joined").type == pa.date32()
    batches = list(source.batches(rows=1000))
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert batches[0].column("Email")[0].as_py() == "u0@example.com"
    assert column(open_source(POSTGRES_URL, table=f"public.{postgres_table}"), "id")[:1] == [0]


def test_postgres_query(postgres_table: str) -> None:
    query = (
        f'select "Email" as email from "{postgres_table}" where id between 10 and 12 order by id'
    )
    source = open_source(POSTGRES_URL, query=query)
    assert column(source, "email") == ["u10@example.com", "u11@example.com", "u12@example.com"]


def test_postgres_errors(postgres_table: str) -> None:
    with pytest.raises(SourceError, match=r'relation "no_such_table_here" does not exist'):
        open_source(POSTGRES_URL, table="no_such_table_here")
    with pytest.raises(SourceError, match=f"^{re.escape(str(POSTGRES_URL))}: .*syntax error"):
        open_source(POSTGRES_URL, query="selec 1")


@pytest.fixture
def postgres_typed_table() -> Iterator[str]:
    """Columns of every type that reaches Arrow over COPY unchanged or widened."""
    connection = _postgres()
    name = f"lh_typed_{uuid.uuid4().hex[:10]}"
    connection.execute(
        f"create table {name} (id int, big bigint, email text, ok boolean, weight float8, "
        "born date, seen timestamptz, local_seen timestamp, note varchar(20))"
    )
    at = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"insert into {name} values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    i,
                    None if i % 7 == 0 else 2**40 + i,
                    f"u{i}@example.com" if i % 11 else None,
                    i % 2 == 0,
                    i / 3,
                    dt.date(2024, 1, 1) + dt.timedelta(days=i % 400),
                    at + dt.timedelta(seconds=i),
                    at.replace(tzinfo=None),
                    f"100% ü {i}",
                )
                for i in range(2500)
            ],
        )
    try:
        yield name
    finally:
        connection.execute(f"drop table if exists {name}")
        connection.close()


def _read_all(source: Source) -> pa.Table:
    return pa.Table.from_batches(list(source.batches(rows=1000)))


def test_postgres_rows_come_over_copy_as_the_cursor_gives_them(
    postgres_typed_table: str, postgres_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADBC's binary COPY gives the same schema and values as the cursor's rows; a column it
    would give otherwise (numeric) sends the whole read through the cursor."""
    from listhygiene.pipeline.sources.sql import SqlSource

    # a % written in a query is one % (compiled for psycopg, it would be two)
    like = f"select id, note from {postgres_typed_table} where note in ('100% ü 12', 'x') or id < 3"
    sources = [
        lambda: open_source(POSTGRES_URL, table=postgres_typed_table),
        lambda: open_source(POSTGRES_URL, query=like),
    ]
    over_copy = []
    for make in sources:
        source = make()
        stream = source._arrow_stream()  # type: ignore[attr-defined]
        assert stream is not None
        assert list(stream)
        over_copy.append(_read_all(source))
    assert over_copy[1].column("id").to_pylist() == [0, 1, 2, 12]
    assert open_source(POSTGRES_URL, table=postgres_table)._arrow_stream() is None  # type: ignore[attr-defined]

    monkeypatch.setattr(SqlSource, "_arrow_stream", lambda self: None)
    for make, table in zip(sources, over_copy, strict=True):
        through_cursor = _read_all(make())
        assert table.schema == through_cursor.schema
        assert table.equals(through_cursor)


def test_postgres_error_while_copying_is_a_source_error(postgres_typed_table: str) -> None:
    query = f"select id, 1 / (2000 - id) as x from {postgres_typed_table}"
    source = open_source(POSTGRES_URL, query=query)  # the sample's rows divide
    with pytest.raises(SourceError, match=f"^{re.escape(str(POSTGRES_URL))}: .*division by zero"):
        _read_all(source)


def test_postgres_unreachable_fails_quickly_and_masks_the_password() -> None:
    url = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test?connect_timeout=3"
    with pytest.raises(SourceError) as caught:
        open_source(url, query="select 1")
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert message.startswith("postgresql://postgres:***@127.0.0.1:1/test")
    assert "connection" in message.lower()


@pytest.mark.parametrize("block", [1, 2, 3, 5, 8, 64])
def test_utf8_check_by_blocks_says_where_the_text_stops_decoding(
    tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow validates each block and Python's decoder only says where: characters a block's
    end cuts in two are whole, and the offset is the first byte that does not decode."""
    from listhygiene.pipeline.sources import text as _encoding

    monkeypatch.setattr(_encoding, "_BLOCK", block)
    good = "name,email\nJosé,\u00e9\u4e2d\U0001f600@x.test\n".encode()
    for data in (
        good,
        good + b"bad \xff here\n",
        good[:-3] + b"\xe4\xb8",  # cut short at the end
        good + b"\xed\xa0\x80",  # a surrogate
        good + b"\xc0\x80",  # overlong
        b"\x80" + good,
    ):
        path = tmp_path / "t.csv"
        path.write_bytes(b"\xef\xbb\xbf" + data)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            with pytest.raises(SourceError, match=f"at byte offset {3 + exc.start} "):
                _encoding._check_utf8(path, 3, "utf-8", detected=True)
        else:
            _encoding._check_utf8(path, 3, "utf-8", detected=True)


def test_csv_chunks_are_parsed_ahead_in_a_thread_and_it_stops_with_the_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next chunk is parsed while the caller works on this one (docs/pipeline.md,
    "Speed"); a caller that stops early leaves no thread behind, and errors arrive in place."""
    import threading

    from listhygiene.pipeline.sources import delimited as _delimited

    monkeypatch.setattr(_delimited, "_MIN_CHUNK", 64)
    monkeypatch.setattr(_delimited, "_MAX_CHUNK", 64)
    parsed_in: set[str] = set()
    real = _delimited.CsvSource._parse_chunk

    def parse_chunk(self: _delimited.CsvSource, chunk: bytes, at_end: bool) -> object:
        parsed_in.add(threading.current_thread().name)
        return real(self, chunk, at_end)

    monkeypatch.setattr(_delimited.CsvSource, "_parse_chunk", parse_chunk)
    path = tmp_path / "p.csv"
    path.write_text("email,n\n" + "".join(f"user{i}@x.test,{i}\n" for i in range(500)))
    source = open_source(path)
    assert [row["n"] for row in rows_of(source, rows=7)] == [str(i) for i in range(500)]
    assert parsed_in == {"listhygiene-read-ahead"}

    batches = source.batches(rows=5)
    assert next(batches).num_rows == 5
    batches.close()
    assert not [t for t in threading.enumerate() if t.name == "listhygiene-read-ahead"]

    def broken(self: _delimited.CsvSource, chunk: bytes, at_end: bool) -> object:
        raise SourceError("broken on purpose")

    monkeypatch.setattr(_delimited.CsvSource, "_parse_chunk", broken)
    with pytest.raises(SourceError, match="broken on purpose"):
        list(source.batches())
    assert not [t for t in threading.enumerate() if t.name == "listhygiene-read-ahead"]

    # an error raised where a batch was handed over (the caller's, or rebatch's) stops the
    # thread at once, not when the traceback holding the frames is let go
    monkeypatch.setattr(_delimited.CsvSource, "_parse_chunk", parse_chunk)
    batches = source.batches(rows=5)
    next(batches)
    with pytest.raises(RuntimeError, match="the caller's") as raised:
        batches.throw(RuntimeError("the caller's"))
    assert raised.traceback  # still held here
    assert not [t for t in threading.enumerate() if t.name == "listhygiene-read-ahead"]

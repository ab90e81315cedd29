"""CSV and TXT files (``sources/delimited.py``): every record a row, broken ones kept and
reported."""

import csv
import io
import re
from pathlib import Path

import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import BadRecord, SourceError, open_source
from tests.pipeline.sources.helpers import column, rows_of, write

# -- CSV: delimiters, quoting, header --------------------------------------------------------------


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


# -- CSV: broken records are kept ------------------------------------------------------------------


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


# -- CSV: empty, header only, chunking, sample -----------------------------------------------------


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


# -- TXT -------------------------------------------------------------------------------------------


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


# -- wide files ------------------------------------------------------------------------------------


def test_a_file_too_wide_for_pyarrow_is_read_as_pyarrow_reads_a_narrow_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyarrow's parser reserves columns x chunk bytes; past delimited._ARROW_SPAN the chunk is
    # parsed by Python's csv module instead, with the same rows and the same bad records.
    from listhygiene.pipeline.sources import delimited

    header = ["email", *(f"c{i}" for i in range(39))]
    rows = [
        ["ann@x.com", *(str(i) for i in range(39))],
        ['"Bob, B." <bob@y.org>', *("" for _ in range(39))],
        ["carl@z.net", "short"],  # too few fields
        ["dan@w.io", *(str(i) for i in range(39)), "extra"],  # too many
    ]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([header, *rows])
    path = write(tmp_path / "wide.csv", buffer.getvalue())
    narrow = open_source(path)
    expected, expected_bad = rows_of(narrow), list(narrow.info.bad_records)
    assert len(expected) == 4
    assert len(expected_bad) == 2

    def no_arrow(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("pyarrow's CSV parser was used")

    monkeypatch.setattr(delimited, "_ARROW_SPAN", 40 * 64)  # 40 columns: only chunks < 64 bytes
    monkeypatch.setattr(delimited.pacsv, "read_csv", no_arrow)
    wide = open_source(path)
    assert rows_of(wide) == expected
    assert wide.info.bad_records == expected_bad

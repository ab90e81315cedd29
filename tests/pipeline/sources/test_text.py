"""Text inputs in any encoding (``sources/text.py``): detected, asked for, or refused where
the bytes stop decoding."""

from pathlib import Path

import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import SourceError, open_source
from tests.pipeline.sources.helpers import column, rows_of, write

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

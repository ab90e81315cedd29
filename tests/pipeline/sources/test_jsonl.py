"""JSON lines (``sources/jsonl.py``): one object a line, a broken line kept as a row."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import BadRecord, SourceError, open_source
from tests.pipeline.sources.helpers import column, rows_of, write


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

"""Hostile input files (issue 14, item 5): each is one clear line naming the input, exit code 3,
and nothing half-written in the output folder; never a traceback, a crash or a hang.

The limits are those of docs/pipeline.md ("Reading": what one line and one value may cost).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from listhygiene.pipeline.sources import MAX_DEPTH, MAX_LINE_BYTES, SourceError, open_source

#: The engine never gets to run: every input here fails while it is read.
ENGINE = ["--no-smtp", "--dns-server", "127.0.0.1:9"]


def clean_cli(source: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``listhygiene clean`` as a user runs it, killed by ``timeout`` should it hang."""
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", str(source), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_refused(run: subprocess.CompletedProcess[str], source: Path, *words: str) -> None:
    """Exit 3, one ``Error:`` line on stderr naming the input and its problem."""
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, run.stderr
    assert source.name in errors[0]
    for word in words:
        assert word in errors[0], errors[0]


def assert_nothing_written(out: Path) -> None:
    """No output file, no work folder: the folder is absent or empty."""
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- only regular files are read ---------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("suffix", [".csv", ".txt", ".jsonl", ".parquet", ".xlsx", ".xls"])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, suffix: str) -> None:
    fifo = tmp_path / f"list{suffix}"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="not a regular file") as raised:
        open_source(fifo)
    assert str(fifo) in str(raised.value)
    assert "FIFO" in str(raised.value)


@pytest.mark.timeout(30)
def test_a_fifo_on_the_command_line_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "list.csv"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    assert_refused(clean_cli(fifo, out, *ENGINE), fifo, "not a regular file")
    assert_nothing_written(out)


@pytest.mark.timeout(30)
def test_a_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "contacts.csv"
    link.symlink_to("/dev/zero")
    out = tmp_path / "out"
    assert_refused(clean_cli(link, out, *ENGINE), link, "not a regular file", "character device")
    assert_nothing_written(out)


@pytest.mark.timeout(30)
def test_a_directory_named_like_a_workbook_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "crm.xlsx"
    folder.mkdir()
    with pytest.raises(SourceError, match="directory"):
        open_source(folder)


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    target = tmp_path / "real.csv"
    target.write_text("email\na@example.com\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    assert open_source(link).sample().column("email").to_pylist() == ["a@example.com"]


# -- JSON lines: nesting --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_deeply_nested_json_in_the_first_lines_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "people.jsonl"
    path.write_text(
        '{"email": "a@example.com", "tags": 1}\n'
        f'{{"email": "b@example.com", "tags": {deep(100_000)}}}\n'
    )
    out = tmp_path / "out"
    assert_refused(clean_cli(path, out, *ENGINE), path, "line 2", f"{MAX_DEPTH} levels")
    assert_nothing_written(out)


@pytest.mark.timeout(60)
def test_deeply_nested_json_past_the_sample_is_refused_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    """The line pyarrow's reader would crash on comes long after the lines the schema is read
    from, so the run has started when it is met: its work folder goes too."""
    path = tmp_path / "people.jsonl"
    good = "".join(json.dumps({"email": f"p{i}@example.com", "n": i}) + "\n" for i in range(3000))
    path.write_text(good + f'{{"email": "x@example.com", "n": {deep(50_000)}}}\n' + good)
    out = tmp_path / "out"
    assert_refused(clean_cli(path, out, *ENGINE), path, "line 3001", f"{MAX_DEPTH} levels")
    assert_nothing_written(out)


def test_nesting_up_to_the_limit_is_read_as_json_text(tmp_path: Path) -> None:
    path = tmp_path / "people.jsonl"
    value = json.loads(deep(MAX_DEPTH - 1))  # inside the object: MAX_DEPTH levels in all
    path.write_text(json.dumps({"email": "a@example.com", "tags": value}) + "\n")
    rows = open_source(path).sample().to_pylist()
    assert rows == [{"email": "a@example.com", "tags": json.dumps(value)}]


def test_brackets_inside_strings_are_not_nesting(tmp_path: Path) -> None:
    path = tmp_path / "people.jsonl"
    note = "[" * (MAX_DEPTH * 4) + '\\"{'
    path.write_text(f'{{"email": "a@example.com", "note": "{note}"}}\n')
    rows = list(open_source(path).batches())
    assert rows[0].column("note").to_pylist() == [json.loads(f'"{note}"')]


# -- lines ------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".txt", ".jsonl"])
def test_a_line_longer_than_the_limit_is_refused(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"list{suffix}"
    head = {".csv": "id,email\n1,a@example.com\n", ".txt": "a@example.com\n"}.get(
        suffix, '{"email": "a@example.com"}\n'
    )
    path.write_text(head + "2," + "x" * (MAX_LINE_BYTES + 10) + "@example.com\n")
    with pytest.raises(SourceError, match="longer than") as raised:
        list(open_source(path).batches())
    assert str(path) in str(raised.value)


@pytest.mark.timeout(60)
def test_a_huge_single_line_file_is_refused_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "one-line.csv"
    with path.open("wb") as file:
        file.write(b"email," + b"a" * (64 << 20))
    out = tmp_path / "out"
    assert_refused(clean_cli(path, out, *ENGINE), path, "longer than")
    assert_nothing_written(out)


def test_a_long_line_under_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "list.csv"
    notes = "n" * (MAX_LINE_BYTES // 2)
    path.write_text(f"email,notes\na@example.com,{notes}\n")
    rows = [row for batch in open_source(path).batches() for row in batch.to_pylist()]
    assert rows == [{"email": "a@example.com", "notes": notes}]


# -- Parquet and tables: nested columns ------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (pa.array([["a@example.com"], ["b@example.com"]]), "list"),
        (pa.array([{"work": "a@example.com"}, {"work": "b@example.com"}]), "struct"),
        (
            pa.array([[("work", "a@example.com")], []], pa.map_(pa.string(), pa.string())),
            "map",
        ),
    ],
)
def test_a_nested_email_column_is_refused(tmp_path: Path, values: pa.Array, kind: str) -> None:
    path = tmp_path / "people.parquet"
    pq.write_table(pa.table({"email": values, "name": ["Ann", "Bob"]}), path)
    out = tmp_path / "out"
    assert_refused(clean_cli(path, out, *ENGINE), path, "'email'", kind)
    assert_nothing_written(out)
    named = clean_cli(path, out, "--email-column", "email", *ENGINE)
    assert_refused(named, path, "'email'", kind)


@pytest.mark.timeout(60)
def test_a_parquet_without_any_text_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nested.parquet"
    table = pa.table(
        {"tags": pa.array([["a@example.com"]]), "person": pa.array([{"mail": "a@example.com"}])}
    )
    pq.write_table(table, path)
    out = tmp_path / "out"
    assert_refused(clean_cli(path, out, *ENGINE), path, "no column of text", "tags list")
    assert_nothing_written(out)


def test_nested_columns_beside_the_email_column_are_kept(tmp_path: Path) -> None:
    import listhygiene

    path = tmp_path / "people.parquet"
    tags = pa.array([["x", "y"]])
    pq.write_table(pa.table({"email": ["not an address"], "tags": tags}), path)
    result = listhygiene.clean(path, tmp_path / "out", check_smtp=False, dns_server="127.0.0.1:9")
    assert result.counts["invalid"] == 1
    assert result["invalid"]["tags"].map(list).tolist() == [["x", "y"]]


def test_a_dataframe_with_a_nested_email_column_is_a_source_error() -> None:
    import pandas as pd

    import listhygiene

    frame = pd.DataFrame({"email": [{"work": "a@example.com"}]})
    with pytest.raises(SourceError, match="'email'"):
        listhygiene.clean(frame, check_smtp=False, dns_server="127.0.0.1:9")

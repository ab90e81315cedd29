"""What a wide table costs per column (issue 28 item 4): the status files no row has are
written once and copied, and the checks open each output file once. Real files, the real
pipeline over the sandbox's DNS."""

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.quality import reading
from listhygiene.pipeline.run import STATUSES
from listhygiene.sandbox import Sandbox
from tests.conftest import sandbox_settings

COLUMNS = 300


@pytest.fixture
def wide_csv(tmp_path: Path) -> Path:
    """Addresses that fail at syntax, so every row is ``invalid``, and many other columns."""
    path = tmp_path / "wide.csv"
    header = "email," + ",".join(f"c{i}" for i in range(COLUMNS))
    rows = [
        f"not-an-address-{n}," + ",".join(str(n * i % 97) for i in range(COLUMNS))
        for n in range(20)
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_status_files_without_rows_are_written_once_and_copied(
    sandbox: Sandbox, wide_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    copied: list[tuple[str, str]] = []
    writer, copy = OutputFolder.writer, OutputFolder.copy

    def counting_writer(self: OutputFolder, name: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(name)
        return writer(self, name, *args, **kwargs)

    def counting_copy(self: OutputFolder, name: str, to: str) -> None:
        copied.append((name, to))
        copy(self, name, to)

    monkeypatch.setattr(OutputFolder, "writer", counting_writer)
    monkeypatch.setattr(OutputFolder, "copy", counting_copy)
    out = tmp_path / "out"
    result = listhygiene.clean(
        wide_csv, out, settings=sandbox_settings(sandbox), check_smtp=False, verdicts="none"
    )
    assert result.summary["rows"]["by_status"]["invalid"] == 20
    # invalid.parquet for its rows, one empty file, and six copies of it
    assert sorted(opened) == sorted(["invalid.parquet", "valid.parquet"])
    assert {to for _, to in copied} == {f"{s}.parquet" for s in STATUSES} - {
        "invalid.parquet",
        "valid.parquet",
    }
    schema = pq.read_schema(out / "invalid.parquet")
    assert len(schema) > COLUMNS
    for status in STATUSES:
        table = pq.read_table(out / f"{status}.parquet")
        assert table.schema.equals(schema)
        assert table.num_rows == (20 if status == "invalid" else 0)


def test_the_checks_open_each_output_file_once(
    sandbox: Sandbox, wide_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LISTHYGIENE_QUALITY_WORKER", "thread")  # the checks in this process
    paths: list[str] = []
    open_file = reading._open

    def counting_open(path: str, filesystem: Any) -> Any:
        paths.append(Path(path).name)
        return open_file(path, filesystem)

    monkeypatch.setattr(reading, "_open", counting_open)
    out = tmp_path / "out"
    result = listhygiene.clean(
        wide_csv, out, settings=sandbox_settings(sandbox), check_smtp=False, verdicts="none"
    )
    assert result.summary["quality"]["passed"]
    outputs = [name for name in paths if name in {f"{s}.parquet" for s in STATUSES}]
    assert sorted(outputs) == sorted(f"{s}.parquet" for s in STATUSES)

"""The work folder's tables and the writer: inputs staged or read again, results joined back in
row order, a missing result found, and DuckDB's memory limit said in one line
(docs/pipeline.md, "Memory")."""

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.errors import PipelineError
from listhygiene.pipeline.backends import KEY, JobRef, LocalBackend
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.workdir import ADDRESS, ROW, WorkDir
from listhygiene.pipeline.worktables import WorkMemoryError, WorkTables
from listhygiene.results import VerificationResult, arrow_schema
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import DnsOutcome, Facts, MailboxOutcome


def _mx(host: str) -> list[dict[str, object]]:
    return [{"preference": 10, "host": host}]


SANDBOX_WORLD = {
    "domains": {
        "good.test": {"mx": _mx("mx.good.test"), "mailboxes": ["a", "b", "c"]},
        "nullmx.test": {"null_mx": True},
    },
    "hosts": {"mx.good.test": {}},
}


class _DropsFirst(LocalBackend):
    """The local engine, but each table of results comes without its first row."""

    async def results(self, job: JobRef) -> AsyncIterator[pa.Table]:
        async for table in super().results(job):
            yield table.slice(1)


def _contacts(path: Path) -> Path:
    """A Parquet table whose statuses interleave: valid, role, invalid, blank, again."""
    emails = []
    for i in range(300):
        emails += [f"user{i}@good.test", f"info{i % 7}@good.test" if i % 2 else "info@good.test"]
        emails += [f"x{i}@nullmx.test", None if i % 3 else "N/A"]
    table = pa.table(
        {
            "id": pa.array(range(1, len(emails) + 1), pa.int64()),
            "email": pa.array(emails, pa.string()),
            "weight": pa.array([i / 4 for i in range(len(emails))], pa.float64()),
        }
    )
    pq.write_table(table, path, row_group_size=333)  # row groups that do not match the batches
    return path


def test_a_parquet_input_is_read_again_and_a_missing_result_stops_the_write(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    source = _contacts(tmp_path / "contacts.parquet")
    out = tmp_path / "out"
    settings = sandbox.engine_settings(dns_timeout=1.0)
    with pytest.raises(PipelineError, match=r"returned no result for 1 addresses"):
        listhygiene.clean(source, out, backend=_DropsFirst(settings), check_smtp=False)
    assert not (out / "summary.json").exists()
    # the work folder kept for the rerun staged only row numbers and addresses
    work = out / ".listhygiene"
    assert json.loads((work / "manifest.json").read_text())["inputs"] == "source"
    parts = sorted((work / "rows").glob("part-*.parquet"))
    assert parts
    assert all(pq.read_schema(p).names == [ROW, ADDRESS] for p in parts)

    result = listhygiene.clean(source, out, backend=LocalBackend(settings), check_smtp=False)
    assert result.summary["addresses"]["resumed"] is True
    assert result.summary["addresses"]["verified"] == 1  # only what the first run lacked
    original = pq.read_table(source)
    seen: list[int] = []
    for status in STATUSES:
        written = pq.read_table(out / f"{status}.parquet")
        # the input's own columns and types, then the result columns
        assert written.schema.names[:3] == ["id", "email", "weight"]
        assert [written.schema.field(n).type for n in ("id", "weight")] == [
            pa.int64(),
            pa.float64(),
        ]
        assert written.schema.names[3:] == ["result_email", *arrow_schema().names[1:]]
        ids = written.column("id").to_pylist()
        assert ids == sorted(ids)  # in input order within each status
        assert set(written.column("status").to_pylist()) <= {status}
        seen += ids
    assert sorted(seen) == original.column("id").to_pylist()  # every row exactly once
    assert result.counts["valid"] == 450  # user0..299 and info0..info6
    assert result.counts["role"] == 150  # info@good.test
    assert result.counts["invalid"] == 600  # null MX, blank cells and placeholders
    rows = {r["id"]: r for s in STATUSES for r in pq.read_table(out / f"{s}.parquet").to_pylist()}
    assert rows[1]["weight"] == 0.0
    assert rows[1]["result_email"] == "user0@good.test"
    assert rows[4]["result_email"] == ""  # "N/A"
    assert rows[4]["reason"] == "invalid_syntax"
    # one credit per distinct address verified, whatever its row count; blank cells free
    paid = {
        r["result_email"]: r["credits_used"]
        for r in rows.values()
        if r["email"] not in (None, "N/A")
    }
    assert len(paid) == 300 + 8 + 300
    assert result.summary["credits"]["used"] == sum(paid.values())


def _read_all(tables: WorkTables) -> None:
    for _ in tables.joined(None, 4096).batches:
        pass


def _work_folder(
    tmp_path: Path, addresses: list[str | None], facts: Facts | None = None
) -> WorkDir:
    """A work folder with ``addresses`` staged as rows and a result for each distinct one
    (``facts`` decide it: by default, syntax only, so ``unknown``)."""
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    rows = pa.table(
        {
            ROW: pa.array(range(1, len(addresses) + 1), pa.int64()),
            ADDRESS: pa.array(addresses, pa.string()),
        }
    )
    work.write_rows(0, rows)
    distinct = sorted({a for a in addresses if a is not None})
    template = VerificationResult.from_facts(distinct[0], facts or Facts(syntax_valid=True)).to_row(
        internal=True
    )
    schema = arrow_schema(internal=True)
    columns = {
        name: pa.array([template[name]] * len(distinct), schema.field(name).type)
        for name in schema.names
    }
    columns["email"] = pa.array(distinct, pa.string())
    results = pa.table(columns, schema=schema).append_column(KEY, pa.array(distinct))
    work.write_results(results)
    return work


def test_the_join_out_of_memory_is_a_work_memory_error(tmp_path: Path) -> None:
    addresses: list[str | None] = [f"person{i}@example{i % 50}.test" for i in range(40_000)]
    work = _work_folder(tmp_path, addresses)
    with WorkTables(work) as tables:
        assert tables.distinct() == 40_000
    with (
        WorkTables(work, memory_limit="1MB") as tables,
        pytest.raises(WorkMemoryError, match=r"LISTHYGIENE_WORK_MEMORY=1MB") as raised,
    ):
        _read_all(tables)
    assert "\n" not in str(raised.value)


def test_the_join_gives_each_row_its_addresses_result_in_row_order(tmp_path: Path) -> None:
    addresses = ["b@x.test", None, "a@x.test", "b@x.test", None, "c@x.test"]
    work = _work_folder(tmp_path, addresses)
    with WorkTables(work) as tables:
        assert tables.distinct() == 3
        joined = tables.joined(None, 2)
        batches = list(joined.batches)
    table = pa.Table.from_batches(batches)
    assert table.column(ROW).to_pylist() == [1, 2, 3, 4, 5, 6]
    profile = table.column("profile").to_pylist()
    assert [p is None for p in profile] == [False, True, False, False, True, False]
    assert "email" not in table.column_names  # every result's email is its address
    assert joined.profiles.num_rows == 1  # the three results share one profile
    assert joined.credits == 3 * joined.profiles.column("credits_used")[0].as_py()


def _previous(folder: Path, rows: dict[str, str]) -> Path:
    """A ``previous/`` folder as the verdict store leaves it: an empty part, and a part of
    ``rows`` (address -> stored status) when there are any."""
    folder.mkdir()
    schema = pa.schema(
        [(ADDRESS, pa.string()), ("status", pa.string()), ("checked_at", pa.float64())]
    )
    pq.write_table(schema.empty_table(), folder / "part-000001.parquet")
    if rows:
        part = {ADDRESS: list(rows), "status": list(rows.values()), "checked_at": [1.0] * len(rows)}
        pq.write_table(pa.table(part, schema=schema), folder / "part-000002.parquet")
    return folder


def test_previous_statuses_are_joined_only_when_some_were_kept(tmp_path: Path) -> None:
    # a nightly run whose stored verdicts were all fresh keeps only empty parts: nothing is
    # joined or carried then; a stored status that differs is carried, and counted
    addresses = ["b@x.test", "a@x.test", "c@x.test"]
    accepted = Facts(
        syntax_valid=True, dns=DnsOutcome.MX, smtp_checked=True, mailbox=MailboxOutcome.ACCEPTED
    )
    work = _work_folder(tmp_path, addresses, accepted)  # every result valid
    with WorkTables(work) as tables:
        tables.distinct()
        empty = tables.joined(_previous(tmp_path / "empty", {}), 10)
        table = pa.Table.from_batches(list(empty.batches))
    assert "previous_status" not in table.column_names
    assert tables.transitions() == {}
    with WorkTables(work) as tables:
        tables.distinct()
        kept = tables.joined(_previous(tmp_path / "kept", {"a@x.test": "invalid"}), 10)
        table = pa.Table.from_batches(list(kept.batches))
        transitions = tables.transitions()
    rows, before = table.column(ROW).to_pylist(), table.column("previous_status").to_pylist()
    changed = dict(zip(rows, before, strict=True))
    assert changed == {1: None, 2: "invalid", 3: None}
    assert transitions == {"invalid->valid": 1}


def _clean_cli(path: Path, out: Path, memory: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LISTHYGIENE_WORK_MEMORY": memory, "LISTHYGIENE_VERDICTS": "none"}
    return subprocess.run(
        [sys.executable, "-m", "listhygiene.cli", "clean", str(path), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    lines = "".join(f"{i},person{i}@example{i % 50}.test\n" for i in range(20_000))
    path.write_text("id,email\n" + lines)
    return path


def test_out_of_memory_is_one_error_line_naming_the_setting(
    small_csv: Path, tmp_path: Path
) -> None:
    done = _clean_cli(small_csv, tmp_path / "out", "1MB")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1
    assert "out of memory" in errors[0]
    assert "LISTHYGIENE_WORK_MEMORY=1MB" in errors[0]


def test_an_unusable_memory_setting_is_a_usage_error(small_csv: Path, tmp_path: Path) -> None:
    done = _clean_cli(small_csv, tmp_path / "out", "lots")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "LISTHYGIENE_WORK_MEMORY='lots'" in done.stderr.splitlines()[-1]


def _dictionary_columns(path: Path) -> set[str]:
    """The columns of a Parquet file whose first row group has a dictionary page."""
    metadata = pq.read_metadata(path)
    group = metadata.row_group(0)
    return {
        group.column(i).path_in_schema
        for i in range(group.num_columns)
        if group.column(i).has_dictionary_page
    }


def test_only_columns_of_few_values_get_a_dictionary(sandbox: Sandbox, tmp_path: Path) -> None:
    source = _contacts(tmp_path / "contacts.parquet")
    settings = sandbox.engine_settings(dns_timeout=1.0)
    listhygiene.clean(source, tmp_path / "out", backend=LocalBackend(settings), check_smtp=False)
    found = _dictionary_columns(tmp_path / "out" / "valid.parquet")
    # an id and a weight of their own per row: encoded plain (docs/pipeline.md, "Speed")
    assert not found & {"id", "weight", "result_email"}
    assert {"status", "domain", "reason", "score", "credits_used"} <= found
    assert "mx_records.list.element" in found  # a profile's nested column
    # the values read back are the same either way
    table = pq.read_table(tmp_path / "out" / "valid.parquet")
    assert table.column("status").type == pa.string()


class _FailingWriter:
    """A Parquet writer that fails from the second write of all the files on, as a full disk
    would (the parts are written in a thread of the writer's: its error must stop the run)."""

    writes = 0

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def write_table(self, table: pa.Table) -> None:
        _FailingWriter.writes += 1
        if _FailingWriter.writes >= 2:
            raise OSError("No space left on device")
        self.inner.write_table(table)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.inner.close()  # type: ignore[attr-defined]


def test_a_write_that_fails_in_the_writers_thread_stops_the_run(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from listhygiene.pipeline import outputs

    made = outputs.OutputFolder.writer

    def failing(
        self: outputs.OutputFolder, name: str, schema: pa.Schema, **options: object
    ) -> _FailingWriter:
        return _FailingWriter(made(self, name, schema, **options))

    monkeypatch.setattr(outputs.OutputFolder, "writer", failing)
    monkeypatch.setattr(_FailingWriter, "writes", 0)
    source = _contacts(tmp_path / "contacts.parquet")
    settings = sandbox.engine_settings(dns_timeout=1.0)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"):
        listhygiene.clean(source, out, backend=LocalBackend(settings), check_smtp=False)
    assert not (out / "summary.json").exists()
    assert not list(out.glob(".staging-*"))  # the staging folder went with the error


def test_a_first_part_too_small_to_judge_keeps_parquets_default_dictionaries() -> None:
    # A wide, short table (issue 28: 50 rows x 10,000 columns) is not counted column by column.
    from listhygiene.pipeline.writer import _DICTIONARY_JUDGED, _dictionary_columns

    def ids(rows: int) -> pa.Table:
        return pa.table({"id": pa.array(range(rows), pa.int64()), "kind": ["a"] * rows})

    assert _dictionary_columns(ids(_DICTIONARY_JUDGED - 1)) is True
    assert _dictionary_columns(ids(_DICTIONARY_JUDGED)) == ["kind"]


def test_before_any_result_the_pending_addresses_are_the_distinct_file_itself(
    tmp_path: Path,
) -> None:
    # nothing answered yet (no verdict store, or an empty one): no query writes the same
    # addresses again (~1 s at 10,000,000 rows); once some are answered, the rest are written,
    # and the distinct file is left as it was
    addresses = ["b@x.test", "a@x.test", "b@x.test", "c@x.test"]
    work = WorkDir(tmp_path / "work")
    work.open({"test": True})
    staged = {
        ROW: pa.array([1, 2, 3, 4], pa.int64()),
        ADDRESS: pa.array(addresses, pa.string()),
    }
    work.write_rows(0, pa.table(staged))
    distinct, pending = work.path / "distinct.parquet", work.path / "pending.parquet"
    with WorkTables(work) as tables:
        assert tables.distinct() == 3
        assert tables.pending() == 3
        assert os.stat(pending).st_ino == os.stat(distinct).st_ino
        assert pq.read_table(pending).column(ADDRESS).to_pylist() == [
            "b@x.test",
            "a@x.test",
            "c@x.test",
        ]
        schema = arrow_schema(internal=True)
        template = VerificationResult.from_facts("a@x.test", Facts(syntax_valid=True))
        row = template.to_row(internal=True)
        answered = pa.table(
            {n: pa.array([row[n]], schema.field(n).type) for n in schema.names}, schema=schema
        ).append_column(KEY, pa.array(["a@x.test"]))
        work.write_results(answered)
        assert tables.pending() == 2
        assert pq.read_table(pending).column(ADDRESS).to_pylist() == ["b@x.test", "c@x.test"]
        assert pq.read_table(distinct).num_rows == 3

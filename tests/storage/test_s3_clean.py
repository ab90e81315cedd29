"""``clean`` with its input and outputs in a bucket of a real S3-compatible server (moto),
through s3fs (docs/object-storage.md)."""

import io
import json
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import listhygiene
from listhygiene.pipeline.outputs import OutputFolder
from listhygiene.pipeline.result import STATUSES
from listhygiene.pipeline.sources import SourceError, open_source
from listhygiene.sandbox import Sandbox

OUTPUTS = {f"{s}.parquet" for s in STATUSES} | {"summary.json", "report.html"}
CSV = "id,Email\n1,alice@acme.test\n2,bob@acme.test\n3,nobody@nowhere.invalid\n4,\n"


def names(s3: Any, prefix: str) -> set[str]:
    return {p.rsplit("/", 1)[-1] for p in s3.ls(prefix, detail=False)}


def test_a_list_in_a_bucket_is_cleaned_into_the_bucket(
    s3: Any, bucket: str, sandbox: Sandbox
) -> None:
    s3.pipe(f"{bucket}/in/contacts.csv", CSV.encode())
    result = listhygiene.clean(
        f"s3://{bucket}/in/contacts.csv",
        f"s3://{bucket}/out",
        settings=sandbox.engine_settings(helo="verifier.test"),
        check_smtp=False,
    )
    # only the outputs: no staging prefix, no work state once published
    assert names(s3, f"{bucket}/out") == OUTPUTS
    assert result.counts["valid"] == 2
    assert result.counts["invalid"] == 2
    assert result.summary["input"]["name"] == f"s3://{bucket}/in/contacts.csv"
    assert list(result["valid"]["Email"]) == ["alice@acme.test", "bob@acme.test"]
    # the summary and the report are read from the bucket
    summary = json.loads(s3.cat(f"{bucket}/out/summary.json"))
    assert summary["rows"]["by_status"] == result.counts
    assert result.report == f"s3://{bucket}/out/report.html"
    report = s3.cat(f"{bucket}/out/report.html").decode()
    assert report.lstrip().lower().startswith("<!doctype html")
    assert "contacts.csv" in report
    invalid = pq.read_table(io.BytesIO(s3.cat(f"{bucket}/out/invalid.parquet"))).to_pandas()
    assert sorted(invalid["id"]) == ["3", "4"]


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"id": ["1", "2", "3"], "email": ["a@x.test", "b@y.test", "c@z.test"]})


def _xlsx(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_excel(buffer, index=False)
    return buffer.getvalue()


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    return buffer.getvalue()


FORMATS = {
    "contacts.csv": lambda f: f.to_csv(index=False).encode(),
    "contacts.txt": lambda f: "\n".join(f["email"]).encode(),
    "contacts.jsonl": lambda f: f.to_json(orient="records", lines=True).encode(),
    "contacts.parquet": _parquet,
    "contacts.xlsx": _xlsx,
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_file_format_is_read_from_a_bucket(s3: Any, bucket: str, name: str) -> None:
    frame = _frame()
    s3.pipe(f"{bucket}/{name}", FORMATS[name](frame))
    source = open_source(f"s3://{bucket}/{name}")
    assert source.info.name == f"s3://{bucket}/{name}"
    table = pa.Table.from_batches(list(source.batches(rows=2)))
    assert table.column("email").to_pylist() == list(frame["email"])


def test_an_unreadable_object_is_named_by_its_url_not_by_a_local_copy(s3: Any, bucket: str) -> None:
    s3.pipe(f"{bucket}/people.csv", b"name,city\nAlice,Paris\nBob,Rome\n")
    s3.pipe(f"{bucket}/empty.csv", b"")
    s3.pipe(f"{bucket}/list.doc", b"alice@acme.test\n")
    for key in ("people.csv", "empty.csv", "list.doc"):
        url = f"s3://{bucket}/{key}"
        with pytest.raises(SourceError) as caught:
            listhygiene.clean(url, f"s3://{bucket}/out-{key}", check_smtp=False)
        assert url in str(caught.value)
        assert "listhygiene-input-" not in str(caught.value)  # the spool file is never named
    with pytest.raises(SourceError, match="no such object"):
        open_source(f"s3://{bucket}/missing.csv")
    with pytest.raises(SourceError, match="no such bucket"):
        open_source(f"s3://{bucket}-missing/contacts.csv")
    s3.pipe(f"{bucket}/folder/a.csv", b"email\n")
    with pytest.raises(SourceError, match="a folder"):
        open_source(f"s3://{bucket}/folder")


def test_a_staged_file_is_invisible_under_its_final_name_until_published(
    s3: Any, bucket: str
) -> None:
    folder = OutputFolder(f"s3://{bucket}/out")
    folder.check_writable()
    schema = pa.schema([pa.field("email", pa.string())])
    writer = folder.writer("valid.parquet", schema)
    for index in range(3):
        writer.write_table(pa.table({"email": [f"a{index}@x.test"] * 1000}, schema=schema))
        assert not s3.exists(f"{bucket}/out/valid.parquet")
    writer.close()
    folder.write_text("summary.json", "{}")
    # complete, but under the staging prefix only
    assert not s3.exists(f"{bucket}/out/valid.parquet")
    staged = folder.staged("valid.parquet")
    assert s3.exists(staged)
    folder.publish(["valid.parquet", "summary.json"])
    assert names(s3, f"{bucket}/out") == {"valid.parquet", "summary.json"}
    table = pq.read_table(io.BytesIO(s3.cat(f"{bucket}/out/valid.parquet")))
    assert table.num_rows == 3000


def test_a_new_run_removes_the_staging_prefix_of_a_killed_one(s3: Any, bucket: str) -> None:
    killed = OutputFolder(f"s3://{bucket}/out")
    killed.write_text("report.html", "half a run")
    assert any(n.startswith(".staging-") for n in names(s3, f"{bucket}/out"))
    folder = OutputFolder(f"s3://{bucket}/out")
    folder.write_text("summary.json", "{}")
    folder.publish(["summary.json"])
    assert names(s3, f"{bucket}/out") == {"summary.json"}


def test_a_missing_output_bucket_fails_before_any_work_and_is_not_created(
    s3: Any, bucket: str, sandbox: Sandbox
) -> None:
    from listhygiene.pipeline.outputs import OutputError

    s3.pipe(f"{bucket}/contacts.csv", CSV.encode())
    with pytest.raises(OutputError, match="no such bucket"):
        listhygiene.clean(
            f"s3://{bucket}/contacts.csv",
            f"s3://{bucket}-nope/out",
            settings=sandbox.engine_settings(),
            check_smtp=False,
        )
    assert not s3.exists(f"{bucket}-nope")

"""Large lists on many workers: split a list into chunk files, verify each with a mapped
:class:`EmailVerificationOperator` (``.partial(...).expand(source=...)``), merge the outputs.

Rows are split by a hash of their cleaned address, so every distinct address lands in one chunk
only (a duplicate is verified, and paid for, once, as in a single run). Each chunk carries the
input's row number in :data:`ROW_COLUMN`; the merge restores the input's order with it and runs
the core's data-quality checks (:func:`listhygiene.pipeline.quality.run_quality_checks`) on the
merged result: every input row in exactly one merged file, in the file of its own status, with a
score and an email, and each merged file holding what the chunks' summaries add up to.

No Airflow import here: these are plain functions, wrapped by ``@task`` in a DAG.
"""

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ROW_COLUMN", "SPLIT_MANIFEST", "merge_outputs", "split_list"]

#: The input's 1-based row number, added to every chunk (and dropped from the merged files).
ROW_COLUMN = "_listhygiene_row"
#: Written next to the chunks: the input's row count and the chunk files.
SPLIT_MANIFEST = "split.json"


def split_list(
    source: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    chunks: int,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
) -> list[str]:
    """Write ``source`` as up to ``chunks`` Parquet files in ``folder``; return their paths.

    A chunk that would be empty is not written. Rerunning with the same input writes the same
    files (the split is deterministic), so a retried split task is harmless.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from listhygiene.pipeline.columns import find_email_column
    from listhygiene.pipeline.prepare import clean_cells
    from listhygiene.pipeline.sources import open_source

    if chunks < 1:
        raise ValueError("chunks must be 1 or more")
    opened = open_source(source, table=table, query=query)
    column = find_email_column(
        opened.schema, opened.sample(), email_column, source_name=opened.info.name
    )
    if ROW_COLUMN in opened.schema.names:
        raise ValueError(f"{opened.info.name}: the input already has a column {ROW_COLUMN!r}")
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("chunk-*.parquet"):
        stale.unlink()
    writers: dict[int, pq.ParquetWriter] = {}
    total = 0
    try:
        for batch in opened.batches():
            table_ = pa.Table.from_batches([batch])
            numbers = pa.array(range(total + 1, total + len(table_) + 1), pa.int64())
            table_ = table_.append_column(ROW_COLUMN, numbers)
            total += len(table_)
            keys = clean_cells(batch.column(batch.schema.get_field_index(column)))
            hashes = pd.util.hash_array(keys.to_numpy(zero_copy_only=False).astype(object))
            which = hashes % chunks
            for index in sorted(set(which.tolist())):
                part = table_.filter(pa.array(which == index))
                if index not in writers:
                    writers[index] = pq.ParquetWriter(
                        target / f"chunk-{index:04d}.parquet", part.schema
                    )
                writers[index].write_table(part.cast(writers[index].schema))
    finally:
        for writer in writers.values():
            writer.close()
    paths = [str(target / f"chunk-{i:04d}.parquet") for i in sorted(writers)]
    manifest = {"source": opened.info.name, "email_column": column, "rows": total, "chunks": paths}
    (target / SPLIT_MANIFEST).write_text(json.dumps(manifest, indent=2))
    return paths


def merge_outputs(
    summaries: Iterable[Mapping[str, Any]],
    out: str | os.PathLike[str],
    *,
    expected_rows: int | None = None,
    quality: str = "fail",
    accept_unreachable: bool = False,
) -> dict[str, Any]:
    """Concatenate the chunks' outputs per status into ``out``, in input order, check them, and
    write ``summary.json``; return the merged summary.

    ``summaries`` are the chunk runs' summaries (the mapped operator's XComs); ``expected_rows``
    is the input's row count (``split.json``'s ``rows``; the chunks' total when None). With
    ``quality="fail"`` a failing check raises :class:`listhygiene.pipeline.run.QualityError` and
    nothing is published.

    With a verdict store the merged summary's ``verdicts`` adds up the chunks' (the split puts
    each distinct address in one chunk, so the sums are the list's), and the chunks'
    ``changed.parquet`` files are merged in input order.

    The chunks' port-25 health is judged together (their domain counts added up): a chunk may
    have too few domains to show the problem on its own. When most could not be reached,
    :class:`~listhygiene.pipeline.run.UnreachableError` is raised and nothing is published,
    unless ``accept_unreachable``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyarrow.fs import FileType

    from listhygiene.pipeline.outputs import SUMMARY, OutputFolder
    from listhygiene.pipeline.quality import run_quality_checks
    from listhygiene.pipeline.run import STATUSES, QualityError, UnreachableError
    from listhygiene.pipeline.verdict_memory import CHANGED

    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    parts = [dict(s) for s in summaries]
    if not parts:
        raise ValueError("nothing to merge: no chunk summaries")
    folder = OutputFolder(os.fspath(out))
    folder.check_writable()
    checked: list[pa.Table] = []
    file_rows: dict[str, int] = {}
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    credits = 0
    verdicts: Counter[str] = Counter()
    health = _merged_health(p.get("health") for p in parts)
    if health["problem"] and not accept_unreachable:
        raise UnreachableError(
            f"{health['problem']}; nothing was merged (accept_unreachable=True merges them)",
            health,
        )
    chunk_folders = [OutputFolder(str(p["output"]["folder"])) for p in parts]
    for part in parts:
        by_status.update(part["rows"]["by_status"])
        by_reason.update(part["rows"].get("by_reason", {}))
        credits += int(part.get("credits", {}).get("used", 0))
        verdicts.update({k: int(v) for k, v in (part.get("verdicts") or {}).items()})
    with_changed = [
        c for c in chunk_folders if c.fs.get_file_info(c.final(CHANGED)).type != FileType.NotFound
    ]
    try:
        for status in STATUSES:
            tables = [
                pq.read_table(chunk.final(f"{status}.parquet"), filesystem=chunk.fs)
                for chunk in chunk_folders
            ]
            merged = pa.concat_tables(tables, promote_options="permissive")
            if ROW_COLUMN not in merged.column_names:
                raise ValueError(
                    f"the chunk outputs have no {ROW_COLUMN} column: split them with split_list"
                )
            merged = merged.sort_by(ROW_COLUMN)
            names = {
                n: (f"result_{n}" if f"result_{n}" in merged.column_names else n)
                for n in ("status", "score", "email")
            }
            checked.append(
                pa.table(
                    {
                        "_row": merged.column(ROW_COLUMN),
                        "_file": pa.array([status] * len(merged), pa.string()),
                        "status": pc.cast(merged.column(names["status"]), pa.string()),
                        "score": merged.column(names["score"]),
                        "email": merged.column(names["email"]),
                    }
                )
            )
            final = merged.drop_columns([ROW_COLUMN])
            with folder.writer(f"{status}.parquet", final.schema) as writer:
                writer.write_table(final)
            file_rows[status] = len(final)
        if with_changed:
            tables = [pq.read_table(c.final(CHANGED), filesystem=c.fs) for c in with_changed]
            changed = pa.concat_tables(tables, promote_options="permissive")
            if ROW_COLUMN in changed.column_names:
                changed = changed.sort_by(ROW_COLUMN).drop_columns([ROW_COLUMN])
            with folder.writer(CHANGED, changed.schema) as writer:
                writer.write_table(changed)
        total = sum(int(p["rows"]["total"]) for p in parts)
        expected = total if expected_rows is None else int(expected_rows)
        report = run_quality_checks(
            pa.concat_tables(checked),
            expected_rows=expected,
            file_rows=file_rows,
            summary_rows={s: int(by_status.get(s, 0)) for s in STATUSES},
        )
        summary = {
            "merged_from": [p["output"]["folder"] for p in parts],
            "input": {"rows": expected, "chunks": len(parts)},
            "output": {
                "folder": folder.url,
                "files": {s: {"path": f"{s}.parquet", "rows": file_rows[s]} for s in STATUSES},
            },
            "rows": {
                "total": total,
                "by_status": {s: int(by_status.get(s, 0)) for s in STATUSES},
                "by_reason": dict(sorted(by_reason.items())),
            },
            "credits": {"used": credits},
            "verdicts": {k: int(verdicts.get(k, 0)) for k in ("reused", "verified", "changed")},
            "health": {**health, "accepted": bool(health["problem"])},
            "quality": {**report.as_dict(), "mode": quality},
        }
        if not report.passed and quality == "fail":
            details = "; ".join(f"{c.name}: {c.details}" for c in report.failed())
            raise QualityError(
                f"data-quality checks of the merged output failed, nothing was published: "
                f"{details}",
                summary["quality"],
            )
        folder.write_text(SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False))
        extra = [CHANGED] if with_changed else []
        folder.publish([f"{s}.parquet" for s in STATUSES] + extra + [SUMMARY])
    except BaseException:
        folder.discard()
        raise
    return summary


def _merged_health(healths: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The chunks' domain counts added up, judged by the engine's own rule
    (:class:`listhygiene.engine.health.RunHealth`)."""
    from listhygiene.engine.health import RunHealth

    total = RunHealth()
    for health in healths:
        for name in ("domains_probed", "domains_reached", "domains_unreachable", "domains_blocked"):
            setattr(total, name, getattr(total, name) + int((health or {}).get(name) or 0))
    return total.as_dict()

"""A list in chunks: split it by domain for runs on several workers, merge their outputs into the
folder one run writes (docs/pipeline.md, "Chunks").

**Split by domain.** Every address of a domain goes to one chunk, so each mail host is probed by
one run only and sees no more SMTP sessions than a single run would open (a split by address
hash sends every domain to every chunk: each chunk's run opens its own sessions, and a host's
sessions multiply by the number of chunks). Domains are placed by size, largest first, each on
the chunk with the fewest rows so far. A domain larger than an even share stays whole: its chunk
is then larger than the others, which costs time, not politeness; splitting it would need a
per-host limit shared by every worker. Rows with no domain (blank or broken cells) follow their
cell's text, so one bad address is not charged twice. The source is read twice: once to count
rows per domain, once to write the chunks. Each chunk is a Parquet file with the input's columns
and :data:`ROW_COLUMN`, the input's 1-based row number.

**Merge.** Each status's files of the chunk runs are merged by :data:`ROW_COLUMN` in bounded
batches (each chunk's file is in input order), the column is dropped, and the merged folder gets
what a single run's has: the seven per-status files, ``changed.parquet`` when the chunks had a
verdict store, one ``summary.json`` adding up the chunks', and one ``report.html``. The output
checks (:func:`listhygiene.pipeline.quality.check_outputs`) run once, on the merged files.
"""

import heapq
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.quality import ROW_COLUMN, STATUSES

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs

    from listhygiene.pipeline.outputs import OutputFolder
    from listhygiene.pipeline.quality import QualityWorker

log = logging.getLogger(__name__)

__all__ = ["ROW_COLUMN", "SPLIT_MANIFEST", "merge_chunks", "plan_chunks", "split_by_domain"]

#: Written next to the chunks: the input, its email column, its row count and the chunk files.
SPLIT_MANIFEST = "split.json"
#: Rows per batch while splitting and merging.
BATCH_ROWS = 65_536
#: Domains shown in the summary's ``top_domains``, as a single run shows them.
TOP_DOMAINS = 15


def plan_chunks(domain_rows: Mapping[str, int], chunks: int) -> dict[str, int]:
    """Each domain's chunk (0 to ``chunks - 1``): largest domains first, each on the chunk with
    the fewest rows so far (ties: the lower chunk). Deterministic for the same counts."""
    if chunks < 1:
        raise ValueError("chunks must be 1 or more")
    loads = [(0, index) for index in range(chunks)]
    plan: dict[str, int] = {}
    for domain, rows in sorted(domain_rows.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(loads)
        plan[domain] = index
        heapq.heappush(loads, (load + rows, index))
    return plan


def split_by_domain(
    source: "str | os.PathLike[str]",
    folder: "str | os.PathLike[str]",
    *,
    chunks: int,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
) -> list[str]:
    """Write ``source`` as up to ``chunks`` Parquet files in ``folder``, every domain in one
    file; return their paths. :data:`SPLIT_MANIFEST` beside them says what was split.

    A chunk that would be empty is not written. The same input gives the same files, so a
    retried split is harmless. Input errors are :class:`~listhygiene.errors.InputError`, as
    ``clean`` raises them.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from listhygiene.pipeline.columns import find_email_column
    from listhygiene.pipeline.sources import open_source

    if chunks < 1:
        raise ValueError("chunks must be 1 or more")
    opened = open_source(source, table=table, query=query, encoding=encoding)
    column = find_email_column(
        opened.schema, opened.sample(), email_column, source_name=opened.info.name
    )
    if ROW_COLUMN in opened.schema.names:
        raise ValueError(f"{opened.info.name}: the input already has a column {ROW_COLUMN!r}")
    index = opened.schema.get_field_index(column)

    domain_rows: Counter[str] = Counter()
    for batch in opened.batches(BATCH_ROWS):
        domains = _domains(batch.column(index))
        counts = pc.value_counts(domains.filter(pc.is_valid(domains)))
        domain_rows.update(
            dict(
                zip(
                    counts.field("values").to_pylist(),
                    counts.field("counts").to_pylist(),
                    strict=True,
                )
            )
        )
    plan = plan_chunks(domain_rows, chunks)
    known = pa.array(list(plan), pa.string())
    places = pa.array(list(plan.values()), pa.int64())

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("chunk-*.parquet"):
        stale.unlink()
    opened = open_source(source, table=table, query=query, encoding=encoding)
    writers: dict[int, pq.ParquetWriter] = {}
    total = 0
    try:
        for batch in opened.batches(BATCH_ROWS):
            part = pa.Table.from_batches([batch])
            numbers = pa.array(range(total + 1, total + part.num_rows + 1), pa.int64())
            part = part.append_column(ROW_COLUMN, numbers)
            total += part.num_rows
            which = _chunk_of(batch.column(index), known, places, chunks)
            for chunk in sorted(set(which.tolist())):
                rows = part.filter(pa.array(which == chunk))
                if chunk not in writers:
                    writers[chunk] = pq.ParquetWriter(
                        target / f"chunk-{chunk:04d}.parquet", rows.schema
                    )
                writers[chunk].write_table(rows.cast(writers[chunk].schema))
    finally:
        for writer in writers.values():
            writer.close()
    paths = [str(target / f"chunk-{chunk:04d}.parquet") for chunk in sorted(writers)]
    info = opened.info
    manifest = {
        "source": info.name,
        "kind": info.kind,
        "encoding": info.encoding,
        "delimiter": info.delimiter,
        "email_column": column,
        "rows": total,
        "bad_records": [_record(r) for r in info.bad_records],
        "domains": len(domain_rows),
        "chunks": paths,
    }
    (target / SPLIT_MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
    return paths


def _domains(cells: "pa.Array") -> "pa.Array":
    """The domain of each cell's address as ``clean`` reads it (after its last ``@``); null
    where the cell holds none."""
    import pyarrow.compute as pc

    from listhygiene.pipeline.prepare import clean_cells

    found = pc.extract_regex(clean_cells(cells), r"@(?P<domain>[^@\s]+)$")
    return pc.struct_field(found, "domain")


def _chunk_of(cells: "pa.Array", known: "pa.Array", places: "pa.Array", chunks: int) -> "Any":
    """Each row's chunk, as a numpy array: its domain's place, else a hash of its text."""
    import numpy as np
    import pandas as pd
    import pyarrow.compute as pc

    from listhygiene.pipeline.prepare import clean_cells

    domains = _domains(cells)
    at = pc.index_in(domains, value_set=known)
    placed = pc.fill_null(pc.take(places, at), -1).to_numpy(zero_copy_only=False).copy()
    loose = placed < 0
    if loose.any():
        text = pc.fill_null(clean_cells(cells), "").to_numpy(zero_copy_only=False).astype(object)
        placed[loose] = (pd.util.hash_array(text[loose]) % np.uint64(chunks)).astype(np.int64)
    return placed


def _record(record: Any) -> dict[str, Any]:
    import dataclasses

    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    return dict(record)


# --- merge ------------------------------------------------------------------------------------


def merge_chunks(
    chunks: "Iterable[Mapping[str, Any] | str | os.PathLike[str]]",
    out: "str | os.PathLike[str]",
    *,
    manifest: "Mapping[str, Any] | str | os.PathLike[str] | None" = None,
    expected_rows: int | None = None,
    quality: str = "fail",
    accept_unreachable: bool = False,
    worker: "QualityWorker | None" = None,
) -> dict[str, Any]:
    """Merge the chunk runs' outputs into ``out`` as one run's folder; return its summary.

    ``chunks`` are the chunk runs' summaries (what ``clean`` returns, what the Airflow operator
    pushes) or their output folders. ``manifest`` is the split's :data:`SPLIT_MANIFEST` (a path
    or its content): the input's name, email column and row count go into the summary.
    ``expected_rows`` is the input's row count (the manifest's, else the chunks' total).

    The output checks run once, on the merged files (``worker`` from
    :func:`~listhygiene.pipeline.quality.warm_up` runs them where GX is already imported). With
    ``quality="fail"`` a failing check raises :class:`~listhygiene.errors.QualityError` and
    nothing is published. The chunks' port-25 health is judged together (one chunk may have too
    few domains to show a problem): when most domains could not be reached,
    :class:`~listhygiene.errors.UnreachableError` is raised and nothing is published, unless
    ``accept_unreachable``.
    """
    from listhygiene.errors import QualityError, UnreachableError
    from listhygiene.pipeline.outputs import SUMMARY, OutputFolder
    from listhygiene.pipeline.quality import check_outputs
    from listhygiene.pipeline.report import render_report
    from listhygiene.pipeline.verdict_memory import CHANGED

    started = time.perf_counter()
    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    parts = [_chunk_summary(chunk) for chunk in chunks]
    if not parts:
        raise ValueError("nothing to merge: no chunk summaries")
    split = _manifest(manifest)
    health = _merged_health(part.get("health") for part in parts)
    if health["problem"] and not accept_unreachable:
        raise UnreachableError(
            f"{health['problem']}; nothing was merged (accept_unreachable=True merges them)",
            health,
        )
    folder = OutputFolder(os.fspath(out))
    folder.check_writable()
    sources = [OutputFolder(str(part["output"]["folder"])) for part in parts]
    total = sum(int(part["rows"]["total"]) for part in parts)
    if expected_rows is None:
        expected_rows = int(split["rows"]) if "rows" in split else total
    try:
        file_rows = {
            status: _merge_file(sources, f"{status}.parquet", folder, numbers=True)
            for status in STATUSES
        }
        changed = [s for s in sources if _exists(s.fs, s.final(CHANGED))]
        changed_rows = _merge_file(changed, CHANGED, folder) if changed else None
        summary = _merged_summary(parts, split, folder.url, expected_rows, file_rows, health)
        if changed_rows is not None:
            summary["verdict_store"] = {"changed_file": {"path": CHANGED, "rows": changed_rows}}
        report = check_outputs(
            {s: folder.staged(f"{s}.parquet") for s in STATUSES},
            expected_rows=expected_rows,
            summary_rows=summary["rows"]["by_status"],
            row_numbers={s: folder.staged(_numbers_file(s)) for s in STATUSES},
            filesystem=folder.fs,
            worker=worker,
        )
        summary["quality"] = {**report.as_dict(), "mode": quality}
        summary["timings"]["seconds"]["merge"] = round(time.perf_counter() - started, 3)
        if not report.passed and quality == "fail":
            details = "; ".join(f"{c.name}: {c.details}" for c in report.failed())
            raise QualityError(
                f"data-quality checks of the merged output failed, nothing was published: "
                f"{details}",
                summary["quality"],
            )
        folder.write_text("report.html", render_report(summary))
        folder.write_text(SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False))
        extra = [CHANGED] if changed_rows is not None else []
        folder.publish([f"{s}.parquet" for s in STATUSES] + extra + ["report.html", SUMMARY])
    except BaseException:
        folder.discard()
        raise
    return summary


def _chunk_summary(chunk: "Mapping[str, Any] | str | os.PathLike[str]") -> dict[str, Any]:
    """A chunk run's summary, given or read from its output folder's ``summary.json``."""
    if isinstance(chunk, Mapping):
        return dict(chunk)
    from listhygiene.pipeline.outputs import SUMMARY, OutputFolder

    source = OutputFolder(os.fspath(chunk))
    with source.fs.open_input_stream(source.final(SUMMARY)) as stream:
        summary = json.loads(stream.read().decode("utf-8"))
    summary.setdefault("output", {})["folder"] = os.fspath(chunk)
    return dict(summary)


def _manifest(manifest: "Mapping[str, Any] | str | os.PathLike[str] | None") -> dict[str, Any]:
    if manifest is None:
        return {}
    if isinstance(manifest, Mapping):
        return dict(manifest)
    return dict(json.loads(Path(manifest).read_text(encoding="utf-8")))


def _exists(fs: "pyarrow.fs.FileSystem", path: str) -> bool:
    from pyarrow.fs import FileType

    return bool(fs.get_file_info(path).type != FileType.NotFound)


def _numbers_file(status: str) -> str:
    """The merged file's row numbers, staged beside it for the checks (never published)."""
    return f"rows-{status}.parquet"


def _merge_file(
    sources: "list[OutputFolder]", name: str, folder: "OutputFolder", *, numbers: bool = False
) -> int:
    """Merge ``name`` of every source into ``folder``'s staging in input order, without
    :data:`ROW_COLUMN` (written beside it when ``numbers``); how many rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(s.fs.open_input_file(s.final(name))) for s in sources]
    schemas = [f.schema_arrow for f in files]
    if any(ROW_COLUMN not in schema.names for schema in schemas):
        raise ValueError(
            f"the chunk outputs' {name} has no {ROW_COLUMN} column: split the list with "
            "split_by_domain"
        )
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    final = schema.remove(schema.get_field_index(ROW_COLUMN))
    written = 0
    with folder.writer(name, final) as writer:
        numbers_writer = (
            folder.writer(_numbers_file(name.removesuffix(".parquet")), _numbers_schema())
            if numbers
            else None
        )
        try:
            for table in _in_order(files, schema):
                writer.write_table(table.drop_columns([ROW_COLUMN]))
                if numbers_writer is not None:
                    numbers_writer.write_table(
                        pa.table({ROW_COLUMN: table.column(ROW_COLUMN)}, schema=_numbers_schema())
                    )
                written += table.num_rows
        finally:
            if numbers_writer is not None:
                numbers_writer.close()
    return written


def _numbers_schema() -> "pa.Schema":
    import pyarrow as pa

    return pa.schema([pa.field(ROW_COLUMN, pa.int64())])


def _in_order(files: list[Any], schema: "pa.Schema") -> "Iterator[pa.Table]":
    """The rows of ``files`` (each in input order) merged by :data:`ROW_COLUMN`, a bounded
    batch at a time: whatever every file has passed can be written."""
    import numpy as np
    import pyarrow as pa

    streams = [f.iter_batches(batch_size=BATCH_ROWS) for f in files]
    held: list[pa.Table | None] = [None] * len(files)
    last = [0] * len(files)

    def refill(index: int) -> None:
        for batch in streams[index]:
            if batch.num_rows:
                table = pa.Table.from_batches([batch]).select(schema.names)
                table = table.cast(schema)
                rows = table.column(ROW_COLUMN).to_numpy()
                if rows[0] <= last[index] or (np.diff(rows) <= 0).any():
                    raise ValueError(f"a chunk's output is not in input order ({ROW_COLUMN})")
                last[index] = int(rows[-1])
                held[index] = table
                return
        held[index] = None

    for index in range(len(files)):
        refill(index)
    while any(table is not None for table in held):
        bound = min(last[i] for i, table in enumerate(held) if table is not None)
        taken = []
        for index, table in enumerate(held):
            if table is None:
                continue
            rows = table.column(ROW_COLUMN).to_numpy()
            cut = int(np.searchsorted(rows, bound, side="right"))
            taken.append(table.slice(0, cut))
            if cut == table.num_rows:
                refill(index)
            else:
                held[index] = table.slice(cut)
        yield pa.concat_tables(taken).sort_by(ROW_COLUMN)


def _merged_summary(
    parts: list[dict[str, Any]],
    split: Mapping[str, Any],
    out: str,
    expected_rows: int,
    file_rows: Mapping[str, int],
    health: Mapping[str, Any],
) -> dict[str, Any]:
    """One run's summary from the chunks': counts added up (each distinct address is in one
    chunk, so the sums are the list's), the top domains ranked again."""
    from listhygiene.pipeline.summary import run_politeness

    first = parts[0]
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    addresses: Counter[str] = Counter()
    credits: dict[str, float] = {}
    verdicts: Counter[str] = Counter()
    domains: dict[str, dict[str, Any]] = {}
    empty = 0
    for part in parts:
        rows = part.get("rows", {})
        by_status.update({k: int(v) for k, v in rows.get("by_status", {}).items()})
        by_reason.update({k: int(v) for k, v in rows.get("by_reason", {}).items()})
        empty += int(rows.get("empty_email", 0))
        for key, value in (part.get("addresses") or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                addresses[key] += value
        for key, value in (part.get("credits") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                credits[key] = credits.get(key, 0) + value
        verdicts.update({k: int(v) for k, v in (part.get("verdicts") or {}).items()})
        for entry in part.get("top_domains") or []:
            domains[entry["domain"]] = entry  # a domain is in one chunk only
    starts = [p.get("timings", {}).get("started_at") for p in parts]
    phases: Counter[str] = Counter()
    for part in parts:
        phases.update(part.get("timings", {}).get("seconds", {}))
    top = sorted(domains.values(), key=lambda e: (-int(e["rows"]), e["domain"]))[:TOP_DOMAINS]
    source = first.get("input", {})
    return {
        "listhygiene_version": first.get("listhygiene_version"),
        "input": {
            "name": split.get("source", source.get("name")),
            "kind": split.get("kind", source.get("kind")),
            "encoding": split.get("encoding"),
            "delimiter": split.get("delimiter"),
            "email_column": split.get("email_column", source.get("email_column")),
            "rows": expected_rows,
            "bad_records": list(split.get("bad_records", [])),
            "chunks": len(parts),
        },
        "merged_from": [p["output"]["folder"] for p in parts],
        "output": {
            "folder": out,
            "files": {s: {"path": f"{s}.parquet", "rows": file_rows[s]} for s in STATUSES},
        },
        "backend": dict(first.get("backend", {})),
        "rows": {
            "total": sum(int(p["rows"]["total"]) for p in parts),
            "by_status": {s: int(by_status.get(s, 0)) for s in STATUSES},
            "by_reason": dict(sorted(by_reason.items())),
            "empty_email": empty,
        },
        "addresses": {
            **dict(addresses),
            "resumed": any((p.get("addresses") or {}).get("resumed") for p in parts),
        },
        "credits": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in credits.items()},
        "top_domains": top,
        "timings": {
            "started_at": min((s for s in starts if s), default=None),
            "finished_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            # the chunks' phases added up: work done on all workers, not wall time
            "seconds": {k: round(v, 3) for k, v in phases.items()},
        },
        "health": {**health, "accepted": bool(health["problem"])},
        "verdicts": {k: int(verdicts.get(k, 0)) for k in ("reused", "verified", "changed")},
        # sessions, limits met and bans added up; the most at once to one host, the largest
        "politeness": run_politeness(*(part.get("politeness") for part in parts)),
    }


def _merged_health(healths: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The chunks' domain counts added up, judged by the engine's own rule
    (:class:`listhygiene.engine.health.RunHealth`)."""
    from listhygiene.engine.health import RunHealth

    total = RunHealth()
    for health in healths:
        for name in ("domains_probed", "domains_reached", "domains_unreachable", "domains_blocked"):
            setattr(total, name, getattr(total, name) + int((health or {}).get(name) or 0))
    return total.as_dict()

"""A list in chunks: split it by domain for runs on several workers, merge their outputs into the
folder one run writes (docs/pipeline.md, "Chunks").

**Split by domain.** Every address of a domain goes to one chunk, so each mail host is probed by
one run only and sees no more SMTP sessions than a single run would open (a split by address
hash sends every domain to every chunk: each chunk's run opens its own sessions, and a host's
sessions multiply by the number of chunks). Domains are placed by their expected SMTP sessions
(their rows over ``rcpt_per_session``, at least one), most first, each on the chunk with the
fewest sessions so far (then the fewest rows). Rows with no domain (blank or broken cells) follow
their cell's text, so one bad address is not charged twice. The source is read twice: once to
count rows per domain, once to write the chunks. Each chunk is a Parquet file with the input's
columns and :data:`ROW_COLUMN`, the input's 1-based row number.

**Giant domains.** Without a shared limit a domain larger than an even share of the rows stays
whole: its chunk is larger than the others, which costs time, not politeness. When the chunk
runs share one politeness budget (``shared_limits``, docs/deploy.md "One budget for the fleet"),
the fleet holds no more sessions to a host than one run would, so such a domain is cut into as
many pieces as even shares it holds (at most one a chunk), each on a different chunk; an
address goes to the piece of its text's hash, so a repeated address stays in one chunk and is
verified once.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.layout import (
    CHANGED,
    ROW_COLUMN,
    SPLIT_MANIFEST,
    STATUSES,
    SUMMARY,
    status_file,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs

    from listhygiene.pipeline.outputs import OutputFolder
    from listhygiene.pipeline.quality import QualityWorker

log = logging.getLogger(__name__)

__all__ = ["ROW_COLUMN", "SPLIT_MANIFEST", "merge_chunks", "plan_chunks", "split_by_domain"]

#: Rows per batch while splitting and merging.
BATCH_ROWS = 65_536


def plan_chunks(
    domain_rows: Mapping[str, int],
    chunks: int,
    *,
    per_session: int = 1,
    split_giants: bool = False,
) -> dict[str, tuple[int, ...]]:
    """Each domain's chunks (0 to ``chunks - 1``): one, or with ``split_giants`` one a piece of
    a domain holding more than an even share of the rows. Pieces and domains are placed by
    expected sessions (rows over ``per_session``, at least one), most first, each on the chunk
    with the fewest sessions so far, then the fewest rows (ties: the lower chunk); a domain's
    pieces go to different chunks. Deterministic for the same counts."""
    if chunks < 1:
        raise ValueError("chunks must be 1 or more")
    if per_session < 1:
        raise ValueError("per_session must be 1 or more")
    share = max(1, -(-sum(domain_rows.values()) // chunks))
    units: list[tuple[int, int, str]] = []  # (sessions, rows, domain), one a piece
    for domain, rows in domain_rows.items():
        pieces = min(chunks, -(-rows // share)) if split_giants else 1
        for piece in range(pieces):
            part = rows // pieces + (1 if piece < rows % pieces else 0)
            units.append((max(1, -(-part // per_session)), part, domain))
    units.sort(key=lambda unit: (-unit[0], -unit[1], unit[2]))
    loads = [(0, 0, index) for index in range(chunks)]
    plan: dict[str, list[int]] = {}
    for sessions, rows, domain in units:
        taken = plan.setdefault(domain, [])
        skipped = []
        load = heapq.heappop(loads)
        while load[2] in taken:  # a piece of this domain is there already
            skipped.append(load)
            load = heapq.heappop(loads)
        taken.append(load[2])
        heapq.heappush(loads, (load[0] + sessions, load[1] + rows, load[2]))
        for other in skipped:
            heapq.heappush(loads, other)
    return {domain: tuple(places) for domain, places in plan.items()}


def split_by_domain(
    source: "str | os.PathLike[str]",
    folder: "str | os.PathLike[str]",
    *,
    chunks: int,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    shared_limits: str | None = None,
) -> list[str]:
    """Write ``source`` as up to ``chunks`` Parquet files in ``folder``, every domain in one
    file; return their paths. :data:`SPLIT_MANIFEST` beside them says what was split.

    ``shared_limits`` is the store the chunk runs will share (``--shared-limits``; None: the
    ``LISTHYGIENE_SHARED_LIMITS`` of the environment): with one, a domain holding more than an
    even share of the rows is split across chunks. A chunk that would be empty is not written.
    The same input gives the same files, so a retried split is harmless. Input errors are
    :class:`~listhygiene.errors.InputError`, as ``clean`` raises them.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from listhygiene.engine.settings import EngineSettings
    from listhygiene.pipeline.sources import open_source
    from listhygiene.pipeline.sources.columns import find_email_column

    if chunks < 1:
        raise ValueError("chunks must be 1 or more")
    settings = EngineSettings() if shared_limits is None else None
    shared = settings.shared_limits if settings is not None else shared_limits
    split_giants = bool(shared) and str(shared).strip().lower() != "none"
    per_session = (settings or EngineSettings()).rcpt_per_session
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
    plan = plan_chunks(domain_rows, chunks, per_session=per_session, split_giants=split_giants)
    placing = _Placing.of(plan)

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
            which = placing.chunks_of(batch.column(index), chunks)
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
        "split_domains": {d: len(places) for d, places in plan.items() if len(places) > 1},
        "chunks": paths,
    }
    (target / SPLIT_MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
    return paths


def _domains(cells: "pa.Array") -> "pa.Array":
    """The domain of each cell's address as ``clean`` reads it (after its last ``@``); null
    where the cell holds none."""
    from listhygiene.email_cells import clean_cells

    return _domains_of(clean_cells(cells))


def _domains_of(text: "pa.Array") -> "pa.Array":
    """The domains of cleaned cells (:func:`~listhygiene.email_cells.clean_cells`)."""
    import pyarrow.compute as pc

    found = pc.extract_regex(text, r"@(?P<domain>[^@\s]+)$")
    return pc.struct_field(found, "domain")


class _Placing:
    """A plan as arrays: each known domain's first piece's place in a flat list of chunks and
    its number of pieces."""

    def __init__(self, known: "pa.Array", first: "Any", pieces: "Any", places: "Any") -> None:
        self.known, self.first, self.pieces, self.places = known, first, pieces, places

    @classmethod
    def of(cls, plan: Mapping[str, tuple[int, ...]]) -> "_Placing":
        import numpy as np
        import pyarrow as pa

        pieces = np.array([len(p) for p in plan.values()], dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(pieces)[:-1]]).astype(np.int64)
        places = np.array([c for p in plan.values() for c in p], dtype=np.int64)
        return cls(pa.array(list(plan), pa.string()), first, pieces, places)

    def chunks_of(self, cells: "pa.Array", chunks: int) -> "Any":
        """Each row's chunk, as a numpy array: its domain's, or its piece's by a hash of its
        text for a split domain; a hash of its text without a domain."""
        import numpy as np
        import pyarrow.compute as pc

        from listhygiene.email_cells import clean_cells

        text = clean_cells(cells)
        at = pc.index_in(_domains_of(text), value_set=self.known)
        found = pc.fill_null(at, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        known = found >= 0
        placed = np.full(len(found), -1, dtype=np.int64)
        pieces = np.ones(len(found), dtype=np.int64)
        pieces[known] = self.pieces[found[known]]
        hashed = (pieces > 1) | ~known
        piece = np.zeros(len(found), dtype=np.int64)
        if hashed.any():
            piece[hashed] = _hashes(text, hashed)
        placed[known] = self.places[self.first[found[known]] + piece[known] % pieces[known]]
        placed[~known] = piece[~known] % chunks
        return placed


def _hashes(text: "pa.Array", rows: "Any") -> "Any":
    """A stable hash of each chosen row's text (null: empty), as non-negative int64."""
    import numpy as np
    import pandas as pd
    import pyarrow.compute as pc

    cells = pc.fill_null(text, "").to_numpy(zero_copy_only=False).astype(object)[rows]
    return (pd.util.hash_array(cells) >> np.uint64(1)).astype(np.int64)


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
    from listhygiene.errors import UnreachableError
    from listhygiene.pipeline.outputs import OutputFolder
    from listhygiene.pipeline.publish import publish
    from listhygiene.pipeline.quality import check_outputs
    from listhygiene.pipeline.summary import merged_health, merged_summary

    started = time.perf_counter()
    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    parts = [_chunk_summary(chunk) for chunk in chunks]
    if not parts:
        raise ValueError("nothing to merge: no chunk summaries")
    split = _manifest(manifest)
    health = merged_health(part.get("health") for part in parts)
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
            status: _merge_file(sources, status_file(status), folder, numbers=True)
            for status in STATUSES
        }
        changed = [s for s in sources if _exists(s.fs, s.final(CHANGED))]
        changed_rows = _merge_file(changed, CHANGED, folder) if changed else None
        summary = merged_summary(parts, split, folder.url, expected_rows, file_rows, health)
        if changed_rows is not None:
            summary["verdict_store"] = {"changed_file": {"path": CHANGED, "rows": changed_rows}}
        report = check_outputs(
            {s: folder.staged(status_file(s)) for s in STATUSES},
            expected_rows=expected_rows,
            summary_rows=summary["rows"]["by_status"],
            row_numbers={s: folder.staged(_numbers_file(s)) for s in STATUSES},
            filesystem=folder.fs,
            worker=worker,
        )
        summary["quality"] = {**report.as_dict(), "mode": quality}
        summary["timings"]["seconds"]["merge"] = round(time.perf_counter() - started, 3)
        publish(
            folder,
            summary,
            report,
            quality_mode=quality,
            changed=changed_rows is not None,
            checks="data-quality checks of the merged output",
        )
    except BaseException:
        folder.discard()
        raise
    return summary


def _chunk_summary(chunk: "Mapping[str, Any] | str | os.PathLike[str]") -> dict[str, Any]:
    """A chunk run's summary, given or read from its output folder's ``summary.json``."""
    if isinstance(chunk, Mapping):
        return dict(chunk)
    from listhygiene.pipeline.outputs import OutputFolder

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

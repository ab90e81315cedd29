"""The column copy of a SQLite verdict store: its verdicts in a memory-mapped Arrow file.

A nightly run looks most of its list up. SQLite finds 680,000 keys in about 2 s, most of it
spent turning rows into Python objects. The copy holds the same columns in key order, each key
as two unsigned 64-bit integers, so a lookup is a binary search in numpy and a take in Arrow
(docs/pipeline.md, "Verdict store speed").

The database stays the only truth. The copy records the store's revision (raised by every save)
and generation (changed by every prune and forget) as of its making. A lookup adds the rows
saved since (``revision > R``, indexed), and a copy of another generation is not used. A run
brings the copy up to date after its last save (``VerdictStore.refresh_copy``). A store of more
than :data:`COPY_LIMIT` verdicts has no copy: the mapped file would count in a run's memory.

A key whose first 64 bits another key of the copy shares may be missed; its address is then
verified again (never given a wrong verdict). With 2,500,000 keys the odds are below one in a
million.
"""

import logging
import os
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["COPY_LIMIT", "SUFFIX", "ColumnCopy", "digests_as_keys", "look_up"]

log = logging.getLogger(__name__)

#: The most verdicts a store's copy holds (~135 MB mapped); a bigger store is looked up in SQL.
#: A run's lookups touch every page of the copy, which counts in its memory: at 4,900,000
#: verdicts a nightly run peaked at 1,078-1,097 MiB with a copy, 848-910 MiB without, and at
#: 2,450,000 at 828-863 MiB with one (docs/pipeline.md, "Verdict store speed").
COPY_LIMIT = 2_500_000
#: The copy's file: the SQLite file's name with this after it.
SUFFIX = ".columns"
_FORMAT = b"1"
#: The stored columns (``store._FETCHED`` without the key) and their types in the copy.
_TYPES = {
    "status": "int16",
    "reason": "int16",
    "flags": "int16",
    "score": "float64",
    "domain_id": "int32",
    "response_time": "int32",
    "credits_used": "int16",
    "dns": "int16",
    "mailbox": "int16",
    "undetermined_reason": "int16",
    "checked_at": "float64",
}


def digests_as_keys(digests: bytes) -> tuple["np.ndarray", "np.ndarray"]:
    """16-byte digests end to end as the copy's key halves (big-endian, so that their order is
    the digests' order, and the hex keys' order in SQL)."""
    import numpy as np

    if not digests:
        empty = np.zeros(0, np.uint64)
        return empty, empty
    halves = np.frombuffer(digests, dtype=">u8").reshape(-1, 2)
    return halves[:, 0].astype(np.uint64), halves[:, 1].astype(np.uint64)


@dataclass(frozen=True)
class ColumnCopy:
    """Stored verdicts in key order (``table``: ``key_hi``, ``key_lo`` and :data:`_TYPES`), as of
    the store's ``revision`` in its ``generation``."""

    table: "pa.Table"
    revision: int
    generation: str

    @cached_property
    def hi(self) -> "np.ndarray":
        return _halves(self.table, "key_hi")

    @cached_property
    def lo(self) -> "np.ndarray":
        return _halves(self.table, "key_lo")

    @classmethod
    def from_rows(
        cls, columns: Mapping[str, "pa.Array"], *, revision: int, generation: str
    ) -> "ColumnCopy":
        """A copy of fetched rows (``store._FETCHED`` columns, hex keys), in key order."""
        import numpy as np
        import pyarrow as pa

        keys = columns["key"]
        raw = bytes.fromhex("".join(keys.to_pylist())) if len(keys) else b""
        halves = np.frombuffer(raw, dtype=">u8").reshape(-1, 2).astype(np.uint64)
        order = np.lexsort((halves[:, 1], halves[:, 0]))
        data = {"key_hi": pa.array(halves[order, 0]), "key_lo": pa.array(halves[order, 1])}
        take = pa.array(order, pa.int64())
        for name, kind in _TYPES.items():
            data[name] = columns[name].take(take).cast(kind)
        return cls(pa.table(data), revision, generation)

    @classmethod
    def joined(cls, parts: "list[ColumnCopy]", *, revision: int, generation: str) -> "ColumnCopy":
        """One copy of ``parts`` (no key in two of them), in key order; ``parts`` is emptied."""
        import numpy as np
        import pyarrow as pa

        both = pa.concat_tables([part.table for part in parts]).combine_chunks()
        del parts[:]  # each part's columns go as soon as they are copied into ``both``
        order = np.lexsort((_halves(both, "key_lo"), _halves(both, "key_hi")))
        return cls(both.take(pa.array(order)), revision, generation)

    @classmethod
    def open(cls, path: Path) -> "ColumnCopy | None":
        """The copy in ``path``, memory-mapped; None when there is none or it cannot be read."""
        import pyarrow as pa

        try:
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("the verdict store's column copy %s is not used: %s", path, exc)
            return None
        meta = table.schema.metadata or {}
        if meta.get(b"format") != _FORMAT or set(table.column_names) != {
            "key_hi",
            "key_lo",
            *_TYPES,
        }:
            log.warning("the verdict store's column copy %s is not used: another format", path)
            return None
        return cls(
            table.replace_schema_metadata(None),
            int(meta[b"revision"]),
            meta[b"generation"].decode(),
        )

    @classmethod
    def write_parts(
        cls,
        path: Path,
        parts: Iterable["ColumnCopy"],
        *,
        revision: int,
        generation: str,
        unchanged: Callable[[], bool],
    ) -> "ColumnCopy | None":
        """Write a copy made of ``parts``, each in key order and after the one before, a part
        at a time, whole or not at all (a file of this process, then a rename: other processes
        may be reading the one it replaces); the copy, memory-mapped. None, and nothing
        written, when ``unchanged()`` says otherwise once every part is written (the store was
        pruned or forgotten meanwhile). Raises :class:`ValueError` on a part out of key order."""
        import pyarrow as pa

        schema = cls.from_rows(_no_rows(), revision=revision, generation=generation).table.schema
        schema = schema.with_metadata(_metadata(revision, generation))
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        last: tuple[int, int] | None = None
        try:
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as out:
                for part in parts:
                    if not part.table.num_rows:
                        continue
                    first = (int(part.hi[0]), int(part.lo[0]))
                    if last is not None and first <= last:
                        raise ValueError("the store's rows did not come in key order")
                    out.write_table(part.table.cast(schema))
                    last = (int(part.hi[-1]), int(part.lo[-1]))
            if not unchanged():
                return None
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return cls.open(path)

    def find(self, hi: "np.ndarray", lo: "np.ndarray") -> "np.ndarray":
        """Each key's row in the copy, or -1."""
        import numpy as np

        found = np.full(len(hi), -1, np.int64)
        keys, rows = self.matches(hi, lo)
        found[keys] = rows
        return found

    def matches(self, hi: "np.ndarray", lo: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
        """The keys found (their indices in ``hi``/``lo``) and their rows in the copy, in the
        copy's order. The keys are searched in order: each search then reads the pages near
        the last one's, and the rows are taken in order (a fifth of the time of searching and
        taking in the order the hashes come; docs/pipeline.md, "Nightly reruns")."""
        import numpy as np

        mine_hi, mine_lo = self.hi, self.lo
        if not len(mine_hi) or not len(hi):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        order = np.argsort(hi)
        hi, lo = hi[order], lo[order]
        at = np.searchsorted(mine_hi, hi)
        inside = at < len(mine_hi)
        at = np.where(inside, at, 0)
        hit = inside & (mine_hi[at] == hi) & (mine_lo[at] == lo)
        return order[hit].astype(np.int64), at[hit].astype(np.int64)

    def merged_parts(
        self, newer: "ColumnCopy", rows: int = 65_536
    ) -> Generator["ColumnCopy", None, None]:
        """This copy with ``newer``'s rows in place of its own (rows saved since), in key
        order, about ``rows`` of this copy at a time with the rows of ``newer`` that fall
        among them: what :meth:`write_parts` writes without holding the merged copy."""
        import numpy as np
        import pyarrow as pa

        mine_hi, mine_lo = self.hi, self.lo
        new_hi, new_lo = newer.hi, newer.lo
        replaced = newer.find(mine_hi, mine_lo) >= 0
        taken = 0  # newer's rows already given
        for start in range(0, max(len(mine_hi), 1), rows):
            end = min(start + rows, len(mine_hi))
            if end < len(mine_hi):  # newer's rows before this copy's row ``end``
                upto = int(np.searchsorted(new_hi, mine_hi[end], side="left"))
                while (
                    upto < len(new_hi)
                    and new_hi[upto] == mine_hi[end]
                    and new_lo[upto] < mine_lo[end]
                ):
                    upto += 1  # the same first half: the second decides
            else:
                upto = len(new_hi)
            kept = self.table.slice(start, end - start).filter(pa.array(~replaced[start:end]))
            both = pa.concat_tables([kept, newer.table.slice(taken, upto - taken)])
            both = both.combine_chunks()
            taken = upto
            order = np.lexsort((_halves(both, "key_lo"), _halves(both, "key_hi")))
            yield ColumnCopy(both.take(pa.array(order)), newer.revision, self.generation)

    def rows(self, at: "np.ndarray") -> dict[str, "pa.Array"]:
        """The stored columns of rows ``at`` (no key), typed as fetched from SQL."""
        import pyarrow as pa

        picked = self.table.take(pa.array(at, pa.int64()))
        return {
            name: picked.column(name)
            .combine_chunks()
            .cast(pa.float64() if kind == "float64" else pa.int64())
            for name, kind in _TYPES.items()
        }


def _metadata(revision: int, generation: str) -> dict[bytes, bytes]:
    return {
        b"format": _FORMAT,
        b"revision": str(revision).encode(),
        b"generation": generation.encode(),
    }


def _no_rows() -> dict[str, "pa.Array"]:
    """The columns ``from_rows`` takes, without a row."""
    import pyarrow as pa

    kinds = {"float64": pa.float64()}
    return {
        "key": pa.array([], pa.string()),
        **{name: pa.array([], kinds.get(kind, pa.int64())) for name, kind in _TYPES.items()},
    }


def _halves(table: "pa.Table", name: str) -> "np.ndarray":
    import numpy as np

    column = table.column(name)
    data = column.chunk(0) if column.num_chunks == 1 else column  # one chunk: no copy
    return np.asarray(data.to_numpy(), np.uint64)


def look_up(
    copy: ColumnCopy, since: ColumnCopy, hi: "np.ndarray", lo: "np.ndarray"
) -> tuple["pa.Array", dict[str, "pa.Array"]]:
    """The stored columns of the keys found, a row saved since the copy over the copy's own,
    and each found row's key as its index in ``hi``/``lo``."""
    import numpy as np
    import pyarrow as pa

    from_since, since_rows = since.matches(hi, lo)
    from_copy, copy_rows = copy.matches(hi, lo)
    if len(from_since):  # a row saved since stands over the copy's own
        newer = np.zeros(len(hi), np.bool_)
        newer[from_since] = True
        older = ~newer[from_copy]
        from_copy, copy_rows = from_copy[older], copy_rows[older]
    parts = [copy.rows(copy_rows), since.rows(since_rows)]
    columns = {name: pa.concat_arrays([part[name] for part in parts]) for name in parts[0]}
    return pa.array(np.concatenate([from_copy, from_since]), pa.int64()), columns

"""The work folder's tables, queried out of core: distinct addresses, what is left to verify,
the latest result of each address, and those results joined back onto every row.

docs/pipeline.md, "Memory": a run's memory must not grow with its row count, so nothing with a
row per input row or per distinct address is ever held whole in Python. DuckDB reads the Parquet
parts of the work folder (:mod:`listhygiene.pipeline.workdir`) within :data:`MEMORY_LIMIT`,
spilling to ``spill/`` inside the work folder beyond it, and hands Python bounded batches.

Files it keeps in the work folder (each written whole, then renamed, so a killed run leaves
none half-written): ``distinct.parquet`` (every distinct address, in order of first appearance)
and ``pending.parquet`` (the distinct addresses without a result yet).
"""

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.workdir import ADDRESS, ROW, VERIFIED_AT, WorkDir
from listhygiene.results import FORM_A_FIELDS
from listhygiene.statuses import Status

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MEMORY_LIMIT", "PENDING", "PROFILE_FIELDS", "Joined", "WorkTables"]

#: DuckDB's share of the run's memory; what is over it spills to disk (docs/pipeline.md).
MEMORY_LIMIT = os.environ.get("LISTHYGIENE_WORK_MEMORY", "384MB")
#: The result columns shared by many addresses (a domain's facts, a status and its reason): the
#: join carries a small integer naming their combination instead of the columns themselves.
PROFILE_FIELDS = (
    *(f for f in FORM_A_FIELDS if f not in ("email", "response_time")),
    "mx_provider",  # a domain's fact too (pipeline/advice.py)
)
_DISTINCT = "distinct.parquet"
PENDING = "pending.parquet"


@dataclass(frozen=True)
class Joined:
    """The results joined back onto every row, in row order (see :meth:`WorkTables.joined`)."""

    #: Batches of ``_row``, ``email`` (null where it is the row's address), ``response_time``,
    #: ``profile`` (null for a row without an address), ``previous_status`` and
    #: ``previous_checked_at`` (null unless the address changed status since its stored verdict).
    batches: Iterator["pa.RecordBatch"]
    #: One row per profile, in profile order: the :data:`PROFILE_FIELDS` columns.
    profiles: "pa.Table"


class WorkTables:
    """DuckDB over one run's work folder; :meth:`close` it (it removes what spilled)."""

    def __init__(self, work: WorkDir, *, memory_limit: str = MEMORY_LIMIT) -> None:
        import duckdb

        self.work = work
        self.spill = work.path / "spill"
        self.db = duckdb.connect(
            config={
                "memory_limit": memory_limit,
                "temp_directory": str(self.spill),
                "threads": max(1, os.cpu_count() or 1),
                "preserve_insertion_order": False,
            }
        )

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.spill, ignore_errors=True)

    def __enter__(self) -> "WorkTables":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- distinct addresses and what is left to verify -----------------------------------------

    def distinct(self) -> int:
        """Write ``distinct.parquet`` (once per run: a resumed run reuses it); its length."""
        path = self.work.path / _DISTINCT
        if not path.exists():
            rows = self._parts("rows")
            query = (
                f"SELECT {ADDRESS} FROM {rows} WHERE {ADDRESS} IS NOT NULL "
                f"GROUP BY {ADDRESS} ORDER BY min({ROW})"
                if rows
                else f"SELECT NULL::VARCHAR AS {ADDRESS} WHERE false"
            )
            self._copy(query, path)
        return self.count(_DISTINCT)

    def pending(self) -> int:
        """Write ``pending.parquet``: the distinct addresses without a result yet, in their
        order; its length."""
        results = self._parts("results")
        distinct = _literal(self.work.path / _DISTINCT)
        query = (
            f"SELECT {ADDRESS}, file_row_number "
            f"FROM read_parquet({distinct}, file_row_number=true) d"
        )
        if results:
            query += (
                f" WHERE NOT EXISTS (SELECT 1 FROM {results} r WHERE r.{ADDRESS} = d.{ADDRESS})"
            )
        # sorted again: the anti-join does not keep the order of first appearance
        self._copy(
            f"SELECT {ADDRESS} FROM ({query}) ORDER BY file_row_number", self.work.path / PENDING
        )
        return self.count(PENDING)

    def addresses(self, name: str, size: int) -> Iterator["pa.Array"]:
        """The addresses of ``distinct.parquet`` or ``pending.parquet`` in arrays of ``size``
        (the last shorter)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        held: list[pa.Array] = []
        count = 0
        with pq.ParquetFile(self.work.path / name) as file:
            for batch in file.iter_batches(batch_size=size, columns=[ADDRESS]):
                held.append(batch.column(0))
                count += len(batch)
                while count >= size:
                    joined = pa.concat_arrays(held)
                    yield joined.slice(0, size)
                    rest = joined.slice(size)
                    held, count = ([rest] if len(rest) else []), len(rest)
        if count:
            yield pa.concat_arrays(held)

    def count(self, name: str) -> int:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(self.work.path / name).num_rows)

    # -- results -----------------------------------------------------------------------------

    def unanswered(self) -> tuple[int, str | None]:
        """How many distinct addresses have no result, and one of them."""
        results = self._parts("results")
        distinct = f"read_parquet({_literal(self.work.path / _DISTINCT)})"
        if not results:
            row = self.db.execute(f"SELECT count(*), min({ADDRESS}) FROM {distinct}").fetchone()
        else:
            row = self.db.execute(
                f"SELECT count(*), min(d.{ADDRESS}) FROM {distinct} d WHERE NOT EXISTS "
                f"(SELECT 1 FROM {results} r WHERE r.{ADDRESS} = d.{ADDRESS})"
            ).fetchone()
        assert row is not None
        return int(row[0]), row[1]

    def credits(self) -> int:
        """Credits of the latest result of each of the run's addresses: one per distinct
        address verified, whatever its row count (PRODUCT.md, "Credits")."""
        latest = self._latest()
        if latest is None:
            return 0
        distinct = f"read_parquet({_literal(self.work.path / _DISTINCT)})"
        row = self.db.execute(
            f"SELECT coalesce(sum(l.credits_used), 0) FROM ({latest}) l "
            f"SEMI JOIN {distinct} d ON l.{ADDRESS} = d.{ADDRESS}"
        ).fetchone()
        return int(row[0]) if row else 0

    def latest_where(self, condition: str, columns: str) -> "pa.Table":
        """``columns`` of the latest results that meet ``condition`` (SQL over the result
        columns); for the few rows a second pass needs, never for all."""
        latest = self._latest()
        if latest is None:
            import pyarrow as pa

            return pa.table({})
        return self.db.sql(f"SELECT {columns} FROM ({latest}) WHERE {condition}").to_arrow_table()

    def joined(self, previous: Path | None, batch_rows: int) -> Joined:
        """The latest result of every row's address, in row order, as narrow batches: the
        join carries a profile number, the address's own email when it differs from the
        row's address, and its response time (docs/pipeline.md, "Memory"). ``previous`` (a
        folder of Parquet parts of ``_address``, ``status``, ``checked_at``: the stored
        verdicts of addresses verified again) adds the previous status of the addresses whose
        status changed (an ``unknown`` now is no change)."""
        import pyarrow as pa

        from listhygiene.results import arrow_schema

        latest = self._latest()
        schema = arrow_schema(internal=True)
        rows = self._parts("rows")
        if not rows:
            empty = pa.schema([schema.field(f) for f in PROFILE_FIELDS]).empty_table()
            return Joined(iter(()), empty)
        if latest is None:  # no address at all: every row is blank
            no_results = arrow_schema(internal=True).empty_table()
            no_results = no_results.add_column(0, ADDRESS, pa.array([], pa.string()))
            self.db.register("no_results", no_results)
            latest = "SELECT * FROM no_results"
        columns = ", ".join(f'"{f}"' for f in PROFILE_FIELDS)
        self.db.execute(f"CREATE OR REPLACE TEMP TABLE latest AS {latest}")
        self.db.execute(
            "CREATE OR REPLACE TEMP TABLE profiles AS SELECT (row_number() OVER () - 1)::INTEGER "
            f"AS profile, * FROM (SELECT DISTINCT {columns} FROM latest)"
        )
        same = " AND ".join(f'l."{f}" IS NOT DISTINCT FROM p."{f}"' for f in PROFILE_FIELDS)
        previous_parts = _parts_of(previous) if previous is not None else []
        if previous_parts:
            # what the first attempt of a resumed run found stands: the earliest part per address
            before = (
                f"(SELECT {ADDRESS}, arg_min(status, filename) AS status, "
                f"arg_min(checked_at, filename) AS checked_at FROM "
                f"read_parquet({_literal(previous_parts)}, filename=true) GROUP BY {ADDRESS})"
            )
            unknown = _literal(Status.UNKNOWN.value)
            changed = f"b.status IS NOT NULL AND l.status <> b.status AND l.status <> {unknown}"
            extra = (
                f", CASE WHEN {changed} THEN b.status END AS previous_status, "
                f"CASE WHEN {changed} THEN b.checked_at END AS previous_checked_at"
            )
            join_before = f" LEFT JOIN {before} b ON b.{ADDRESS} = l.{ADDRESS}"
        else:
            extra = ", NULL::VARCHAR AS previous_status, NULL::DOUBLE AS previous_checked_at"
            join_before = ""
        self.db.execute(
            f"CREATE OR REPLACE TEMP TABLE keyed AS SELECT l.{ADDRESS}, "
            f"CASE WHEN l.email = l.{ADDRESS} THEN NULL ELSE l.email END AS email, "
            f"l.response_time, p.profile{extra} FROM latest l "
            f"JOIN profiles p ON {same}{join_before}"
        )
        self.db.execute("DROP TABLE latest")
        self.db.execute(
            "CREATE OR REPLACE TEMP TABLE transitions AS SELECT k.previous_status, p.status, "
            "count(*) AS n FROM keyed k JOIN profiles p USING (profile) "
            "WHERE k.previous_status IS NOT NULL GROUP BY ALL"
        )
        profiles = self.db.sql(f"SELECT {columns} FROM profiles ORDER BY profile").to_arrow_table()
        profiles = profiles.cast(pa.schema([schema.field(f) for f in PROFILE_FIELDS]))
        # The join, then the sort, each alone within the memory limit: together (a hash table
        # of every distinct address feeding a sort of every row) they ran out of memory at
        # 10,000,000 rows (docs/pipeline.md, "Memory").
        self.db.execute(
            f"CREATE OR REPLACE TEMP TABLE matched AS SELECT r.{ROW}, k.email, k.response_time, "
            f"k.profile, k.previous_status, k.previous_checked_at FROM {rows} r "
            f"LEFT JOIN keyed k ON r.{ADDRESS} = k.{ADDRESS}"
        )
        self.db.execute("DROP TABLE keyed")
        reader = self.db.sql(f"SELECT * FROM matched ORDER BY {ROW}").to_arrow_reader(batch_rows)
        return Joined(iter(reader), profiles)

    def common_domains(self) -> list[str]:
        """The rows' most common domains, most common first (pipeline/advice.py)."""
        from listhygiene.pipeline.advice import common_domains

        rows = self._parts("rows")
        return common_domains(self.db, rows) if rows else []

    def transitions(self) -> dict[str, int]:
        """``previous->now`` counts of the addresses whose status changed (after :meth:`joined`)."""
        found = self.db.execute(
            "SELECT previous_status, status, n FROM transitions ORDER BY 3 DESC, 1, 2"
        ).fetchall()
        return {f"{before}->{after}": int(n) for before, after, n in found}

    # -- helpers -------------------------------------------------------------------------------

    def _latest(self) -> str | None:
        """The latest result of each address (a retried address has several)."""
        results = self._parts("results")
        if not results:
            return None
        return (
            f"SELECT * FROM {results} QUALIFY row_number() OVER "
            f"(PARTITION BY {ADDRESS} ORDER BY {VERIFIED_AT} DESC) = 1"
        )

    def _parts(self, kind: str) -> str:
        """``read_parquet([...])`` of the work folder's parts of ``kind``; "" when none."""
        parts = _parts_of(self.work.path / kind)
        if not parts:
            return ""
        return f"read_parquet({_literal(parts)}, union_by_name=true)"

    def _copy(self, query: str, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        self.db.execute(
            f"COPY ({query}) TO {_literal(tmp)} (FORMAT parquet, COMPRESSION zstd, "
            "ROW_GROUP_SIZE 262144)"
        )
        tmp.replace(path)


def _parts_of(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet"))


def _literal(value: Any) -> str:
    """A SQL string literal, or a list of them, for DuckDB."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"

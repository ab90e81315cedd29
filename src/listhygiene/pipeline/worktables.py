"""The work folder's tables, queried out of core: distinct addresses, what is left to verify,
the latest result of each address, and those results joined back onto every row.

docs/pipeline.md, "Memory": a run's memory must not grow with its row count, so nothing with a
row per input row or per distinct address is ever held whole in Python. DuckDB reads the Parquet
parts of the work folder (:mod:`listhygiene.pipeline.workdir`) within :data:`MEMORY_LIMIT`,
spilling to ``spill/`` inside the work folder beyond it, and hands Python bounded batches. When
DuckDB cannot stay within it, the run stops with one line naming ``LISTHYGIENE_WORK_MEMORY``
(:class:`WorkMemoryError`); a rerun with a larger value resumes.

Files it keeps in the work folder (each written whole, then renamed, so a killed run leaves
none half-written): ``distinct.parquet`` (every distinct address, in order of first appearance)
and ``pending.parquet`` (the distinct addresses without a result yet).
"""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.errors import ConfigurationError, PipelineError, first_line
from listhygiene.pipeline.workdir import ADDRESS, OWN_EMAIL, ROW, VERIFIED_AT, WorkDir
from listhygiene.results import FORM_A_FIELDS
from listhygiene.statuses import Status

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MEMORY_LIMIT",
    "MEMORY_VARIABLE",
    "PENDING",
    "PROFILE_FIELDS",
    "Joined",
    "WorkMemoryError",
    "WorkTables",
    "connect",
]

#: The environment variable that sets :data:`MEMORY_LIMIT`.
MEMORY_VARIABLE = "LISTHYGIENE_WORK_MEMORY"
#: DuckDB's share of the run's memory; what is over it spills to disk (docs/pipeline.md,
#: "Memory": with great-expectations' process beside it, the run's tree stays within 1 GiB).
MEMORY_LIMIT = os.environ.get(MEMORY_VARIABLE, "192MB")
#: DuckDB's threads: one per core, at most two (each thread holds buffers of its own).
THREADS = max(1, min(2, os.cpu_count() or 1))
#: The result columns shared by many addresses (a domain's facts, a status and its reason): the
#: join carries a small integer naming their combination instead of the columns themselves.
PROFILE_FIELDS = (
    *(f for f in FORM_A_FIELDS if f not in ("email", "response_time")),
    "mx_provider",  # a domain's fact too (pipeline/advice.py)
    "evidence",  # what feedback taught, and its flags: few values (verdicts/evidence.py)
    "complained",
    "unsubscribed",
)
_DISTINCT = "distinct.parquet"
PENDING = "pending.parquet"


class WorkMemoryError(PipelineError):
    """DuckDB could not do its part of the run within ``LISTHYGIENE_WORK_MEMORY``."""


@dataclass(frozen=True)
class Joined:
    """The results joined back onto every row, in row order (see :meth:`WorkTables.joined`)."""

    #: Batches of ``_row``, ``profile`` (null for a row without an address, or without a
    #: result), ``response_time``, and where they apply ``email`` (null where it is the row's
    #: address), ``previous_status`` and ``previous_checked_at`` (null unless the address
    #: changed status since its stored verdict).
    batches: Iterator["pa.RecordBatch"]
    #: One row per profile, in profile order: the :data:`PROFILE_FIELDS` columns.
    profiles: "pa.Table"
    #: Credits of the latest result of each distinct address (PRODUCT.md, "Credits").
    credits: int


def connect(spill: Path, memory_limit: str | None = None) -> Any:
    """An in-memory DuckDB connection within ``memory_limit`` (:data:`MEMORY_LIMIT`), spilling
    to ``spill`` beyond it, on at most :data:`THREADS` threads; a limit DuckDB cannot take is a
    :class:`ConfigurationError` naming ``LISTHYGIENE_WORK_MEMORY``."""
    import duckdb

    limit = memory_limit or MEMORY_LIMIT
    try:
        return duckdb.connect(
            config={
                "memory_limit": limit,
                "temp_directory": str(spill),
                "threads": THREADS,
                # nothing here needs the order of a result without ORDER BY
                "preserve_insertion_order": False,
            }
        )
    except duckdb.Error as exc:
        raise ConfigurationError(
            f"{MEMORY_VARIABLE}={limit!r} cannot be used as DuckDB's memory "
            f"limit ({first_line(exc)}); give a size such as 256MB or 1GB"
        ) from None


class WorkTables:
    """DuckDB over one run's work folder; :meth:`close` it (it removes what spilled)."""

    def __init__(self, work: WorkDir, *, memory_limit: str | None = None) -> None:
        self.work = work
        self.spill = work.path / "spill"
        self.memory_limit = memory_limit or MEMORY_LIMIT
        self._db: Any = None
        self._connect()  # a bad limit fails here, before any work

    @property
    def db(self) -> Any:
        """The DuckDB connection, opened again after :meth:`rest`."""
        return self._db if self._db is not None else self._connect()

    def _connect(self) -> Any:
        self._db = connect(self.spill, self.memory_limit)
        return self._db

    def rest(self) -> None:
        """Close the connection until it is needed again: DuckDB gives back the memory its
        queries kept, which the verification meanwhile needs more (docs/pipeline.md,
        "Memory")."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def close(self) -> None:
        self.rest()
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
            with self._memory("finding the distinct addresses"):
                self._copy(query, path)
            self.rest()
        return self.count(_DISTINCT)

    def pending(self) -> int:
        """Write ``pending.parquet``: the distinct addresses without a result yet, in their
        order; its length."""
        results = self._parts("results")
        if not results:  # nothing answered yet: every distinct address (a second, ~1 s at
            # 10,000,000 rows, to write the same file again)
            _same_file(self.work.path / _DISTINCT, self.work.path / PENDING)
            return self.count(PENDING)
        distinct = _literal(self.work.path / _DISTINCT)
        query = (
            f"SELECT {ADDRESS}, file_row_number "
            f"FROM read_parquet({distinct}, file_row_number=true) d "
            f"WHERE NOT EXISTS (SELECT 1 FROM {results} r WHERE r.{ADDRESS} = d.{ADDRESS})"
        )
        # sorted again: the anti-join does not keep the order of first appearance
        with self._memory("finding the addresses left to verify"):
            self._copy(
                f"SELECT {ADDRESS} FROM ({query}) ORDER BY file_row_number",
                self.work.path / PENDING,
            )
        self.rest()
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
        # a cursor of its own: the join's stream may still be open on the connection
        with self._memory("looking for addresses without a result"), self.db.cursor() as db:
            if not results:
                row = db.execute(f"SELECT count(*), min({ADDRESS}) FROM {distinct}").fetchall()
            else:
                row = db.execute(
                    f"SELECT count(*), min(d.{ADDRESS}) FROM {distinct} d WHERE NOT EXISTS "
                    f"(SELECT 1 FROM {results} r WHERE r.{ADDRESS} = d.{ADDRESS})"
                ).fetchall()
        # fetchall: in DuckDB 2 a result read with fetchone stays open and blocks the connection
        return int(row[0][0]), row[0][1]

    def unanswered_error(self) -> PipelineError:
        """The error of a run whose backend left addresses without a result."""
        unanswered, example = self.unanswered()
        return PipelineError(
            f"the backend returned no result for {unanswered} addresses (e.g. "
            f"{example!r}); run again with the same --out to resume"
        )

    def latest_where(self, condition: str, columns: str) -> "pa.Table":
        """``columns`` of the latest results that meet ``condition`` (SQL over the result
        columns); for the few rows a second pass needs, never for all."""
        results = self._parts("results")
        if not results:
            import pyarrow as pa

            return pa.table({})
        latest = (
            f"SELECT * FROM {results} QUALIFY row_number() OVER "
            f"(PARTITION BY {ADDRESS} ORDER BY {VERIFIED_AT} DESC) = 1"
        )
        with self._memory("looking up results"):
            return self.db.sql(
                f"SELECT {columns} FROM ({latest}) WHERE {condition}"
            ).to_arrow_table()

    def joined(self, previous: Path | None, batch_rows: int) -> Joined:
        """The latest result of every row's address, in row order, as narrow batches
        (docs/pipeline.md, "Memory"): a profile number for the result columns that many
        addresses share, the response time, and only where some address needs them the
        address's own email (when it differs from the row's address) and its previous status.
        ``previous`` (a folder of Parquet parts of ``_address``, ``status``, ``checked_at``:
        the stored verdicts of addresses verified again) adds the previous status of the
        addresses whose status changed (an ``unknown`` now is no change).

        A row whose address has no result gets a null profile: the writer stops there with
        :meth:`unanswered_error`."""
        import pyarrow as pa

        from listhygiene.results import arrow_schema

        schema = arrow_schema(internal=True)
        profile_schema = pa.schema([schema.field(f) for f in PROFILE_FIELDS])
        rows = self._parts("rows")
        results = self._parts("results")
        if not rows:
            return Joined(iter(()), profile_schema.empty_table(), 0)
        with self._memory("joining the results onto the rows"):
            if not results:  # no address at all (every row blank), or none answered
                self._transitions: list[tuple[str, str, int]] = []
                reader = self.db.sql(
                    f"SELECT {ROW}, NULL::INTEGER AS profile, NULL::BIGINT AS response_time, "
                    f"NULL::TIMESTAMPTZ AS evidence_at FROM {rows} ORDER BY {ROW}"
                ).to_arrow_reader(batch_rows)
                return Joined(self._guarded(reader), profile_schema.empty_table(), 0)
            extra = self._keyed(results, _stored_before(previous))
            profiles = self.db.sql(
                f"SELECT {_columns(PROFILE_FIELDS)} FROM profiles ORDER BY profile"
            ).to_arrow_table()
            row = self.db.execute(
                "SELECT coalesce(sum(p.credits_used * k.n), 0) FROM (SELECT profile, count(*) "
                "AS n FROM keyed GROUP BY profile) k JOIN profiles p USING (profile)"
            ).fetchall()
            credits = int(row[0][0])
            # The join, then the sort, each alone within the memory limit: together (a hash
            # table of every distinct address feeding a sort of every row) they ran out of
            # memory at 10,000,000 rows (docs/pipeline.md, "Memory").
            carried = ", ".join(
                f"k.{name}" for name in ("profile", "response_time", "evidence_at", *extra)
            )
            self.db.execute(
                f"CREATE OR REPLACE TEMP TABLE matched AS SELECT r.{ROW}, {carried} "
                f"FROM {rows} r LEFT JOIN keyed k ON r.{ADDRESS} = k.{ADDRESS}"
            )
            self.db.execute("DROP TABLE keyed")
            # The sort streams its rows out while the writer holds a part of every column:
            # within half the limit it spills more, for a little more CPU and a smaller peak
            # (a quarter of 192 MB ran out of memory at 10,000,000 rows: docs/pipeline.md,
            # "Memory").
            sort_limit = _fraction(self.memory_limit, 2)
            if sort_limit is not None:
                self.db.execute(f"SET memory_limit = {_literal(sort_limit)}")
            reader = self.db.sql(f"SELECT * FROM matched ORDER BY {ROW}").to_arrow_reader(
                batch_rows
            )
        return Joined(self._guarded(reader), profiles.cast(profile_schema), credits)

    def _keyed(self, results: str, previous: list[Path]) -> list[str]:
        """Temp tables ``profiles`` (each combination of :data:`PROFILE_FIELDS`, numbered) and
        ``keyed`` (each address's latest result: its profile, its response time, and the
        columns named in the answer, which only some addresses need)."""
        self.db.execute(
            "CREATE OR REPLACE TEMP TABLE profiles AS SELECT (row_number() OVER () - 1)::INTEGER "
            f"AS profile, * FROM (SELECT DISTINCT {_columns(PROFILE_FIELDS)} FROM {results})"
        )
        same = " AND ".join(f'r."{f}" IS NOT DISTINCT FROM p."{f}"' for f in PROFILE_FIELDS)
        overrides = self._own_emails()
        email = (
            f", CASE WHEN r.email = r.{ADDRESS} THEN NULL ELSE r.email END AS email"
            if overrides
            else ""
        )
        keyed = (
            f"SELECT r.{ADDRESS}, p.profile, r.response_time, r.evidence_at{email}, "
            f"r.{VERIFIED_AT} "
            f"FROM {results} r JOIN profiles p ON {same}"
        )
        if self._result_rows() != self.count(_DISTINCT):
            # A retried address has several results (the latest stands), or the backend
            # answered addresses the run did not ask: only then is there anything to drop.
            # With as many results as distinct addresses, either each has exactly one or some
            # address has none, which the writer finds (a null profile).
            distinct = f"read_parquet({_literal(self.work.path / _DISTINCT)})"
            keyed = (
                f"SELECT k.* FROM ({keyed}) k SEMI JOIN {distinct} d "
                f"ON k.{ADDRESS} = d.{ADDRESS} QUALIFY row_number() OVER "
                f"(PARTITION BY k.{ADDRESS} ORDER BY k.{VERIFIED_AT} DESC) = 1"
            )
        extra = ["email"] if overrides else []
        if previous:
            # what the first attempt of a resumed run found stands: the earliest part per address
            before = (
                f"(SELECT {ADDRESS}, arg_min(status, filename) AS status, "
                f"arg_min(checked_at, filename) AS checked_at FROM "
                f"read_parquet({_literal(previous)}, filename=true) GROUP BY {ADDRESS})"
            )
            unknown = _literal(Status.UNKNOWN.value)
            changed = f"b.status IS NOT NULL AND p.status <> b.status AND p.status <> {unknown}"
            keyed = (
                f"SELECT k.* EXCLUDE ({VERIFIED_AT}), "
                f"CASE WHEN {changed} THEN b.status END AS previous_status, "
                f"CASE WHEN {changed} THEN b.checked_at END AS previous_checked_at "
                f"FROM ({keyed}) k JOIN profiles p USING (profile) "
                f"LEFT JOIN {before} b ON b.{ADDRESS} = k.{ADDRESS}"
            )
            extra += ["previous_status", "previous_checked_at"]
        else:
            keyed = f"SELECT * EXCLUDE ({VERIFIED_AT}) FROM ({keyed})"
        self.db.execute(f"CREATE OR REPLACE TEMP TABLE keyed AS {keyed}")
        self._transitions = (
            [
                (str(a), str(b), int(n))
                for a, b, n in self.db.execute(
                    "SELECT k.previous_status, p.status, count(*) FROM keyed k JOIN profiles p "
                    "USING (profile) WHERE k.previous_status IS NOT NULL GROUP BY ALL"
                ).fetchall()
            ]
            if previous
            else []
        )
        return extra

    def common_domains(self) -> list[str]:
        """The rows' most common domains, most common first (pipeline/advice.py)."""
        from listhygiene.pipeline.advice import common_domains

        rows = self._parts("rows")
        if not rows:
            return []
        with self._memory("counting the rows' domains"):
            return common_domains(self.db, rows)

    def transitions(self) -> dict[str, int]:
        """``previous->now`` counts of the addresses whose status changed (after :meth:`joined`)."""
        found = sorted(getattr(self, "_transitions", []), key=lambda t: (-t[2], t[0], t[1]))
        return {f"{before}->{after}": n for before, after, n in found}

    # -- helpers -------------------------------------------------------------------------------

    @contextmanager
    def _memory(self, doing: str) -> Iterator[None]:
        """DuckDB's out-of-memory (and a spill it cannot write) as one line naming the setting."""
        import duckdb

        try:
            yield
        except duckdb.OutOfMemoryException as exc:
            raise WorkMemoryError(
                f"out of memory while {doing}: DuckDB could not stay within "
                f"{MEMORY_VARIABLE}={self.memory_limit} ({first_line(exc)}); set "
                f"{MEMORY_VARIABLE} higher (e.g. 1GB) and run again with the same --out to resume"
            ) from None
        except duckdb.IOException as exc:
            raise PipelineError(
                f"DuckDB could not use the work folder {self.work.path} while {doing} "
                f"({first_line(exc)}); free some disk space and run again with the same --out"
            ) from None

    def _guarded(self, reader: Any) -> Iterator["pa.RecordBatch"]:
        """A DuckDB stream whose errors while it is read are :meth:`_memory`'s lines."""
        with self._memory("joining the results onto the rows"):
            yield from reader

    def _result_rows(self) -> int:
        import pyarrow.parquet as pq

        self.work.flush()
        return sum(pq.read_metadata(p).num_rows for p in _parts_of(self.work.path / "results"))

    def _own_emails(self) -> bool:
        """Whether some result's ``email`` differs from its address (each part's metadata
        says; a part without the key counts as yes)."""
        import pyarrow.parquet as pq

        self.work.flush()
        for part in _parts_of(self.work.path / "results"):
            metadata = pq.read_schema(part).metadata or {}
            if metadata.get(OWN_EMAIL, b"1") != b"0":
                return True
        return False

    def _parts(self, kind: str) -> str:
        """``read_parquet([...])`` of the work folder's parts of ``kind``; "" when none (the
        part being written is waited for: pipeline/workdir.py)."""
        self.work.flush()
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


def _same_file(source: Path, target: Path) -> None:
    """``target`` holding what ``source`` holds: a hard link (neither file is written again in
    place: a new ``target`` replaces the link, see ``WorkTables._copy``), or a copy where the
    work folder's filesystem has none."""
    tmp = target.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    tmp.replace(target)


def _parts_of(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.parquet"))


def _stored_before(previous: Path | None) -> list[Path]:
    """The parts of ``previous`` that hold rows. A nightly run whose stored verdicts were all
    fresh has only empty ones, and then no previous status is joined or carried at all (0.4 s
    of its write stage at 1,000,000 rows: docs/pipeline.md, "Verdict store speed")."""
    import pyarrow.parquet as pq

    if previous is None:
        return []
    return [part for part in _parts_of(previous) if pq.read_metadata(part).num_rows]


def _columns(names: tuple[str, ...]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _fraction(limit: str, parts: int) -> str | None:
    """``limit`` (``256MB``, ``1GiB``, ...) divided by ``parts``, in MB; None when it is not a
    size this reads, or the share would be under 16 MB (DuckDB then keeps the limit given)."""
    import re

    units = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?)B?\s*", limit.upper())
    if found is None:
        return None
    number, unit, binary = found.groups()
    size = float(number) * (units[unit] if not binary else 1024.0 ** "KMGT".index(unit) * 1024)
    share = int(size / parts / 1e6)
    return f"{share}MB" if share >= 16 else None


def _literal(value: Any) -> str:
    """A SQL string literal, or a list of them, for DuckDB."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"

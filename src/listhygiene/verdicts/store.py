"""The verdict store: every verdict a run gets, kept so that the next run reuses what is fresh.

PRODUCT.md, "Verdict store". Addresses never reach the database: a row is keyed by a keyed hash
(BLAKE2b with the store's key, 128 bits) of the normalised address, so the store says nothing
about who is on a list to someone who reads it without the key. The key is
``LISTHYGIENE_VERDICTS_PEPPER`` when set (keep it outside the database for that protection to
hold); otherwise one is made at random when the store is created and kept in it, so every
process that shares the store hashes alike. The store remembers a fingerprint of the key, and a
process with another key is refused with a clear error instead of silently reusing nothing.

Everything is set-based and columnar: addresses go in and results come out as Arrow arrays.
Lookups skip the database while the store is empty (a first cleaning). A SQLite store keeps a
column copy of its verdicts (``column_copy.py``), made before a run's big lookups or after a
store's first run, and merged with the rows saved since once they are a tenth of it: lookups
search it, with the rows saved since read from SQL. Without one, SQLite gets
:data:`LOOKUP_BATCH` keys as one JSON parameter, PostgreSQL every key by ``COPY``. Writes are
in key order: on SQLite one prepared upsert executed for every row, with a page cache for the
key index's interior pages (:data:`SQLITE_CACHE_KIB`); on PostgreSQL CSV written by Arrow is
copied into a temporary table and upserted from it in one statement. An upsert never replaces
a newer verdict with an older one (``checked_at`` decides), and writers lock rows in the same
order (no deadlock), so several processes and machines may share one store at once. See
docs/pipeline.md, "Verdict store" and "Verdict store speed".
"""

import hashlib
import io
import itertools
import json
import logging
import os
import secrets
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from listhygiene.db.engine import make_engine, transaction
from listhygiene.statuses import Status
from listhygiene.verdicts.codes import FLAGS, STATUSES, decode, encode
from listhygiene.verdicts.column_copy import (
    COPY_LIMIT,
    SUFFIX,
    ColumnCopy,
    digests_as_keys,
    look_up,
)
from listhygiene.verdicts.hashing import DIGEST, digest_bytes, hashed_ahead
from listhygiene.verdicts.schema import (
    disposable_hosts,
    domains,
    events,
    settings,
    upgrade,
    verdicts,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.dialects.postgresql import Insert as PostgresInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

__all__ = [
    "BATCH",
    "COPY_BUILD_RATIO",
    "COPY_MERGE_SHARE",
    "LOOKUP_BATCH",
    "PEPPER_VARIABLE",
    "SQLITE_CACHE_KIB",
    "SQLITE_PRAGMAS",
    "VerdictStore",
    "VerdictStoreError",
    "default_url",
]

PEPPER_VARIABLE = "LISTHYGIENE_VERDICTS_PEPPER"
#: Names or ids per query of the small lookups (domains, ``forget``), one parameter each.
BATCH = 500
#: Keys per lookup query, sent as one parameter: a statement per 50,000 keys, not per 500.
LOOKUP_BATCH = 50_000
#: A SQLite store without a column copy gets one before a run's lookups when it holds at most
#: this many times the addresses the run looks up (``VerdictStore.refresh_copy``).
COPY_BUILD_RATIO = 4
#: The rows saved since the column copy was made, as a share of the copy, past which a run
#: merges them into it after its last save: below it, merging (~0.3 s at 680,000 verdicts)
#: costs more than reading them through the revision's index at the next lookups (a night's
#: 1 % of new addresses: ~0.05 s).
COPY_MERGE_SHARE = 0.1
#: Rows turned into Python tuples at once when the column copy reads the table.
_ROWS_AT_ONCE = 65_536
#: SQLite's page cache per connection of the store, in KiB (the default is 2 MB): enough for the
#: interior pages of the key's index up to ~10,000,000 verdicts, so that a write reads only the
#: leaf pages its keys fall on. Writes go in key order, each leaf visited once, so a bigger
#: cache bought no measurable time and 64 MB cost ~40 MB more resident memory
#: (docs/pipeline.md, "Verdict store speed").
SQLITE_CACHE_KIB = 16_384
#: Set on every SQLite connection of the store, besides the engine's own (WAL, busy timeout).
#: No ``mmap_size``: mapped pages of the file count in the process's resident memory.
SQLITE_PRAGMAS = (f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}", "PRAGMA temp_store = MEMORY")
#: What the store keeps of a domain rather than of each address, the domain first.
_DOMAIN_FACTS = ("domain", "mx_records", "domain_reputation", "mx_provider")
#: The store's per-address columns, as fetched (codes.py turns them back into results).
_FETCHED = (
    "key",
    "status",
    "reason",
    "flags",
    "score",
    "domain_id",
    "response_time",
    "credits_used",
    "dns",
    "mailbox",
    "undetermined_reason",
    "checked_at",
)
_SAVED = (*_FETCHED[:-1], "backend", "checked_at")
_KEY_FINGERPRINT = "key_fingerprint"
_KEY = "key"
#: PostgreSQL: the session's temporary table that a save copies its rows into.
_INCOMING = "verdicts_incoming"
_COLUMNS = ", ".join(_SAVED)
#: The upsert's conflict clause, the same on both dialects: a newer verdict wins, and the one it
#: replaces is kept as the previous status.
_UPDATES = (
    ", ".join(f"{c} = excluded.{c}" for c in _SAVED[1:])
    + ", previous_status = verdicts.status, previous_checked_at = verdicts.checked_at"
)
_NEWER = "WHERE excluded.checked_at >= verdicts.checked_at"
_ON_CONFLICT = f"ON CONFLICT (key) DO UPDATE SET {_UPDATES} {_NEWER}"
#: SQLite also numbers each save (``revision``, migration 0004): what the column copy lacks.
_SQLITE_UPSERT = (
    f"INSERT INTO verdicts ({_COLUMNS}, revision) VALUES ({', '.join('?' * (len(_SAVED) + 1))}) "
    f"ON CONFLICT (key) DO UPDATE SET {_UPDATES}, revision = excluded.revision {_NEWER}"
)
_SQLITE_NEXT_REVISION = (
    "INSERT INTO verdict_settings (name, value) VALUES ('revision', '1') "
    "ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + 1 RETURNING value"
)
_SQLITE_NEW_GENERATION = (
    "INSERT INTO verdict_settings (name, value) VALUES ('generation', ?) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
)
_POSTGRES_INCOMING = (
    f"CREATE TEMPORARY TABLE IF NOT EXISTS {_INCOMING} "
    f"(LIKE verdicts INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)
#: PostgreSQL: the session's temporary table of the keys a lookup wants.
_WANTED = "verdicts_wanted"
_POSTGRES_WANTED = f"CREATE TEMPORARY TABLE IF NOT EXISTS {_WANTED} (key TEXT NOT NULL)"
_POSTGRES_COPY = f"COPY {_INCOMING} ({_COLUMNS}) FROM STDIN (FORMAT csv)"
# DISTINCT ON: a key twice in one save would make the upsert touch its row twice (an error)
_POSTGRES_UPSERT = (
    f"INSERT INTO verdicts ({_COLUMNS}) SELECT DISTINCT ON (key) {_COLUMNS} FROM {_INCOMING} "
    f"ORDER BY key, checked_at DESC {_ON_CONFLICT}"
)
_DIALECTS = ("sqlite", "postgresql")

log = logging.getLogger(__name__)


def _row_type() -> "pa.DataType":
    """The Arrow type of a fetched row (``_FETCHED``), as the drivers return it."""
    import pyarrow as pa

    floats = {"score", "checked_at"}
    return pa.struct(
        [
            pa.field(n, pa.string() if n == "key" else pa.float64() if n in floats else pa.int64())
            for n in _FETCHED
        ]
    )


class VerdictStoreError(RuntimeError):
    """The store cannot be used as asked (another hashing key, an unreachable database)."""


def default_url() -> str:
    """``verdicts.sqlite`` in the user's cache directory for listhygiene."""
    from platformdirs import user_cache_dir

    return f"sqlite:///{Path(user_cache_dir('listhygiene')) / 'verdicts.sqlite'}"


class VerdictStore:
    """Verdicts by keyed hash of the address, in a SQLAlchemy database (SQLite or PostgreSQL)."""

    def __init__(self, url: str | None = None, *, pepper: str | None = None) -> None:
        self.url = url or default_url()
        try:
            parsed = make_url(self.url)
        except sa.exc.ArgumentError as exc:
            raise VerdictStoreError(f"the verdict store {self.url!r}: {exc}") from None
        self.dialect = parsed.get_backend_name()
        if self.dialect == "postgres":
            self.dialect = "postgresql"
        if self.dialect not in _DIALECTS:
            raise VerdictStoreError(
                f"the verdict store {self.shown}: {self.dialect} is not supported "
                "(SQLite or PostgreSQL)"
            )
        if self.dialect == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = make_engine(self.url)
            if self.dialect == "sqlite":
                event.listen(self.engine, "connect", _tune_sqlite)
            upgrade(self.engine)
        except (sa.exc.SQLAlchemyError, OSError, ImportError) as exc:
            reason = getattr(exc, "orig", None) or exc
            raise VerdictStoreError(f"the verdict store {self.shown}: {reason}") from None
        self._key = self._hashing_key(pepper or os.environ.get(PEPPER_VARIABLE))
        # the key's BLAKE2b state, copied per address: keying costs a compression per hash
        self._keyed = hashlib.blake2b(key=self._key, digest_size=16)
        self._domains_upsert: PostgresInsert | SqliteInsert | None = None
        #: Domain facts already read by a lookup, by id (``_domains``); a save and
        #: ``refresh_copy`` empty it.
        self._domain_facts: dict[int, tuple[Any, Any, Any, Any]] = {}
        self._copy_path: Path | None = None
        if self.dialect == "sqlite" and parsed.database not in (None, "", ":memory:"):
            database = Path(parsed.database).expanduser()
            self._copy_path = database.with_name(database.name + SUFFIX)
        self._copy: ColumnCopy | None = None
        self._since_copy: ColumnCopy | None = None  # the rows saved since ``_copy``

    def __repr__(self) -> str:
        return f"<VerdictStore {self.shown}>"

    @property
    def shown(self) -> str:
        """The store's URL, without its password."""
        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "VerdictStore":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """The database's errors (SQLAlchemy's or the driver's own cursor's) as one
        :class:`VerdictStoreError` line that names the store."""
        driver_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        try:
            yield
        except (sa.exc.SQLAlchemyError, driver_error) as exc:
            reason = getattr(exc, "orig", None) or exc
            raise VerdictStoreError(f"the verdict store {self.shown}: {reason}") from exc

    # -- hashing ---------------------------------------------------------------------------------

    def _hashing_key(self, pepper: str | None) -> bytes:
        with transaction(self.engine, write=True) as conn:
            stored = dict(conn.execute(sa.select(settings.c.name, settings.c.value)).all())
            if pepper is None:
                if _KEY not in stored:
                    if _KEY_FINGERPRINT in stored:
                        raise VerdictStoreError(
                            f"the verdict store {self.shown} was written with "
                            f"{PEPPER_VARIABLE} set; set it to the same value"
                        )
                    stored[_KEY] = secrets.token_hex(32)
                    conn.execute(sa.insert(settings).values(name=_KEY, value=stored[_KEY]))
                key = bytes.fromhex(stored[_KEY])
            else:
                key = hashlib.sha256(pepper.encode()).digest()
            fingerprint = hashlib.blake2b(b"listhygiene", key=key, digest_size=8).hexdigest()
            if _KEY_FINGERPRINT not in stored:
                conn.execute(sa.insert(settings).values(name=_KEY_FINGERPRINT, value=fingerprint))
            elif stored[_KEY_FINGERPRINT] != fingerprint:
                raise VerdictStoreError(
                    f"the verdict store {self.shown} was written with another "
                    f"{PEPPER_VARIABLE}: its hashes do not match; use the same value, or another "
                    "store"
                )
        return key

    def hashes(self, addresses: Iterable[str]) -> list[str]:
        """The keys of normalised ``addresses`` (as the pipeline cleans them)."""
        keyed = self._keyed
        out: list[str] = []
        for address in addresses:
            digest = keyed.copy()
            digest.update(address.encode("utf-8", "surrogatepass"))
            out.append(digest.hexdigest())
        return out

    def keyed_batches(
        self, batches: Iterable["pa.Array"], *, total: int
    ) -> Iterator[tuple["pa.Array", bytes | None]]:
        """Each of ``batches`` (distinct, non-empty addresses; ``total`` of them in all) with
        their keys for :meth:`fetch`, the next batch hashed in a child process while this one
        is looked up (``hashing.py``); None while the store is empty, which a lookup needs no
        key for."""
        with self._errors(), self.engine.connect() as conn:
            empty = conn.execute(sa.select(verdicts.c.key).limit(1)).first() is None
        if empty:
            for batch in batches:
                yield batch, None
            return
        yield from hashed_ahead(self._key, batches, total=total)

    # -- reading ---------------------------------------------------------------------------------

    def fetch(self, addresses: "pa.Array", *, keys: bytes | None = None) -> "pa.Table":
        """What the store holds of ``addresses`` (distinct, normalised): a table of the
        pipeline's results (``_address`` and the internal result columns, ``email`` the
        address) with ``checked_at`` (Unix seconds); addresses it does not know are absent.
        ``keys``: the addresses' keys from :meth:`keyed_batches` (the addresses then distinct
        and non-empty), else they are hashed here."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from listhygiene.results import EXTRA_FIELDS, KEY, arrow_schema, no_evidence

        if keys is None:  # an address asked twice is found once
            wanted = pc.unique(
                pc.filter(addresses, pc.fill_null(pc.not_equal(addresses, ""), False))
            )
        else:
            wanted = addresses
        at: pa.Array = pa.array([], pa.int64())  # each found row's address: its index in wanted
        column = _columns([])
        with self._errors(), self.engine.connect() as conn:
            empty = conn.execute(sa.select(verdicts.c.key).limit(1)).first() is None
            copies = None if empty else self._current_copy(conn)
            if not empty and keys is None:  # a first cleaning hashes each address when saved
                keys = digest_bytes(self._keyed, wanted)
            if copies is not None:
                assert keys is not None
                at, column = look_up(*copies, *digests_as_keys(keys))
            elif not empty:
                assert keys is not None
                hexes = [keys[i : i + DIGEST].hex() for i in range(0, len(keys), DIGEST)]
                hashed = pa.array(hexes, pa.string())
                in_order = pc.take(hashed, pc.sort_indices(hashed)).to_pylist()
                column = self._lookup(conn, in_order)
                at = pc.index_in(column["key"], value_set=hashed)
            per_domain = self._domains(conn, set(pc.unique(column["domain_id"]).to_pylist()))
        schema = arrow_schema(internal=True)
        data = decode(column, schema)
        for name in EXTRA_FIELDS:  # the suggestion is the run's (pipeline/advice.py)
            data[name] = pa.nulls(len(at), pa.string())
        data.update(no_evidence(len(at)))  # feedback is the run's to apply (verdicts/evidence.py)
        data[KEY] = pc.take(wanted, at)
        data["email"] = data[KEY]
        ids = pa.array(sorted(per_domain), pa.int64())
        domain_at = pc.index_in(column["domain_id"], value_set=ids)
        for index, name in enumerate(_DOMAIN_FACTS):
            kind = schema.field(name).type
            shared = pa.array([per_domain[i][index] for i in ids.to_pylist()], kind)
            data[name] = pc.take(shared, domain_at)
        fields = [pa.field(KEY, pa.string()), *schema]
        table = pa.table({f.name: data[f.name] for f in fields}, schema=pa.schema(fields))
        return table.append_column("checked_at", pa.array(column["checked_at"], pa.float64()))

    def _lookup(self, conn: sa.Connection, keys: list[str]) -> dict[str, "pa.Array"]:
        """The stored columns (``_FETCHED``) of ``keys``, through the driver's own cursor
        (SQLAlchemy's per-row processing would cost more than the lookup itself)."""
        if self.dialect == "postgresql":
            return _lookup_postgres(conn, keys)
        sql = (
            f"SELECT {', '.join(_FETCHED)} FROM verdicts "
            "WHERE key IN (SELECT value FROM json_each(?))"
        )
        rows: list[tuple[Any, ...]] = []
        cursor = _cursor(conn)
        try:
            for chunk in _chunks(keys, LOOKUP_BATCH):
                cursor.execute(sql, (json.dumps(chunk),))
                rows.extend(cursor.fetchall())
        finally:
            cursor.close()
        return _columns(rows)

    # -- the column copy (column_copy.py) ------------------------------------------------------

    def _counters(self, conn: sa.Connection) -> tuple[int, str | None]:
        """The store's revision (its saves so far) and generation (None before any copy)."""
        names = sa.select(settings.c.name, settings.c.value).where(
            settings.c.name.in_(("revision", "generation"))
        )
        found = dict(conn.execute(names).all())
        return int(found.get("revision", 0)), found.get("generation")

    def _current_copy(self, conn: sa.Connection) -> "tuple[ColumnCopy, ColumnCopy] | None":
        """The column copy this store's lookups may use and the rows saved since it was made,
        or None (not SQLite, no copy, or one of another generation)."""
        copy = self._usable_copy(conn)
        if copy is None:
            return None
        revision = self._counters(conn)[0]
        since = self._since_copy
        if since is None or since.revision != revision:
            since = self._copy_of_rows(conn, after=copy.revision, upto=revision)
            self._since_copy = since
        return copy, since

    def _usable_copy(self, conn: sa.Connection) -> ColumnCopy | None:
        """The column copy of this store's generation, without the rows saved since."""
        if self._copy_path is None:
            return None
        revision, generation = self._counters(conn)
        copy = self._copy
        if copy is None or copy.generation != generation or copy.revision > revision:
            copy = ColumnCopy.open(self._copy_path)  # another process's may have replaced it
            if copy is None or copy.generation != generation or copy.revision > revision:
                self._copy = self._since_copy = None
                return None
            self._copy, self._since_copy = copy, None
        return copy

    def release_copy(self) -> None:
        """Let go of the column copy's mapped pages (they count in the process's resident
        memory): a run calls this once its lookups are done, before it verifies and writes."""
        self._copy = self._since_copy = None

    def _copy_of_rows(self, conn: sa.Connection, *, after: int, upto: int) -> ColumnCopy:
        """A column copy of the verdicts saved in revisions ``after`` (excluded) to ``upto``,
        through the revision's index (the rows saved since a copy was made: a few)."""
        generation = self._counters(conn)[1] or ""
        parts = list(self._compact_parts(conn, after=after, upto=upto))
        if not parts:
            return ColumnCopy.from_rows(_columns([]), revision=upto, generation=generation)
        return ColumnCopy.joined(parts, revision=upto, generation=generation)

    def _compact_parts(
        self, conn: sa.Connection, *, after: int, upto: int
    ) -> Generator[ColumnCopy, None, None]:
        """The verdicts saved in revisions ``after`` (excluded) to ``upto`` as column copies of
        65,536 rows each (~55 bytes a verdict, against ~120 as fetched): through the
        revision's index, or with ``after`` < 0 every verdict, in key order (the table is
        stored by its key: one pass, no sort)."""
        if after < 0:
            sql = f"SELECT {', '.join(_FETCHED)} FROM verdicts ORDER BY key"
            arguments: tuple[int, ...] = ()
        else:
            sql = f"SELECT {', '.join(_FETCHED)} FROM verdicts WHERE revision > ? AND revision <= ?"
            arguments = (after, upto)
        cursor = _cursor(conn)
        try:
            cursor.execute(sql, arguments)
            # a part at a time: a million rows as Python tuples would hold ~300 MB at once
            while rows := cursor.fetchmany(_ROWS_AT_ONCE):
                yield ColumnCopy.from_rows(_columns(rows), revision=upto, generation="")
        finally:
            cursor.close()

    def refresh_copy(self, *, expected: int | None = None) -> None:
        """Bring the column copy up to date with the store (a SQLite file's; nothing else has
        one): the rows saved since it was made replace its own, once they are more than
        :data:`COPY_MERGE_SHARE` of it. With ``expected``, the number of addresses a run looks
        up (or, after its last save, looked up), a store without a usable copy (none yet, or of
        another generation) gets one made from the whole table when that table is at most
        :data:`COPY_BUILD_RATIO` times bigger: one pass over it costs about what looking up as
        many keys does. A run calls this before its lookups, and after its last save on the
        writer thread, while its outputs are checked (``pipeline/verdict_memory.py``): so a
        store's first run leaves it a copy for the next run and the estimates between."""
        self._refresh_copy(expected)

    def _refresh_copy(self, expected: int | None) -> None:
        self._domain_facts.clear()
        path = self._copy_path
        if path is None:
            return
        with self._errors():
            with self.engine.connect() as conn:
                revision, generation = self._counters(conn)
                count = conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar_one()
                usable = self._current_copy(conn) is not None
            if not count or count > COPY_LIMIT:
                path.unlink(missing_ok=True)
                self._copy = self._since_copy = None
                return
            if not usable and (expected is None or count > COPY_BUILD_RATIO * expected):
                return
            if generation is None:
                with transaction(self.engine, write=True) as conn:
                    conn.execute(
                        sa.text(_SQLITE_NEW_GENERATION.replace("?", ":g")).bindparams(
                            g=secrets.token_hex(8)
                        )
                    )
                with self.engine.connect() as conn:
                    revision, generation = self._counters(conn)
            assert generation is not None  # made just above
            with self.engine.connect() as conn:
                copy = self._usable_copy(conn)
                if copy is not None:
                    newer = conn.execute(
                        sa.select(sa.func.count())
                        .select_from(verdicts)
                        .where(verdicts.c.revision > copy.revision)
                    ).scalar_one()
                    if newer <= COPY_MERGE_SHARE * copy.table.num_rows:
                        return  # lookups read so few rows saved since through the index
                    # the copy with the rows saved since in place of its own
                    since = self._copy_of_rows(conn, after=copy.revision, upto=revision)
                    parts = copy.merged_parts(since)
                    made_at = since.revision
                else:
                    # the whole table: in key order (it is stored by its key), so no sort. A
                    # row saved meanwhile may come in too: its revision is past the copy's, so
                    # the next lookups read it again from SQL, as they would without.
                    parts = self._compact_parts(conn, after=-1, upto=revision)
                    made_at = revision
                # either is written a part at a time as it is made: the new copy is never held
                # whole (docs/pipeline.md, "Verdict store speed")
                try:
                    with closing(parts):
                        written = ColumnCopy.write_parts(
                            path,
                            parts,
                            revision=made_at,
                            generation=generation,
                            unchanged=lambda: self._counters(conn)[1] == generation,
                        )
                except (OSError, ValueError) as exc:  # the store answers without a copy
                    log.warning(
                        "the verdict store's column copy %s could not be written: %s", path, exc
                    )
                    return
        self._copy, self._since_copy = written, None

    def _domains(self, conn: sa.Connection, ids: set[int]) -> dict[int, tuple[Any, Any, Any, Any]]:
        """``{id: (domain, mx_records, domain_reputation, mx_provider)}`` of the domains
        ``ids``. What one lookup read is kept for the next (a run's lookups of 100,000
        addresses each ask for the same 2,000 domains) until a save may change it, or the next
        run's :meth:`refresh_copy` (another process may have saved meanwhile)."""
        cache = self._domain_facts
        found = {id_: cache[id_] for id_ in ids if id_ in cache}
        ids = ids.difference(found)
        columns = (
            domains.c.id,
            domains.c.domain,
            domains.c.mx_records,
            domains.c.domain_reputation,
            domains.c.mx_provider,
        )
        ids_in = sa.bindparam("ids", expanding=True, type_=sa.Integer())  # typed: see _domain_ids
        query = sa.select(*columns).where(domains.c.id.in_(ids_in))
        for chunk in _chunks(sorted(ids), BATCH):
            for id_, name, mx, reputation, provider in conn.execute(query, {"ids": chunk}):
                found[id_] = (name, json.loads(mx), _reputation(json.loads(reputation)), provider)
        cache.update(found)
        return found

    # -- writing ---------------------------------------------------------------------------------

    def save(self, results: "pa.Table", *, backend: str, checked_at: float | None = None) -> int:
        """Keep ``results`` (a pipeline result table: ``_address`` and the result columns);
        returns how many rows were written. ``unknown`` results are not kept: they are never
        reused, and the store keeps the last verdict that said something. A stored verdict
        checked after ``checked_at`` is never replaced."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from listhygiene.results import KEY

        moment = time.time() if checked_at is None else checked_at
        self._domain_facts.clear()  # this save may give a domain newer facts
        keep = pc.and_(
            pc.not_equal(results.column("status"), Status.UNKNOWN.value),
            pc.is_valid(results.column(KEY)),
        )
        known = results.filter(keep)
        if not known.num_rows:
            return 0
        # per domain: the first row of each (mail hosts and reputation are the domain's)
        names = pc.unique(known.column("domain"))
        first = known.take(pc.index_in(names, value_set=known.column("domain")))
        facts = [name for name in _DOMAIN_FACTS if name in first.column_names]
        hosts = first.select(facts).to_pylist()
        columns = encode(known)
        columns["key"] = pa.array(self.hashes(known.column(KEY).to_pylist()), pa.string())
        columns["backend"] = pa.repeat(pa.scalar(backend, pa.string()), known.num_rows)
        columns["checked_at"] = pa.repeat(pa.scalar(moment, pa.float64()), known.num_rows)
        # in key order: the key's index pages are then visited in order, each once, not at
        # random (3x faster on SQLite past its page cache), and writers sharing a store lock
        # rows in the same order (docs/pipeline.md, "Verdict store speed")
        order = pc.sort_indices(columns["key"])
        with self._errors(), transaction(self.engine, write=True) as conn:
            ids = self._domain_ids(conn, hosts, moment)
            at = pc.index_in(known.column("domain"), value_set=pa.array(list(ids), pa.string()))
            columns["domain_id"] = pc.take(pa.array(list(ids.values()), pa.int64()), at)
            table = pa.table({name: pc.take(columns[name], order) for name in _SAVED})
            if self.dialect == "sqlite":
                revision = int(conn.exec_driver_sql(_SQLITE_NEXT_REVISION).scalar_one())
                _upsert_sqlite(conn, table, revision)
            else:
                _upsert_postgres(conn, table)
        return int(known.num_rows)

    def _domain_ids(
        self, conn: sa.Connection, hosts: list[dict[str, Any]], moment: float
    ) -> dict[str, int]:
        """Upsert the domains' mail hosts (a newer one wins), in name order (writers sharing a
        store lock rows in the same order); their ids."""
        hosts = sorted(hosts, key=lambda h: str(h["domain"]))
        rows = [
            {
                "domain": h["domain"],
                "mx_records": json.dumps(list(h["mx_records"] or [])),
                "domain_reputation": json.dumps(h["domain_reputation"] or {}),
                "mx_provider": h.get("mx_provider"),
                "checked_at": moment,
            }
            for h in hosts
        ]
        for chunk in _chunks(rows, BATCH * 10):
            conn.execute(self._upsert_domains(), chunk)
        ids: dict[str, int] = {}
        query = sa.select(domains.c.domain, domains.c.id).where(
            # typed: an untyped bindparam has SQLAlchemy inspect its value, which imports its
            # ORM lazily, and that races with an import of the ORM on another thread (saves
            # run on a thread beside the run, and GX imports SQLAlchemy's ORM)
            domains.c.domain.in_(sa.bindparam("names", expanding=True, type_=sa.Text()))
        )
        for chunk in _chunks([h["domain"] for h in hosts], BATCH):
            ids.update((name, id_) for name, id_ in conn.execute(query, {"names": chunk}))
        return ids

    def _upsert_domains(self) -> "PostgresInsert | SqliteInsert":
        if self._domains_upsert is None:
            statement: PostgresInsert | SqliteInsert
            if self.dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as postgres_insert

                statement = postgres_insert(domains)
            else:
                from sqlalchemy.dialects.sqlite import insert as sqlite_insert

                statement = sqlite_insert(domains)
            new = statement.excluded
            self._domains_upsert = statement.on_conflict_do_update(
                index_elements=[domains.c.domain],
                set_={
                    **{c: new[c] for c in ("mx_records", "domain_reputation", "checked_at")},
                    # a result that does not know the provider (a remote backend's) keeps the
                    # one a local verification found
                    "mx_provider": sa.func.coalesce(new.mx_provider, domains.c.mx_provider),
                },
                where=new.checked_at >= domains.c.checked_at,
            )
        return self._domains_upsert

    # -- disposable services' mail hosts --------------------------------------------------------

    def disposable_host_sightings(self) -> list[tuple[str, str]]:
        """Every (mail host, listed disposable domain) pair seen by earlier runs."""
        query = sa.select(disposable_hosts.c.host, disposable_hosts.c.domain)
        with self._errors(), self.engine.connect() as conn:
            return [(host, domain) for host, domain in conn.execute(query)]

    def keep_disposable_host_sightings(
        self, pairs: Iterable[tuple[str, str]], *, seen_at: float | None = None
    ) -> int:
        """Keep (mail host, listed disposable domain) pairs a run saw; how many were given."""
        moment = time.time() if seen_at is None else seen_at
        rows = [
            {"host": host, "domain": domain, "seen_at": moment}
            for host, domain in sorted(set(pairs))
        ]
        if not rows:
            return 0
        statement: PostgresInsert | SqliteInsert
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as postgres_insert

            statement = postgres_insert(disposable_hosts)
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            statement = sqlite_insert(disposable_hosts)
        upsert = statement.on_conflict_do_update(
            index_elements=[disposable_hosts.c.host, disposable_hosts.c.domain],
            set_={"seen_at": statement.excluded.seen_at},
        )
        with self._errors(), transaction(self.engine, write=True) as conn:
            for chunk in _chunks(rows, BATCH):
                conn.execute(upsert, list(chunk))
        return len(rows)

    # -- managing --------------------------------------------------------------------------------

    def stats(self, *, now: float | None = None) -> dict[str, Any]:
        """Counts by status and by age, and the oldest and newest verdicts."""
        moment = time.time() if now is None else now
        day = 86400.0
        ages = {"1d": day, "7d": 7 * day, "30d": 30 * day, "90d": 90 * day}
        with self.engine.connect() as conn:
            by_status = {
                STATUSES[code]: count
                for code, count in conn.execute(
                    sa.select(verdicts.c.status, sa.func.count()).group_by(verdicts.c.status)
                ).all()
            }
            oldest, newest = conn.execute(
                sa.select(sa.func.min(verdicts.c.checked_at), sa.func.max(verdicts.c.checked_at))
            ).one()
            younger = {
                label: conn.execute(
                    sa.select(sa.func.count()).where(verdicts.c.checked_at >= moment - seconds)
                ).scalar_one()
                for label, seconds in ages.items()
            }
            smtp = conn.execute(
                sa.select(sa.func.count()).where(verdicts.c.flags.op("&")(FLAGS["smtp_check"]) != 0)
            ).scalar_one()
        return {
            "store": self.shown,
            "verdicts": sum(by_status.values()),
            "by_status": dict(sorted(by_status.items())),
            "smtp_checked": smtp,
            "checked_within": younger,
            "oldest": _iso(oldest),
            "newest": _iso(newest),
        }

    def prune(self, older_than: float, *, now: float | None = None) -> int:
        """Delete verdicts checked more than ``older_than`` seconds ago; how many went."""
        moment = time.time() if now is None else now
        with transaction(self.engine, write=True) as conn:
            gone = conn.execute(
                sa.delete(verdicts).where(verdicts.c.checked_at < moment - older_than)
            ).rowcount
            conn.execute(sa.delete(domains).where(domains.c.checked_at < moment - older_than))
            conn.execute(sa.delete(events).where(events.c.at < moment - older_than))  # feedback
            self._retire_copy(conn)
        return int(gone or 0)

    def forget(self, addresses: Iterable[str]) -> int:
        """Erase ``addresses`` (normalised as the pipeline does); how many were stored."""
        import pyarrow as pa

        from listhygiene.email_cells import clean_cells

        cleaned = [a for a in clean_cells(pa.array(list(addresses), pa.string())).to_pylist() if a]
        gone = 0
        with transaction(self.engine, write=True) as conn:
            for chunk in _chunks(self.hashes(cleaned), BATCH):
                gone += conn.execute(sa.delete(verdicts).where(verdicts.c.key.in_(chunk))).rowcount
                conn.execute(sa.delete(events).where(events.c.key.in_(chunk)))  # feedback too
            self._retire_copy(conn)
        return gone

    def _retire_copy(self, conn: sa.Connection) -> None:
        """A new generation, and the column copy's file removed: it still holds what was
        deleted (keyed hashes and verdicts), which ``forget`` must not leave on disk; a copy
        another process writes meanwhile is of the old generation, never used. The next run
        makes another (SQLite only: no other store has one)."""
        if self.dialect == "sqlite":
            conn.exec_driver_sql(_SQLITE_NEW_GENERATION, (secrets.token_hex(8),))
        if self._copy_path is not None:
            self._copy_path.unlink(missing_ok=True)
        self._copy = self._since_copy = None


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    """The store's own pragmas on each new SQLite connection (:data:`SQLITE_PRAGMAS`)."""
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def _columns(rows: list[tuple[Any, ...]]) -> dict[str, "pa.Array"]:
    """Fetched rows (``_FETCHED``) as Arrow columns, through one struct array: 4x cheaper than
    transposing them in Python."""
    import pyarrow as pa

    found = pa.array(rows, _row_type())
    return {name: found.field(name) for name in _FETCHED}


def _lookup_postgres(conn: sa.Connection, keys: list[str]) -> dict[str, "pa.Array"]:
    """PostgreSQL: ``keys`` copied into the session's temporary table, and the stored rows
    copied out as CSV that Arrow reads: no Python object per value either way."""
    import pyarrow.csv as csv

    cursor = _cursor(conn)
    try:
        cursor.execute(_POSTGRES_WANTED)
        with cursor.copy(f"COPY {_WANTED} (key) FROM STDIN") as copy:
            copy.write("\n".join(keys) + "\n" if keys else "")
        query = (
            f"SELECT {', '.join(f'v.{c}' for c in _FETCHED)} FROM verdicts v "
            f"JOIN {_WANTED} w ON w.key = v.key"
        )
        data = io.BytesIO()
        with cursor.copy(f"COPY ({query}) TO STDOUT (FORMAT csv)") as copy:
            for block in copy:
                data.write(block)
        cursor.execute(f"TRUNCATE {_WANTED}")
    finally:
        cursor.close()
    if not data.tell():
        return _columns([])
    data.seek(0)
    kind = _row_type()
    table = csv.read_csv(
        data,
        read_options=csv.ReadOptions(column_names=list(_FETCHED)),
        convert_options=csv.ConvertOptions(
            column_types={field.name: field.type for field in kind},
            strings_can_be_null=False,
        ),
    )
    return {name: table.column(name).combine_chunks() for name in _FETCHED}


def _cursor(conn: sa.Connection) -> Any:
    """The driver's own cursor of ``conn`` (sqlite3 or psycopg)."""
    dbapi = conn.connection.dbapi_connection
    if dbapi is None:  # a closed connection: SQLAlchemy never hands one out
        raise VerdictStoreError("the verdict store's connection is closed")
    return dbapi.cursor()


def _upsert_sqlite(conn: sa.Connection, table: "pa.Table", revision: int) -> None:
    """One prepared upsert executed for every row of ``table`` (columns in ``_SAVED`` order),
    numbered ``revision``: sqlite3 binds Python values only, so the rows go over as tuples."""
    cursor = _cursor(conn)
    try:
        for batch in table.to_batches(max_chunksize=BATCH * 10):
            values = [column.to_pylist() for column in batch.columns]
            rows = zip(*values, itertools.repeat(revision, batch.num_rows), strict=True)
            cursor.executemany(_SQLITE_UPSERT, rows)
    finally:
        cursor.close()


def _upsert_postgres(conn: sa.Connection, table: "pa.Table") -> None:
    """``table`` (columns in ``_SAVED`` order) copied as CSV, written by Arrow without a
    Python object per value, into the session's temporary table, then upserted from it in one
    statement (the temporary table empties itself at the commit)."""
    import pyarrow.csv as csv

    data = io.BytesIO()
    csv.write_csv(table, data, csv.WriteOptions(include_header=False, quoting_style="needed"))
    cursor = _cursor(conn)
    try:
        cursor.execute(_POSTGRES_INCOMING)
        with cursor.copy(_POSTGRES_COPY) as copy:
            copy.write(data.getbuffer())
        cursor.execute(_POSTGRES_UPSERT)
    finally:
        cursor.close()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _reputation(value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "mx_ip": str(value.get("mx_ip", "")),
        "is_listed": bool(value.get("is_listed", False)),
        "blacklists": list(value.get("blacklists", [])),
        "checked": bool(value.get("checked", False)),
    }


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")

"""The verdict store: every verdict a run gets, kept so that the next run reuses what is fresh.

PRODUCT.md, "Verdict store". Addresses never reach the database: a row is keyed by a keyed hash
(BLAKE2b with the store's key, 128 bits) of the normalised address, so the store says nothing
about who is on a list to someone who reads it without the key. The key is
``LISTHYGIENE_VERDICTS_PEPPER`` when set (keep it outside the database for that protection to
hold); otherwise one is made at random when the store is created and kept in it, so every
process that shares the store hashes alike. The store remembers a fingerprint of the key, and a
process with another key is refused with a clear error instead of silently reusing nothing.

Everything is set-based and columnar: addresses go in and results come out as Arrow arrays,
looked up in batches of :data:`BATCH` keys and written with one multi-row upsert per batch. An
upsert never replaces a newer verdict with an older one (``checked_at`` decides), so several
processes and machines may share one store (PostgreSQL) at once. See docs/pipeline.md.
"""

import hashlib
import json
import operator
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from listhygiene.db.engine import make_engine, transaction
from listhygiene.statuses import Status
from listhygiene.verdicts.codes import FLAGS, STATUSES, decode, encode
from listhygiene.verdicts.schema import domains, settings, upgrade, verdicts

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BATCH", "PEPPER_VARIABLE", "VerdictStore", "VerdictStoreError", "default_url"]

PEPPER_VARIABLE = "LISTHYGIENE_VERDICTS_PEPPER"
#: Keys per lookup query and rows per upsert statement (SQLite allows 32,766 parameters).
BATCH = 500
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
        parsed = make_url(self.url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = make_engine(self.url)
            upgrade(self.engine)
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            reason = getattr(exc, "orig", None) or exc
            raise VerdictStoreError(f"the verdict store {self.shown}: {reason}") from None
        self._key = self._hashing_key(pepper or os.environ.get(PEPPER_VARIABLE))
        self._verdicts_upsert: Any = None
        self._domains_upsert: Any = None

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
        key = self._key
        return [
            hashlib.blake2b(a.encode("utf-8", "surrogatepass"), key=key, digest_size=16).hexdigest()
            for a in addresses
        ]

    # -- reading ---------------------------------------------------------------------------------

    def fetch(self, addresses: "pa.Array") -> "pa.Table":
        """What the store holds of ``addresses`` (distinct, normalised): a table of the
        pipeline's results (``_address`` and the internal result columns, ``email`` the
        address) with ``checked_at`` (Unix seconds); addresses it does not know are absent."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from listhygiene.pipeline.backends import KEY
        from listhygiene.results import EXTRA_FIELDS, arrow_schema

        wanted = [a for a in addresses.to_pylist() if a]
        by_hash = dict(zip(self.hashes(wanted), wanted, strict=True))
        # The driver's own SQL and cursor, one statement of BATCH placeholders (the last batch
        # padded): SQLAlchemy's per-row processing would cost more than the lookup itself.
        mark = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        sql = (
            f"SELECT {', '.join(_FETCHED)} FROM verdicts WHERE key IN ({', '.join([mark] * BATCH)})"
        )
        rows: list[Any] = []
        with self.engine.connect() as conn:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                for chunk in _chunks(list(by_hash), BATCH):
                    cursor.execute(sql, tuple(chunk) + ("",) * (BATCH - len(chunk)))
                    rows.extend(cursor.fetchall())
            finally:
                cursor.close()
            values = list(zip(*rows, strict=True)) if rows else [()] * len(_FETCHED)
            column = dict(zip(_FETCHED, values, strict=True))
            per_domain = self._domains(conn, set(column["domain_id"]))
        schema = arrow_schema(internal=True)
        data = decode(column, schema)  # type: ignore[arg-type]
        for name in EXTRA_FIELDS:  # advice, not kept: known again when re-verified
            data[name] = pa.nulls(len(column["key"]), pa.string())
        data[KEY] = pa.array([by_hash[k] for k in column["key"]], pa.string())
        data["email"] = data[KEY]
        ids = pa.array(sorted(per_domain), pa.int64())
        at = pc.index_in(pa.array(column["domain_id"], pa.int64()), value_set=ids)
        for index, name in enumerate(("domain", "mx_records", "domain_reputation")):
            kind = schema.field(name).type
            shared = pa.array([per_domain[i][index] for i in ids.to_pylist()], kind)
            data[name] = pc.take(shared, at)
        fields = [pa.field(KEY, pa.string()), *schema]
        table = pa.table({f.name: data[f.name] for f in fields}, schema=pa.schema(fields))
        return table.append_column("checked_at", pa.array(column["checked_at"], pa.float64()))

    def _domains(self, conn: sa.Connection, ids: set[int]) -> dict[int, tuple[Any, Any, Any]]:
        """``{id: (domain, mx_records, domain_reputation)}`` of the domains ``ids``."""
        found: dict[int, tuple[Any, Any, Any]] = {}
        columns = (
            domains.c.id,
            domains.c.domain,
            domains.c.mx_records,
            domains.c.domain_reputation,
        )
        query = sa.select(*columns).where(domains.c.id.in_(sa.bindparam("ids", expanding=True)))
        for chunk in _chunks(sorted(ids), BATCH):
            for id_, name, mx, reputation in conn.execute(query, {"ids": chunk}):
                found[id_] = (name, json.loads(mx), _reputation(json.loads(reputation)))
        return found

    # -- writing ---------------------------------------------------------------------------------

    def save(self, results: "pa.Table", *, backend: str, checked_at: float | None = None) -> int:
        """Keep ``results`` (a pipeline result table: ``_address`` and the result columns);
        returns how many rows were written. ``unknown`` results are not kept: they are never
        reused, and the store keeps the last verdict that said something. A stored verdict
        checked after ``checked_at`` is never replaced."""
        import pyarrow.compute as pc

        from listhygiene.pipeline.backends import KEY

        moment = time.time() if checked_at is None else checked_at
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
        hosts = first.select(["domain", "mx_records", "domain_reputation"]).to_pylist()
        given: dict[str, list[Any]] = {
            name: array.to_pylist() for name, array in encode(known).items()
        }
        given["key"] = self.hashes(known.column(KEY).to_pylist())
        given["backend"] = [backend] * known.num_rows
        given["checked_at"] = [moment] * known.num_rows
        sql, order = self._upsert_verdicts_sql()
        with transaction(self.engine, write=True) as conn:
            ids = self._domain_ids(conn, hosts, moment)
            given["domain_id"] = [ids[d] for d in known.column("domain").to_pylist()]
            rows = list(zip(*(given[n] for n in order), strict=True))
            # in key order: the key's index pages are then visited in order, each once, not at
            # random (3x faster on SQLite past its page cache; docs/pipeline.md, "Speed")
            rows.sort(key=operator.itemgetter(order.index("key")))
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                for chunk in _chunks(rows, BATCH * 10):
                    cursor.executemany(sql, chunk)
            finally:
                cursor.close()
        return len(rows)

    def _domain_ids(
        self, conn: sa.Connection, hosts: list[dict[str, Any]], moment: float
    ) -> dict[str, int]:
        """Upsert the domains' mail hosts (a newer one wins); their ids."""
        rows = [
            {
                "domain": h["domain"],
                "mx_records": json.dumps(list(h["mx_records"] or [])),
                "domain_reputation": json.dumps(h["domain_reputation"] or {}),
                "checked_at": moment,
            }
            for h in hosts
        ]
        for chunk in _chunks(rows, BATCH * 10):
            conn.execute(self._upsert_domains(), chunk)
        ids: dict[str, int] = {}
        query = sa.select(domains.c.domain, domains.c.id).where(
            domains.c.domain.in_(sa.bindparam("names", expanding=True))
        )
        for chunk in _chunks([h["domain"] for h in hosts], BATCH):
            ids.update((name, id_) for name, id_ in conn.execute(query, {"names": chunk}))
        return ids

    def _insert(self, table: sa.Table) -> Any:
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            raise VerdictStoreError(
                f"the verdict store {self.shown}: {dialect} is not supported (SQLite or PostgreSQL)"
            )
        return insert(table)

    def _upsert_verdicts_sql(self) -> tuple[str, tuple[str, ...]]:
        """The upsert as the driver's SQL and the order of its positional parameters: compiled
        once by SQLAlchemy for the dialect, executed for many rows by the driver itself."""
        if self._verdicts_upsert is None:
            statement = self._insert(verdicts)
            new = statement.excluded
            upsert = statement.values({c: sa.bindparam(c) for c in _SAVED}).on_conflict_do_update(
                index_elements=[verdicts.c.key],
                set_={
                    **{c: new[c] for c in _SAVED[1:]},
                    "previous_status": verdicts.c.status,
                    "previous_checked_at": verdicts.c.checked_at,
                },
                where=new.checked_at >= verdicts.c.checked_at,
            )
            compiled = upsert.compile(dialect=self.engine.dialect)
            order = tuple(compiled.positiontup or ())
            sql = str(compiled)
            if not order:  # a named paramstyle (psycopg's pyformat): positional %s instead
                names = list(compiled.params)
                order = tuple(n for n in _placeholders(sql) if n in names)
                sql = re.sub(r"%\((\w+)\)s", "%s", sql)
            self._verdicts_upsert = (sql, order)
        return self._verdicts_upsert

    def _upsert_domains(self) -> Any:
        if self._domains_upsert is None:
            statement = self._insert(domains)
            new = statement.excluded
            self._domains_upsert = statement.on_conflict_do_update(
                index_elements=[domains.c.domain],
                set_={c: new[c] for c in ("mx_records", "domain_reputation", "checked_at")},
                where=new.checked_at >= domains.c.checked_at,
            )
        return self._domains_upsert

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
        return int(gone or 0)

    def forget(self, addresses: Iterable[str]) -> int:
        """Erase ``addresses`` (normalised as the pipeline does); how many were stored."""
        import pyarrow as pa

        from listhygiene.pipeline.prepare import clean_cells

        cleaned = [a for a in clean_cells(pa.array(list(addresses), pa.string())).to_pylist() if a]
        gone = 0
        with transaction(self.engine, write=True) as conn:
            for chunk in _chunks(self.hashes(cleaned), BATCH):
                gone += conn.execute(sa.delete(verdicts).where(verdicts.c.key.in_(chunk))).rowcount
        return gone


def _placeholders(sql: str) -> list[str]:
    """The names of ``%(name)s`` placeholders, in order."""
    return re.findall(r"%\((\w+)\)s", sql)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
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

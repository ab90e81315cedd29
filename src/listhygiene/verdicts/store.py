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
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from listhygiene.db.engine import make_engine, transaction
from listhygiene.statuses import Status
from listhygiene.verdicts.schema import domains, settings, upgrade, verdicts

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BATCH", "PEPPER_VARIABLE", "VerdictStore", "VerdictStoreError", "default_url"]

PEPPER_VARIABLE = "LISTHYGIENE_VERDICTS_PEPPER"
#: Keys per lookup query and rows per upsert statement (SQLite allows 32,766 parameters).
BATCH = 500
#: The columns kept per address: the pipeline's internal result columns but the address itself
#: and the per-domain ones.
_ROW_COLUMNS = (
    "status",
    "score",
    "is_deliverable",
    "is_disposable",
    "is_catchall",
    "is_role",
    "is_free",
    "domain",
    "smtp_check",
    "reason",
    "response_time",
    "credits_used",
    "dns",
    "mailbox",
    "undetermined_reason",
)
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
        address) with ``checked_at`` (Unix seconds) and ``backend``; addresses it does not
        know are absent."""
        import pyarrow as pa

        from listhygiene.pipeline.backends import KEY
        from listhygiene.results import arrow_schema

        wanted = [a for a in addresses.to_pylist() if a]
        by_hash = dict(zip(self.hashes(wanted), wanted, strict=True))
        columns = [verdicts.c.key, *(verdicts.c[c] for c in _ROW_COLUMNS)]
        columns += [verdicts.c.checked_at, verdicts.c.backend]
        query = sa.select(*columns).where(verdicts.c.key.in_(sa.bindparam("keys", expanding=True)))
        rows: list[Any] = []
        with self.engine.connect() as conn:
            for chunk in _chunks(list(by_hash), BATCH):
                rows.extend(conn.execute(query, {"keys": chunk}).all())
            found_domains = {r.domain for r in rows}
            per_domain = self._domains(conn, found_domains)
        schema = arrow_schema(internal=True)
        values = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
        data: dict[str, Any] = {KEY: [by_hash[k] for k in values[0]]}
        data["email"] = data[KEY]
        for name, column in zip(_ROW_COLUMNS, values[1:], strict=False):
            data[name] = list(column)
        data["mx_records"] = [per_domain.get(d, ([], {}))[0] for d in data["domain"]]
        data["domain_reputation"] = [per_domain.get(d, ([], {}))[1] for d in data["domain"]]
        fields = [pa.field(KEY, pa.string()), *schema]
        table = pa.Table.from_pydict(
            {f.name: pa.array(data[f.name], f.type) for f in fields},
            schema=pa.schema(fields),
        )
        table = table.append_column("checked_at", pa.array(values[-2], pa.float64()))
        return table.append_column("backend", pa.array(values[-1], pa.string()))

    def _domains(self, conn: sa.Connection, names: set[str]) -> dict[str, tuple[Any, Any]]:
        found: dict[str, tuple[Any, Any]] = {}
        query = sa.select(domains.c.domain, domains.c.mx_records, domains.c.domain_reputation)
        query = query.where(domains.c.domain.in_(sa.bindparam("names", expanding=True)))
        for chunk in _chunks(sorted(names), BATCH):
            for name, mx, reputation in conn.execute(query, {"names": chunk}):
                found[name] = (json.loads(mx), _reputation(json.loads(reputation)))
        return found

    # -- writing ---------------------------------------------------------------------------------

    def save(self, results: "pa.Table", *, backend: str, checked_at: float | None = None) -> int:
        """Keep ``results`` (a pipeline result table: ``_address`` and the result columns);
        returns how many rows were written. ``unknown`` results are not kept: they are never
        reused, and the store keeps the last verdict that said something. A stored verdict
        checked after ``checked_at`` is never replaced."""
        from listhygiene.pipeline.backends import KEY

        moment = time.time() if checked_at is None else checked_at
        known = [r for r in results.to_pylist() if r["status"] != Status.UNKNOWN.value and r[KEY]]
        if not known:
            return 0
        keys = self.hashes(r[KEY] for r in known)
        rows = [
            {
                "key": key,
                **{c: r[c] for c in _ROW_COLUMNS},
                "backend": backend,
                "checked_at": moment,
            }
            for key, r in zip(keys, known, strict=True)
        ]
        latest: dict[str, dict[str, Any]] = {}
        for r in known:
            latest[r["domain"]] = {
                "domain": r["domain"],
                "mx_records": json.dumps(list(r["mx_records"] or [])),
                "domain_reputation": json.dumps(r["domain_reputation"] or {}),
                "checked_at": moment,
            }
        with transaction(self.engine, write=True) as conn:
            for chunk in _chunks(rows, BATCH):
                conn.execute(self._upsert_verdicts(chunk))
            for chunk in _chunks(list(latest.values()), BATCH):
                conn.execute(self._upsert_domains(chunk))
        return len(rows)

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

    def _upsert_verdicts(self, rows: list[dict[str, Any]]) -> Any:
        statement = self._insert(verdicts).values(rows)
        new = statement.excluded
        return statement.on_conflict_do_update(
            index_elements=[verdicts.c.key],
            set_={
                **{c: new[c] for c in (*_ROW_COLUMNS, "backend", "checked_at")},
                "previous_status": verdicts.c.status,
                "previous_checked_at": verdicts.c.checked_at,
            },
            where=new.checked_at >= verdicts.c.checked_at,
        )

    def _upsert_domains(self, rows: list[dict[str, Any]]) -> Any:
        statement = self._insert(domains).values(rows)
        new = statement.excluded
        return statement.on_conflict_do_update(
            index_elements=[domains.c.domain],
            set_={c: new[c] for c in ("mx_records", "domain_reputation", "checked_at")},
            where=new.checked_at >= domains.c.checked_at,
        )

    # -- managing --------------------------------------------------------------------------------

    def stats(self, *, now: float | None = None) -> dict[str, Any]:
        """Counts by status and by age, and the oldest and newest verdicts."""
        moment = time.time() if now is None else now
        day = 86400.0
        ages = {"1d": day, "7d": 7 * day, "30d": 30 * day, "90d": 90 * day}
        with self.engine.connect() as conn:
            by_status = dict(
                conn.execute(
                    sa.select(verdicts.c.status, sa.func.count()).group_by(verdicts.c.status)
                ).all()
            )
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
                sa.select(sa.func.count()).where(verdicts.c.smtp_check.is_(True))
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

"""One politeness budget and one memory of mail hosts for every process sharing a store.

Mail hosts judge a fleet of workers, not a worker (PRODUCT.md, "Fleet"): two processes that each
keep two sessions to a host hold four. A :class:`HostState` is where every process given the
same ``--shared-limits`` URL takes its session slots and keeps what it learnt of a host:

- **Session slots.** A :class:`Budget` names a key (a mail host's address, a provider), the
  sessions it may have open at once and the new sessions it may start a second. :meth:`acquire`
  takes a slot of several budgets at once, all or none, in one round trip to the store; the slot
  is a *lease* that expires ``lease_seconds`` (30 s) after it was last renewed, so a process that
  dies gives its slots back by itself. Leases held for long (a tarpit) are renewed in the
  background every third of that.
- **Facts.** :meth:`learn` keeps a JSON value under a key and a name for a time (a ban and its
  end, a recipient or error limit, a greylisting delay, a domain's catch-all answer), and
  :meth:`facts` reads a key's that have not expired.

Three implementations: :class:`LocalHostState` (in the process, today's behaviour, the default),
:class:`RedisHostState` (``redis://``: a Lua script a call, the server's clock) and
:class:`PostgresHostState` (``postgresql://``: a PL/pgSQL function a call, advisory locks per
key, the server's clock). :func:`open_host_state` picks one from a URL.
"""

import asyncio
import contextlib
import json
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from listhygiene.errors import ConfigurationError, StorageError

__all__ = [
    "Budget",
    "HostState",
    "HostStateError",
    "Lease",
    "LocalHostState",
    "PostgresHostState",
    "RedisHostState",
    "open_host_state",
    "store_kind",
]

#: Seconds a lease lives unless renewed: a process that dies gives its slots back within this.
LEASE_SECONDS = 30.0
#: The key whose leases are the processes sharing the store (:meth:`HostState.join`).
MEMBERS_KEY = "fleet:members"
#: How long a refused acquirer waits before asking again when sessions, not a rate, are full.
_POLL_SECONDS = 0.05
_PREFIX = "lh:"
#: Connections of a process to a Redis store: calls beyond them wait their turn.
_REDIS_CONNECTIONS = 16


class HostStateError(StorageError):
    """The shared host state could not be used (the store is unreachable or refused a call)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """What one key may take: ``concurrency`` sessions at once, ``per_second`` new ones a
    second with a burst of ``concurrency``: the token bucket each process keeps for itself
    (``engine/pacing.py``), held in the store as the generic cell rate algorithm (one
    theoretical arrival time a key)."""

    key: str
    concurrency: int
    per_second: float

    @property
    def emission(self) -> float:
        """Seconds between starts at the rate."""
        return 1.0 / self.per_second

    @property
    def tolerance(self) -> float:
        """How far ahead of now the theoretical arrival time may be: a burst of
        ``concurrency`` starts at once."""
        return (max(1, self.concurrency) - 1) * self.emission


@dataclass(frozen=True, slots=True)
class Lease:
    """A session slot of some budgets, until released or expired."""

    id: str
    keys: tuple[str, ...]


@dataclass
class _Held:
    leases: dict[str, Lease] = field(default_factory=dict)
    renewer: asyncio.Task[None] | None = None


class HostState(ABC):
    """Session slots and facts shared by every process given the same store."""

    lease_seconds: float = LEASE_SECONDS

    def __init__(self) -> None:
        self._held = _Held()
        self._member: Lease | None = None
        self._released = asyncio.Event()

    # -- the fleet's processes ------------------------------------------------------------------

    async def join(self) -> int:
        """Count this process among the store's (a lease renewed while it lives, given back at
        :meth:`close` or when it dies) and return how many there are now."""
        if self._member is None:
            self._member = await self.acquire([Budget(MEMBERS_KEY, 1 << 30, float(1 << 30))])
        return await self.members()

    async def members(self) -> int:
        """How many processes share the store now (at least this one, once joined)."""
        return max(await self.holders(MEMBERS_KEY), 1 if self._member else 0)

    @abstractmethod
    async def holders(self, key: str) -> int:
        """How many leases of ``key`` are alive."""

    # -- session slots ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def slot(self, budgets: Sequence[Budget]) -> AsyncIterator[Lease]:
        """Hold a slot of every budget while the block runs (waiting for one as long as it
        takes); the lease is renewed while held and released after."""
        lease = await self.acquire(budgets)
        try:
            yield lease
        finally:
            await self.release(lease)

    async def acquire(self, budgets: Sequence[Budget]) -> Lease:
        """A slot of every budget, all at once: waits while any is full."""
        ordered = sorted(budgets, key=lambda b: b.key)  # one order for all: no deadlock
        lease = Lease(secrets.token_hex(8), tuple(b.key for b in ordered))
        while True:
            wait = await self._try(ordered, lease)
            if wait <= 0:
                break
            # asked again after the wait, or at once when this process gives a slot back
            released = self._released
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), min(wait, 1.0))
        self._hold(lease)
        return lease

    async def release(self, lease: Lease) -> None:
        self._held.leases.pop(lease.id, None)
        await self._release(lease)
        released, self._released = self._released, asyncio.Event()
        released.set()

    def _hold(self, lease: Lease) -> None:
        held = self._held
        held.leases[lease.id] = lease
        if held.renewer is None or held.renewer.done():
            held.renewer = asyncio.get_running_loop().create_task(self._renew_while_held())

    async def _renew_while_held(self) -> None:
        while self._held.leases:
            await asyncio.sleep(self.lease_seconds / 3)
            leases = list(self._held.leases.values())
            if leases:
                with contextlib.suppress(HostStateError):  # an expired slot is given back
                    await self._renew(leases)

    # -- facts -----------------------------------------------------------------------------------

    @abstractmethod
    async def learn(self, key: str, name: str, value: Any, ttl: float) -> None:
        """Keep ``value`` (JSON) as ``name`` of ``key`` for ``ttl`` seconds."""

    async def learn_many(self, key: str, values: Mapping[str, Any], ttl: float) -> None:
        """:meth:`learn` each of ``values``, in their order (one round trip where the store
        allows it)."""
        for name, value in values.items():
            await self.learn(key, name, value, ttl)

    @abstractmethod
    async def facts(self, key: str) -> dict[str, Any]:
        """The facts of ``key`` that have not expired, by name."""

    # -- what each store does --------------------------------------------------------------------

    @abstractmethod
    async def _try(self, budgets: Sequence[Budget], lease: Lease) -> float:
        """Take the slots if all are free (0), else the seconds to wait before asking again."""

    @abstractmethod
    async def _release(self, lease: Lease) -> None: ...

    @abstractmethod
    async def _renew(self, leases: Sequence[Lease]) -> None: ...

    async def close(self) -> None:
        member, self._member = self._member, None
        if member is not None:
            with contextlib.suppress(HostStateError):  # else it expires by itself
                await self.release(member)
        renewer = self._held.renewer
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer


def _rate_wait(budget: Budget, tat: float | None, now: float) -> float:
    """Seconds until ``budget``'s rate allows a start (GCRA), 0 when it does now."""
    arrival = max(tat if tat is not None else now, now)
    return max(0.0, arrival - budget.tolerance - now)


class LocalHostState(HostState):
    """This process's own slots and facts (the default: no store)."""

    def __init__(self) -> None:
        super().__init__()
        self._leases: dict[str, dict[str, float]] = {}  # key -> lease id -> expiry
        self._tats: dict[str, float] = {}  # key -> theoretical arrival time of the next start
        self._facts: dict[str, dict[str, tuple[Any, float]]] = {}

    async def _try(self, budgets: Sequence[Budget], lease: Lease) -> float:
        now = time.monotonic()
        wait = 0.0
        for budget in budgets:
            leases = self._leases.setdefault(budget.key, {})
            for gone in [i for i, until in leases.items() if until <= now]:
                del leases[gone]
            if len(leases) >= budget.concurrency:
                wait = max(wait, _POLL_SECONDS)
            wait = max(wait, _rate_wait(budget, self._tats.get(budget.key), now))
        if wait:
            return wait
        for budget in budgets:
            self._leases[budget.key][lease.id] = now + self.lease_seconds
            self._tats[budget.key] = max(self._tats.get(budget.key, now), now) + budget.emission
        return 0.0

    async def _release(self, lease: Lease) -> None:
        for key in lease.keys:
            self._leases.get(key, {}).pop(lease.id, None)

    async def holders(self, key: str) -> int:
        now = time.monotonic()
        return sum(1 for until in self._leases.get(key, {}).values() if until > now)

    async def _renew(self, leases: Sequence[Lease]) -> None:
        until = time.monotonic() + self.lease_seconds
        for lease in leases:
            for key in lease.keys:
                if lease.id in self._leases.get(key, {}):
                    self._leases[key][lease.id] = until

    async def learn(self, key: str, name: str, value: Any, ttl: float) -> None:
        self._facts.setdefault(key, {})[name] = (value, time.monotonic() + ttl)

    async def facts(self, key: str) -> dict[str, Any]:
        now = time.monotonic()
        return {n: v for n, (v, until) in self._facts.get(key, {}).items() if until > now}


# -- Redis ---------------------------------------------------------------------------------------

_REDIS_TRY = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id, ttl = ARGV[1], tonumber(ARGV[2])
local n = #KEYS / 2
local wait = 0
local tats = {}
for i = 1, n do
  local leases, rate = KEYS[2 * i - 1], KEYS[2 * i]
  local cap = tonumber(ARGV[3 * i])
  local emission, tolerance = tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  if redis.call('ZCARD', leases) >= cap then wait = math.max(wait, tonumber(ARGV[#ARGV])) end
  local tat = math.max(tonumber(redis.call('GET', rate) or now), now)
  tats[i] = tat + emission
  wait = math.max(wait, tat - tolerance - now)
end
if wait > 0 then return tostring(wait) end
for i = 1, n do
  local leases, rate = KEYS[2 * i - 1], KEYS[2 * i]
  redis.call('ZADD', leases, now + ttl, id)
  redis.call('EXPIRE', leases, math.ceil(ttl) + 1)
  redis.call('SET', rate, tostring(tats[i]), 'EX', math.ceil(tats[i] - now) + 1)
end
return '0'
"""

_REDIS_RENEW = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
for i = 1, #KEYS do
  local id = ARGV[i + 1]
  if redis.call('ZSCORE', KEYS[i], id) then
    redis.call('ZADD', KEYS[i], 'XX', until_, id)
    redis.call('EXPIRE', KEYS[i], math.ceil(tonumber(ARGV[1])) + 1)
  end
end
return 0
"""

_REDIS_HOLDERS = """
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], '(' .. (tonumber(t[1]) + tonumber(t[2]) / 1000000), '+inf')
"""

_REDIS_FACTS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[1] == 'learn' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[2] .. '|until', tostring(now + tonumber(ARGV[4])))
  local left = redis.call('PTTL', KEYS[1])
  local want = math.ceil(tonumber(ARGV[4]) * 1000)
  if left < want then redis.call('PEXPIRE', KEYS[1], want) end
  return {}
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
local until_ = {}
for i = 1, #all, 2 do
  local name = all[i]
  if string.sub(name, -6) == '|until' then
    until_[string.sub(name, 1, -7)] = tonumber(all[i + 1])
  end
end
for i = 1, #all, 2 do
  local name = all[i]
  if string.sub(name, -6) ~= '|until' and (until_[name] or 0) > now then
    table.insert(out, name)
    table.insert(out, all[i + 1])
  end
end
return out
"""


class RedisHostState(HostState):
    """Slots and facts in Redis: one script call a request (its own clock for every process)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        import redis.asyncio as redis

        self.url = url
        # A bounded pool that makes a burst wait for a connection (a run starts hundreds of
        # domains at once, each asking the store), where redis-py's default pool refuses the
        # 101st caller ("Too many connections") and the engine would lose the fleet's budget.
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=_REDIS_CONNECTIONS,
            timeout=5,
            socket_timeout=5,
            socket_connect_timeout=5,
        )
        self._client = redis.Redis.from_pool(pool)
        self._try_script = self._client.register_script(_REDIS_TRY)
        self._renew_script = self._client.register_script(_REDIS_RENEW)
        self._facts_script = self._client.register_script(_REDIS_FACTS)
        self._holders_script = self._client.register_script(_REDIS_HOLDERS)

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        from redis.exceptions import RedisError

        try:
            yield
        except (RedisError, OSError) as exc:
            raise HostStateError(f"shared limits at {_shown(self.url)}: {exc}") from None

    async def _try(self, budgets: Sequence[Budget], lease: Lease) -> float:
        keys: list[str] = []
        args: list[Any] = [lease.id, self.lease_seconds]
        for budget in budgets:
            keys += [f"{_PREFIX}{budget.key}:leases", f"{_PREFIX}{budget.key}:rate"]
            args += [budget.concurrency, budget.emission, budget.tolerance]
        args.append(_POLL_SECONDS)
        async with self._errors():
            reply = await self._try_script(keys=keys, args=args)
        return float(reply)

    async def _release(self, lease: Lease) -> None:
        async with self._errors(), self._client.pipeline(transaction=False) as pipe:
            for key in lease.keys:
                pipe.zrem(f"{_PREFIX}{key}:leases", lease.id)
            await pipe.execute()

    async def holders(self, key: str) -> int:
        async with self._errors():
            return int(await self._holders_script(keys=[f"{_PREFIX}{key}:leases"], args=[]))

    async def _renew(self, leases: Sequence[Lease]) -> None:
        keys: list[str] = []
        ids: list[str] = []
        for lease in leases:
            for key in lease.keys:
                keys.append(f"{_PREFIX}{key}:leases")
                ids.append(lease.id)
        async with self._errors():
            await self._renew_script(keys=keys, args=[self.lease_seconds, *ids])

    async def learn(self, key: str, name: str, value: Any, ttl: float) -> None:
        async with self._errors():
            await self._facts_script(
                keys=[f"{_PREFIX}{key}:facts"], args=["learn", name, json.dumps(value), ttl]
            )

    async def learn_many(self, key: str, values: Mapping[str, Any], ttl: float) -> None:
        async with self._errors(), self._client.pipeline(transaction=True) as pipe:
            for name, value in values.items():
                await self._facts_script(
                    keys=[f"{_PREFIX}{key}:facts"],
                    args=["learn", name, json.dumps(value), ttl],
                    client=pipe,
                )
            await pipe.execute()

    async def facts(self, key: str) -> dict[str, Any]:
        async with self._errors():
            reply = await self._facts_script(keys=[f"{_PREFIX}{key}:facts"], args=["read"])
        pairs = [item.decode() if isinstance(item, bytes) else item for item in reply]
        return {pairs[i]: json.loads(pairs[i + 1]) for i in range(0, len(pairs), 2)}

    async def close(self) -> None:
        await super().close()
        await self._client.aclose()


# -- PostgreSQL ----------------------------------------------------------------------------------

_PG_SETUP = """
CREATE TABLE IF NOT EXISTS listhygiene_host_leases (
    key text NOT NULL, lease text NOT NULL, expires_at double precision NOT NULL,
    PRIMARY KEY (key, lease));
CREATE TABLE IF NOT EXISTS listhygiene_host_rates (
    key text PRIMARY KEY, tat double precision NOT NULL);
CREATE TABLE IF NOT EXISTS listhygiene_host_facts (
    key text NOT NULL, name text NOT NULL, value jsonb NOT NULL,
    expires_at double precision NOT NULL, PRIMARY KEY (key, name));
CREATE OR REPLACE FUNCTION listhygiene_host_slot_v2(
    keys text[], caps int[], emissions float8[], tolerances float8[], lease text, ttl float8,
    poll float8)
RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    now float8 := extract(epoch FROM clock_timestamp());
    wait float8 := 0;
    active int;
    due float8;
BEGIN
    FOR i IN 1 .. array_length(keys, 1) LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('listhygiene:' || keys[i], 0));
    END LOOP;
    FOR i IN 1 .. array_length(keys, 1) LOOP
        DELETE FROM listhygiene_host_leases WHERE key = keys[i] AND expires_at <= now;
        SELECT count(*) INTO active FROM listhygiene_host_leases WHERE key = keys[i];
        IF active >= caps[i] THEN wait := greatest(wait, poll); END IF;
        SELECT r.tat INTO due FROM listhygiene_host_rates r WHERE r.key = keys[i];
        wait := greatest(wait, greatest(coalesce(due, now), now) - tolerances[i] - now);
    END LOOP;
    IF wait > 0 THEN RETURN wait; END IF;
    FOR i IN 1 .. array_length(keys, 1) LOOP
        INSERT INTO listhygiene_host_leases VALUES (keys[i], lease, now + ttl);
        INSERT INTO listhygiene_host_rates VALUES (keys[i], now + emissions[i])
            ON CONFLICT (key) DO UPDATE
            SET tat = greatest(listhygiene_host_rates.tat, now) + emissions[i];
    END LOOP;
    RETURN 0;
END $$;
"""
#: Serialises the set-up of several processes starting at once (CREATE OR REPLACE FUNCTION is
#: not safe to run concurrently).
_PG_SETUP_LOCK = 0x6C68_686F_7374_7374  # "lhhostst"


class PostgresHostState(HostState):
    """Slots and facts in PostgreSQL: one function call a request, on one connection of this
    process (autocommit), per-key advisory locks, the server's clock."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            import psycopg

            conninfo = _psycopg_conninfo(self.url)
            self._conn = await psycopg.AsyncConnection.connect(
                conninfo, autocommit=True, connect_timeout=5, prepare_threshold=0
            )
            await self._conn.execute("SELECT pg_advisory_lock(%s)", (_PG_SETUP_LOCK,))
            try:
                await self._conn.execute(_PG_SETUP, prepare=False)  # several statements
            finally:
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (_PG_SETUP_LOCK,))
        return self._conn

    async def _call(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        import psycopg

        async with self._lock:  # one connection: one statement at a time
            try:
                conn = await self._connection()
                cursor = await conn.execute(query, params)
                return list(await cursor.fetchall()) if cursor.description else []
            except (psycopg.Error, OSError) as exc:
                if self._conn is not None:
                    await self._conn.close()
                self._conn = None
                raise HostStateError(f"shared limits at {_shown(self.url)}: {exc}") from None

    async def _try(self, budgets: Sequence[Budget], lease: Lease) -> float:
        rows = await self._call(
            "SELECT listhygiene_host_slot_v2(%s, %s, %s, %s, %s, %s, %s)",
            (
                [b.key for b in budgets],
                [b.concurrency for b in budgets],
                [b.emission for b in budgets],
                [b.tolerance for b in budgets],
                lease.id,
                self.lease_seconds,
                _POLL_SECONDS,
            ),
        )
        return float(rows[0][0])

    async def _release(self, lease: Lease) -> None:
        await self._call(
            "DELETE FROM listhygiene_host_leases WHERE lease = %s AND key = ANY(%s)",
            (lease.id, list(lease.keys)),
        )

    async def holders(self, key: str) -> int:
        rows = await self._call(
            "SELECT count(*) FROM listhygiene_host_leases WHERE key = %s "
            "AND expires_at > extract(epoch FROM clock_timestamp())",
            (key,),
        )
        return int(rows[0][0])

    async def _renew(self, leases: Sequence[Lease]) -> None:
        await self._call(
            "UPDATE listhygiene_host_leases SET expires_at = "
            "extract(epoch FROM clock_timestamp()) + %s WHERE lease = ANY(%s)",
            (self.lease_seconds, [lease.id for lease in leases]),
        )

    async def learn(self, key: str, name: str, value: Any, ttl: float) -> None:
        await self._call(
            "INSERT INTO listhygiene_host_facts VALUES "
            "(%s, %s, %s::jsonb, extract(epoch FROM clock_timestamp()) + %s) "
            "ON CONFLICT (key, name) DO UPDATE SET value = EXCLUDED.value, "
            "expires_at = EXCLUDED.expires_at",
            (key, name, json.dumps(value), ttl),
        )

    async def facts(self, key: str) -> dict[str, Any]:
        rows = await self._call(
            "SELECT name, value FROM listhygiene_host_facts WHERE key = %s "
            "AND expires_at > extract(epoch FROM clock_timestamp())",
            (key,),
        )
        return dict(rows)

    async def close(self) -> None:
        await super().close()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _psycopg_conninfo(url: str) -> str:
    """A libpq connection string from a SQLAlchemy-style URL (``postgresql+psycopg://``)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True) if "://" in url else url


def store_kind(url: str | None) -> str:
    """``"local"``, ``"redis"`` or ``"postgresql"``: the store a ``--shared-limits`` URL names."""
    if not url or url.strip().lower() == "none":
        return "local"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("redis", "rediss", "unix"):
        return "redis"
    if scheme.split("+", 1)[0] in ("postgresql", "postgres"):
        return "postgresql"
    raise ConfigurationError(
        f"--shared-limits {url!r}: expected redis://host:port/db, postgresql://... or none"
    )


def open_host_state(url: str | None) -> HostState:
    """The host state of ``--shared-limits``: ``redis://``, ``postgresql://``, or ``none`` /
    empty for this process alone. Nothing is connected before the first call."""
    kind = store_kind(url)
    if kind == "redis":
        assert url is not None
        return RedisHostState(url)
    if kind == "postgresql":
        assert url is not None
        return PostgresHostState(url)
    return LocalHostState()


def budgets_for(
    address: str,
    provider: str | None,
    limits: Mapping[str, tuple[int, float]],
    via: str | None = None,
) -> list[Budget]:
    """The budgets one session takes: its host address's, and its provider's when it has one
    (``limits``: ``"host"``, ``"provider"`` for a provider not in it, and provider names ->
    (sessions at once, new sessions a second)). Through a proxy (``via``, its address
    ``host:port``) the host and the provider see the proxy's address, so its sessions have
    budgets of their own, ``host:ADDRESS via PROXY``; without one the keys are as they were."""
    suffix = f" via {via}" if via else ""
    concurrency, rate = limits["host"]
    out = [Budget(f"host:{address}{suffix}", concurrency, rate)]
    if provider is not None:
        concurrency, rate = limits.get(provider, limits["provider"])
        out.append(Budget(f"provider:{provider}{suffix}", concurrency, rate))
    return out

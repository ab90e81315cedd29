"""Per-provider budgets and proxies (issue 26, item 3; PRODUCT.md "Fleet"): each big provider has
its own sessions at once and new sessions a second, shipped with reasons and changed by a TOML
file (``--provider-limits``); a SOCKS proxy per provider (``--socks-proxy google=URL,...``); the
budgets of a session through a proxy are held per proxy address, as the provider sees it.

Real sockets to the sandbox, real SOCKS5 proxies (pproxy) whose sessions leave from addresses of
their own (127.0.0.2, 127.0.0.3: what the sandbox's provider front door counts a client by), the
machine's real Redis for the fleet's store. Behaviour is asserted from what the hosts saw.
"""

import asyncio
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from listhygiene.engine import Engine, EngineSettings
from listhygiene.engine.host_state import (
    MEMBERS_KEY,
    Budget,
    HostStateError,
    Lease,
    LocalHostState,
    budgets_for,
)
from listhygiene.engine.pacing import Pacer
from listhygiene.engine.provider_limits import (
    BUDGETED,
    ProviderLimit,
    provider_budgets,
    read_provider_limits,
    shipped_limits,
)
from listhygiene.engine.providers import OTHER, PROVIDERS, SELF_HOSTED
from listhygiene.engine.proxies import parse_proxies, proxy_address
from listhygiene.errors import ConfigurationError
from listhygiene.sandbox import Sandbox
from listhygiene.statuses import Reason, Status
from tests.conftest import empty_redis, engine_defaults, sandbox_settings

PEOPLE = ["ann", "bob", "cat", "dan"]
#: Google-like hosts (the engine's ``mx_provider`` reads ``google.com``): one pair a test, so
#: the sandbox's front door of each counts one test's sessions.
PACED = ("alt1.aspmx.l.google.com", "alt2.aspmx.l.google.com")
FLEET = ("alt3.aspmx.l.google.com", "alt4.aspmx.l.google.com")
ROUTED = "aspmx.l.google.com"
YAHOO = ("mx1.yahoodns.net", "mx2.yahoodns.net")


def domain(host: str) -> dict[str, object]:
    return {"mx": [{"preference": 10, "host": host}], "mailboxes": PEOPLE}


WORLD = {
    "domains": {
        **{f"paced{i}.test": domain(PACED[i % 2]) for i in range(6)},
        **{f"yahooish{i}.test": domain(YAHOO[i % 2]) for i in range(6)},
        **{f"fleet{i}.test": domain(FLEET[i % 2]) for i in range(8)},
        "routed.test": domain(ROUTED),
        "own.test": domain("mx.own.test"),
    },
    # each session lasts a few round trips: sessions that may overlap do
    "hosts": {
        **{host: {"latency_ms": 120} for host in (*PACED, *YAHOO, *FLEET)},
        ROUTED: {},
        "mx.own.test": {},
    },
    # front doors that count the connections open at once from each client address over their
    # hosts, and never refuse one
    "providers": {
        "paced": {"hosts": list(PACED)},
        "yahoo": {"hosts": list(YAHOO)},
        "fleet": {"hosts": list(FLEET)},
    },
}

#: The world of this module's ``sandbox`` (tests/conftest.py).
SANDBOX_WORLD = WORLD


def settings(sandbox: Sandbox, **changes: object) -> EngineSettings:
    """The engine's own time limits and retries, not the suite's short ones: what these tests
    have always run with."""
    timing = engine_defaults("dns_timeout", "smtp_timeout", "retry_delays")
    return sandbox_settings(sandbox, **(timing | changes))


async def verify(engine: Engine, addresses: list[str]) -> dict[str, tuple[Status, Reason | None]]:
    try:
        return {r.email: (r.status, r.reason) async for r in engine.verify_many(addresses)}
    finally:
        await engine.aclose()


def front_door(sandbox: Sandbox, name: str) -> int:
    """The most connections one client address held at once to the hosts of a provider."""
    return int(sandbox.defence_report()["providers"][name]["max_active"])


def most_at_once(sandbox: Sandbox, hosts: tuple[str, ...], slack: float = 0.03) -> int:
    """The most connections open at once to ``hosts`` together, from any client. A close is
    taken ``slack`` early: a session's close may reach the host after the next one's connect."""
    events = []
    for host in hosts:
        stats = sandbox.stats(host)
        events += [(at, 1) for at in stats.opened_at] + [(at - slack, -1) for at in stats.closed_at]
    most = active = 0
    for _, change in sorted(events):
        active += change
        most = max(most, active)
    return most


def limits_file(tmp_path: Path, text: str, name: str = "limits.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the shipped defaults and a user's file ------------------------------------------------------


def test_the_shipped_defaults_name_every_big_provider_and_only_them() -> None:
    shipped = shipped_limits()
    assert set(BUDGETED) == set(PROVIDERS) - {SELF_HOSTED, OTHER}
    assert set(shipped) == set(BUDGETED)  # a provider added to providers.py needs its line
    for limit in shipped.values():
        assert (limit.concurrency or 0) >= 1
        assert (limit.rate or 0) > 0
    budgets = EngineSettings(helo="verifier.test").provider_budgets()
    assert budgets["google"] == (5, 2.0)
    assert budgets["yahoo"] == (2, 1.0)
    # never above the general settings: they cap every shipped value
    assert all(c <= 5 and r <= 2.0 for c, r in budgets.values())
    lower = EngineSettings(helo="verifier.test", provider_concurrency=1, provider_rate=0.5)
    assert set(lower.provider_budgets().values()) == {(1, 0.5)}


def test_a_users_file_sets_a_providers_values_as_given(tmp_path: Path) -> None:
    path = limits_file(
        tmp_path, "[google]\nconcurrency = 1\n\n[yahoo]\nconcurrency = 8\nrate = 3\n"
    )
    assert read_provider_limits(path) == {
        "google": ProviderLimit(1, None),
        "yahoo": ProviderLimit(8, 3.0),
    }
    budgets = provider_budgets(path, concurrency=5, rate=2.0)
    assert budgets["google"] == (1, 2.0)  # the rate it does not give: the shipped one
    assert budgets["yahoo"] == (8, 3.0)  # above the general settings too: as given
    assert budgets["microsoft"] == (3, 1.0)  # not named: the shipped default


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[gogle]\nconcurrency = 1\n", "unknown provider 'gogle'; the providers: google, micro"),
        ("[other]\nrate = 1\n", "'other' has no budget of its own"),
        ("[default]\nrate = 1\n", "unknown provider 'default'"),
        ("[google]\nconcurrency = 0\n", "[google] concurrency = 0: expected a whole number"),
        ("[google]\nconcurrency = 1.5\n", "[google] concurrency = 1.5: expected a whole number"),
        ("[google]\nrate = -1\n", "[google] rate = -1: expected new sessions a second"),
        ("[google]\nrate = 0\n", "[google] rate = 0: expected new sessions a second"),
        ("[google]\nconcurency = 1\n", "[google] 'concurency': expected concurrency or rate"),
        ("google = 3\n", "google must be a table"),
        ("[google\nrate = 1\n", "not valid TOML: "),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file(tmp_path: Path, text: str, said: str) -> None:
    path = limits_file(tmp_path, text)
    with pytest.raises(ConfigurationError) as raised:
        read_provider_limits(path)
    message = str(raised.value)
    assert message.startswith(f"--provider-limits {path}: ")
    assert said in message
    assert "\n" not in message
    with pytest.raises(ValueError, match="--provider-limits"):  # at settings time
        EngineSettings(helo="verifier.test", provider_limits=path)


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigurationError, match=r"missing.toml: cannot be read \(No such file"):
        read_provider_limits(missing)


def test_the_cli_refuses_a_bad_file_in_one_line(tmp_path: Path) -> None:
    path = limits_file(tmp_path, "[gogle]\nconcurrency = 1\n", "bad.toml")
    listing = tmp_path / "list.csv"
    listing.write_text("email\nann@paced0.test\n")
    done = subprocess.run(
        [
            *[sys.executable, "-m", "listhygiene.cli", "clean", str(listing)],
            *["--out", str(tmp_path / "out"), "--provider-limits", str(path)],
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1
    assert f"--provider-limits {path}: unknown provider 'gogle'" in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("gogle=socks5://127.0.0.1:1080", "unknown provider 'gogle'"),
        ("other=socks5://127.0.0.1:1080", "'other' is not one provider"),
        ("google=socks5://127.0.0.1:1080,google=none", "'google' is given twice"),
        ("google=socks5://u:secret@127.0.0.1", "expected a host and a port"),
        ("socks5://u:secret@127.0.0.1:1080,google=none", "one URL for every session, or"),
        ("google=socks5://127.0.0.1:1,socks5://127.0.0.1:2", "is not provider=URL"),
        ("ftp://127.0.0.1:21", "expected socks5://[user:pass@]host:port"),
    ],
)
def test_a_bad_proxy_setting_is_one_line(value: str, said: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_proxies(value)
    message = str(raised.value)
    assert said in message
    assert "\n" not in message
    assert "secret" not in message
    with pytest.raises(ValueError, match="--socks-proxy"):
        EngineSettings(helo="verifier.test", socks_proxy=value)


def test_which_proxy_a_provider_takes() -> None:
    one = EngineSettings(helo="verifier.test", socks_proxy="socks5://u:p@10.0.0.1:1080")
    assert one.proxy_for("google") == one.proxy_for(None) == "socks5://u:p@10.0.0.1:1080"
    each = EngineSettings(
        helo="verifier.test",
        socks_proxy="google=socks5://10.0.0.1:1080, Microsoft=socks5://10.0.0.2:1080,*=none",
    )
    assert each.proxy_for("google") == "socks5://10.0.0.1:1080"
    assert each.proxy_for("microsoft") == "socks5://10.0.0.2:1080"
    assert each.proxy_for("yahoo") is each.proxy_for(None) is None
    rest = EngineSettings(helo="verifier.test", socks_proxy="*=socks5://10.0.0.3:1080,google=none")
    assert rest.proxy_for("google") is None
    assert rest.proxy_for(None) == rest.proxy_for("yahoo") == "socks5://10.0.0.3:1080"
    assert EngineSettings(helo="verifier.test", socks_proxy="none").socks_proxy is None
    assert proxy_address("socks5://user:secret@Proxy.Example:1080") == "proxy.example:1080"
    assert proxy_address("socks5://[::1]:1080") == "[::1]:1080"


# -- the pacer -----------------------------------------------------------------------------------


class RecordingState(LocalHostState):
    """A shared store in the process that keeps the budgets every session's slot was asked of
    (not the process's membership of the fleet, :meth:`HostState.join`)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    async def acquire(self, budgets: Sequence[Budget]) -> Lease:
        if [b.key for b in budgets] != [MEMBERS_KEY]:
            self.asked.append([b.key for b in budgets])
        return await super().acquire(budgets)


def test_without_a_proxy_the_store_keys_are_as_they_were() -> None:
    limits = {"host": (2, 5.0), "provider": (5, 2.0), "google": (1, 0.5)}
    plain = budgets_for("192.0.2.1", "google", limits)
    assert plain == [Budget("host:192.0.2.1", 2, 5.0), Budget("provider:google", 1, 0.5)]
    assert budgets_for("192.0.2.1", "google", limits, None) == plain
    assert budgets_for("192.0.2.1", None, limits) == [Budget("host:192.0.2.1", 2, 5.0)]
    via = budgets_for("192.0.2.1", "google", limits, "10.0.0.1:1080")
    assert [b.key for b in via] == [
        "host:192.0.2.1 via 10.0.0.1:1080",
        "provider:google via 10.0.0.1:1080",
    ]
    assert budgets_for("192.0.2.1", "zoho", limits)[1] == Budget("provider:zoho", 5, 2.0)


GOOGLE_MX = [f"192.0.2.{i}" for i in range(1, 7)]  # six MX addresses of google


async def hold_sessions(pacer: Pacer, hosts: list[str], counts: dict[str, int], *keys: str) -> None:
    """A google session to each of ``hosts`` at once, each held 50 ms, counting those open
    under each of ``keys`` (``counts[key]`` now, ``counts[key + " most"]`` the most)."""

    async def one(host: str) -> None:
        async with pacer.session(host, "google"):
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
                counts[key + " most"] = max(counts.get(key + " most", 0), counts[key])
            await asyncio.sleep(0.05)
            for key in keys:
                counts[key] -= 1

    await asyncio.gather(*(one(host) for host in hosts))


async def two_pacers(
    proxies: tuple[str | None, str | None], path: Path
) -> tuple[dict[str, int], set[tuple[str, ...]]]:
    """Two processes' pacers sharing one store, six google sessions each at once: the counts
    (``all``: over both; ``pacer0``, ``pacer1``) and the budgets the store was asked of."""
    state, counts = RecordingState(), dict[str, int]()
    pacers = [
        Pacer(
            EngineSettings(
                helo="verifier.test",
                provider_limits=path,
                host_rate=100,
                socks_proxy=f"google={proxy}" if proxy else None,
            ),
            state,
        )
        for proxy in proxies
    ]
    await asyncio.gather(
        *(hold_sessions(p, GOOGLE_MX, counts, "all", f"pacer{i}") for i, p in enumerate(pacers))
    )
    return counts, {tuple(keys) for keys in state.asked}


async def test_two_proxies_of_one_provider_hold_two_budgets(tmp_path: Path) -> None:
    """Two processes send google's sessions through two proxies: each proxy address has
    google's budget (2 here), so together they hold 4 at once; through one proxy, or none, the
    two share one budget of 2, and without a proxy the store's keys are those of before."""
    path = limits_file(tmp_path, "[google]\nconcurrency = 2\nrate = 100\n")
    one, two = "socks5://127.0.0.2:1080", "socks5://127.0.0.3:1080"

    counts, asked = await two_pacers((one, two), path)
    assert counts["pacer0 most"] == counts["pacer1 most"] == 2
    assert counts["all most"] == 4
    assert asked == {
        (f"host:{h} via 127.0.0.{n}:1080", f"provider:google via 127.0.0.{n}:1080")
        for h in GOOGLE_MX
        for n in (2, 3)
    }

    counts, _ = await two_pacers((one, one), path)
    assert counts["all most"] == 2

    counts, asked = await two_pacers((None, None), path)
    assert counts["all most"] == 2
    assert asked == {(f"host:{h}", "provider:google") for h in GOOGLE_MX}


class LostState(LocalHostState):
    """A store that is gone."""

    async def acquire(self, budgets: Sequence[Budget]) -> Lease:
        raise HostStateError("the store at redis://127.0.0.1:1/0 is unreachable")


async def test_without_the_store_each_provider_gets_one_session_at_half_its_rate(
    tmp_path: Path,
) -> None:
    path = limits_file(tmp_path, "[google]\nconcurrency = 4\nrate = 100\n")
    pacer = Pacer(
        EngineSettings(helo="verifier.test", provider_limits=path, host_rate=100), LostState()
    )
    counts: dict[str, int] = {}
    await hold_sessions(pacer, GOOGLE_MX[:4], counts, "google")
    assert counts["google most"] == 1
    assert pacer._limits()["google"] == (1, 50.0)


# -- real sessions -------------------------------------------------------------------------------


async def test_a_users_file_paces_one_provider_and_not_another(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """google lowered to one session at once, yahoo raised to four: google's hosts together
    never see two sessions from us, yahoo's see more than its shipped two."""
    for host in (*PACED, *YAHOO):
        sandbox.stats(host).reset()
    path = limits_file(
        tmp_path, "[google]\nconcurrency = 1\n\n[yahoo]\nconcurrency = 4\nrate = 10\n"
    )
    engine = Engine(settings(sandbox, provider_limits=path))
    addresses = [
        f"{p}@{kind}{i}.test" for kind in ("paced", "yahooish") for i in range(6) for p in PEOPLE
    ]
    results = await verify(engine, addresses)
    assert {status for status, _ in results.values()} == {Status.VALID}
    assert most_at_once(sandbox, PACED) == 1
    assert front_door(sandbox, "paced") <= 1 + 1  # as the host counts it (a close may lag)
    assert most_at_once(sandbox, YAHOO) >= 3


@pytest.fixture
def start_proxy(
    start_socks_proxy: Callable[..., tuple[str, subprocess.Popen[bytes]]],
) -> Callable[[str], tuple[str, subprocess.Popen[bytes]]]:
    """Starts real SOCKS5 proxies on loopback; each one's sessions leave from ``source``
    (127.0.0.x), the address a mail host sees."""
    return start_socks_proxy


async def test_a_proxy_for_one_provider_carries_its_sessions_only(
    sandbox: Sandbox, start_proxy: Callable[[str], tuple[str, subprocess.Popen[bytes]]]
) -> None:
    url, proxy = start_proxy("127.0.0.2")
    addresses = [f"{p}@routed.test" for p in PEOPLE] + [f"{p}@own.test" for p in PEOPLE]
    config = settings(sandbox, socks_proxy=f"google={url}", smtp_timeout=2.0)
    results = await verify(Engine(config), addresses)
    assert {status for status, _ in results.values()} == {Status.VALID}
    proxy.kill()  # SIGKILL: pproxy may linger on SIGTERM while it drains its connections
    await asyncio.to_thread(proxy.wait, 5)
    # with the proxy gone, google's host is out of reach; the other host was never behind it
    results = await verify(Engine(config), addresses)
    for address, (status, reason) in results.items():
        if address.endswith("@routed.test"):
            assert (status, reason) == (Status.UNKNOWN, Reason.SMTP_UNREACHABLE)
        else:
            assert status is Status.VALID


@pytest.fixture
def store() -> str:
    """A Redis database of this module's own, emptied (what a run learnt lives an hour)."""
    return empty_redis(11)


async def test_a_fleet_through_two_proxies_holds_a_budget_per_proxy_address(
    sandbox: Sandbox,
    store: str,
    tmp_path: Path,
    start_proxy: Callable[[str], tuple[str, subprocess.Popen[bytes]]],
) -> None:
    """Two engines share one store, each sending google's sessions through a proxy of its own
    (leaving from 127.0.0.2 and 127.0.0.3). google's front door counts each address at most
    google's budget (2) at once; both together hold more, as two budgets allow."""
    for host in FLEET:
        sandbox.stats(host).reset()
    path = limits_file(tmp_path, "[google]\nconcurrency = 2\nrate = 10\n")
    engines = [
        Engine(
            settings(
                sandbox,
                provider_limits=path,
                shared_limits=store,
                socks_proxy=f"google={start_proxy(source)[0]}",
                smtp_timeout=2.0,
            )
        )
        for source in ("127.0.0.2", "127.0.0.3")
    ]
    halves = [[f"fleet{i}.test" for i in range(n, 8, 2)] for n in (0, 1)]
    runs = await asyncio.gather(
        *(
            verify(engine, [f"{p}@{d}" for d in half for p in PEOPLE])
            for engine, half in zip(engines, halves, strict=True)
        )
    )
    assert {status for results in runs for status, _ in results.values()} == {Status.VALID}
    assert front_door(sandbox, "fleet") <= 2 + 1  # per proxy address (a close may lag)
    assert most_at_once(sandbox, FLEET) > 2

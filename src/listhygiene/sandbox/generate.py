"""Large mail worlds from a seed, for benchmarks and load tests.

Hand-written worlds name a few dozen addresses, enough to pin one behaviour each. Measuring the
engine's throughput (concurrency, connection reuse, pipelining, politeness per mail host) needs
thousands of addresses over hundreds of domains with real reply latency, and the verdict each
address must get, so that speed is never bought with wrong answers. :func:`generate_world` builds
such a world deterministically from a seed::

    gen = generate_world(42, domains=300, addresses=3000, latency_ms=20)
    with Sandbox(gen.world) as sandbox:
        results = verify_all(gen.addresses, **sandbox.engine_environment())
        wrong = {a for a in gen.addresses if verdict(results[a]) != gen.expected[a]}

The world looks like real life in the ways that matter to a verifier: several domains share one
mail host (shared hosting, ``mx<n>.hosting<k>.test``), some hosting providers run two MX hosts,
most addresses exist and some do not, and a few domains or hosts behave in one of the ways listed
in :data:`BEHAVIOURS`. The ``mix`` argument weighs those behaviours; each weight is the share of
addresses that get it (see :data:`DEFAULT_MIX`).

``expected`` is what the product's decision table says each address must get with ``check_smtp``
on, the first row that applies, and with private mail hosts allowed (as the sandbox requires).
Greylisting hosts are expected to be retried: their addresses get the verdict of the retry. "Too
many recipients" (452 4.5.3 from a host that caps RCPT per connection) asks for a new connection
and is no verdict: those addresses get their mailbox's verdict too.
"""

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from listhygiene.sandbox.world import World
from listhygiene.statuses import Reason, Status

__all__ = [
    "BEHAVIOURS",
    "DEFAULT_MIX",
    "GREYLIST_DELAY_MS",
    "HOSTILE_MIX",
    "RCPT_CAP",
    "REJECT_TARPIT_MS",
    "TARPIT_BANNER_DELAY_MS",
    "UNDEFENDED_HOSTILE_MIX",
    "GeneratedWorld",
    "generate_world",
]

Verdict = tuple[Status, Reason | None]

#: How long a greylisting host refuses a new (client, sender, recipient) triplet.
GREYLIST_DELAY_MS = 300
#: RCPT commands a ``rcpt_cap`` host takes per connection before answering 452 4.5.3.
RCPT_CAP = 5
#: Banner delay of a ``tarpit`` host: longer than any sensible per-step SMTP timeout.
TARPIT_BANNER_DELAY_MS = 60_000
#: How long a ``reject_tarpit`` host holds each rejected recipient: Exchange's TarpitInterval
#: default (docs/sandbox.md).
REJECT_TARPIT_MS = 5_000
#: Postfix's documented defaults, for a ``harvest`` host: every reply held
#: ``smtpd_error_sleep_time`` once a session has made ``smtpd_soft_error_limit`` errors, the
#: session ended at ``smtpd_hard_error_limit``.
POSTFIX_ERROR_LIMITS = {"soft_error_limit": 10, "hard_error_limit": 20, "error_sleep_ms": 1000}
#: postscreen's default greeting wait (``postscreen_greet_wait``), with its deep tests on.
POSTSCREEN = {"greet_wait_ms": 6000, "deep_tests": True}
#: Big providers' MX hosts and what the sandbox lets one client do there: limits above the
#: engine's documented defaults (5 sessions at once, 2 new a second per provider), as a
#: provider's real limits are above what a polite client does.
_PROVIDER_HOSTS = {
    "google": ("aspmx.l.google.com", "alt1.aspmx.l.google.com"),
}
_PROVIDER_LIMITS: dict[str, dict[str, Any]] = {
    "google": {"max_concurrent": 8, "max_sessions": 200, "style": "gmail"},
    "microsoft": {"max_concurrent": 8, "max_sessions": 200, "style": "microsoft"},
}
#: A disposable service's mail host from the engine's shipped list (YOPmail's).
DISPOSABLE_HOST = "smtp.yopmail.com"

#: What a mailbox is, on a domain whose mail host answers for its mailboxes.
_MAILBOX_VERDICTS: dict[str, Verdict] = {
    "valid": (Status.VALID, None),
    "unknown": (Status.INVALID, Reason.MAILBOX_NOT_FOUND),
    "role": (Status.ROLE, Reason.ROLE_ACCOUNT),
    "full": (Status.RISKY, Reason.MAILBOX_FULL),
    "disabled": (Status.INVALID, Reason.MAILBOX_DISABLED),
}
#: Behaviours of a whole domain (DNS, or catch-all): every address of it gets the same verdict.
_DOMAIN_VERDICTS: dict[str, Verdict] = {
    "catch_all": (Status.CATCHALL, Reason.CATCH_ALL),
    # a catch-all domain on a greylisting host: its catch-all probe is greylisted too
    "greylist_catch_all": (Status.CATCHALL, Reason.CATCH_ALL),
    "null_mx": (Status.INVALID, Reason.NO_MAIL_SERVER),
    "no_mx": (Status.INVALID, Reason.NO_MAIL_SERVER),
    "nxdomain": (Status.INVALID, Reason.NO_MAIL_SERVER),
    "servfail": (Status.UNKNOWN, Reason.DNS_ERROR),
    "dns_timeout": (Status.UNKNOWN, Reason.DNS_ERROR),
    # a new throwaway domain on a disposable service's mail host (which takes any local part)
    "disposable_mx": (Status.DISPOSABLE, Reason.DISPOSABLE_DOMAIN),
}
#: Behaviours of mail hosts that never tell about the mailbox (None: the mailbox's own verdict).
_HOST_VERDICTS: dict[str, Verdict | None] = {
    "implicit_mx": None,  # no MX record, the domain's A record names the host (RFC 5321 5.1)
    "greylist": None,
    "rcpt_cap": None,
    "silent": (Status.UNKNOWN, Reason.SMTP_TIMEOUT),
    "silent_mx": (Status.UNKNOWN, Reason.SMTP_TIMEOUT),  # two MX hosts, both silent
    "backup_mx": None,  # a silent primary MX, a backup that answers for the mailboxes
    "tarpit": (Status.UNKNOWN, Reason.SMTP_TIMEOUT),
    "refuse": (Status.UNKNOWN, Reason.SMTP_UNREACHABLE),
    "blocked": (Status.UNKNOWN, Reason.BLOCKED),
    # hosts that defend themselves (docs/sandbox.md): the engine must still get every verdict
    "harvest": None,  # Postfix's error sleep and limits, on domains of many dead mailboxes
    "reject_tarpit": None,  # Exchange: each rejected recipient held REJECT_TARPIT_MS
    "postscreen": None,  # a 6 s greeting test, then deep tests (a first session 450 4.3.2)
    "strict_pipelining": None,  # no PIPELINING, and pipelined commands end the session
    "require_tls": None,  # MAIL refused before STARTTLS
    "google": None,  # Google's MX hosts, one rate limit for both
    "microsoft": None,  # a Microsoft 365 tenant's MX host, one rate limit for all tenants
}
#: Mailbox shares of the domains on some hosts: harvest protection matters where many
#: mailboxes are dead (an old CRM export of a company).
_MAILBOX_SHARE = {"harvest": {"valid": 0.45, "unknown": 0.55}}

#: Every behaviour name ``mix`` accepts. Mailbox kinds (``valid``, ``unknown``, ``role``,
#: ``full``, ``disabled``) are addresses on ordinary domains; domain behaviours (``catch_all``,
#: ``null_mx``, ``no_mx``: no MX and no A, ``nxdomain``: half absent from the world, half
#: answered NXDOMAIN, ``servfail``, ``dns_timeout``, ``greylist_catch_all``: catch-all on a
#: greylisting host) apply to every address of a domain; host behaviours (``implicit_mx``,
#: ``greylist``, ``rcpt_cap``, ``silent``, ``silent_mx``: two MX hosts, both silent,
#: ``backup_mx``: a silent primary and a backup that answers, ``tarpit``: a banner after a
#: minute, ``refuse``: connection refused, ``blocked``: 550 5.7.1 naming a blocklist) apply to
#: the domains a host serves, whose mailboxes follow the mailbox kinds' proportions.
BEHAVIOURS: tuple[str, ...] = (*_MAILBOX_VERDICTS, *_DOMAIN_VERDICTS, *_HOST_VERDICTS)

#: The default mix, as shares of addresses: mostly ordinary mailboxes, some of every outcome a
#: list really has, and nothing that stalls a client (no ``silent``, ``tarpit``, ``dns_timeout``),
#: because a benchmark measures throughput.
DEFAULT_MIX: Mapping[str, float] = MappingProxyType(
    {
        "valid": 0.52,
        "unknown": 0.14,
        "role": 0.04,
        "full": 0.02,
        "disabled": 0.02,
        "catch_all": 0.07,
        "null_mx": 0.02,
        "nxdomain": 0.04,
        "implicit_mx": 0.02,
        "greylist": 0.06,
        "rcpt_cap": 0.05,
    }
)

#: The default mix and what a hostile internet adds (docs/sandbox.md, "Large worlds"): silent
#: MX pairs, backup MXes behind a silent primary, greylisting catch-all domains; the hostile
#: mix before hosts defended themselves (issue 25), kept to compare with earlier figures.
UNDEFENDED_HOSTILE_MIX: Mapping[str, float] = MappingProxyType(
    {
        **DEFAULT_MIX,
        "valid": 0.49,
        "silent_mx": 0.01,
        "backup_mx": 0.01,
        "greylist_catch_all": 0.01,
    }
)

#: The hostile mix and hosts that defend themselves as Postfix, Exchange and the big providers
#: document it (issue 25): harvest protection on domains of many dead mailboxes, Exchange's
#: tarpit, postscreen, strict pipelining, required TLS, Google's and Microsoft's MX hosts with
#: their shared rate limits, new throwaway domains on a disposable service's host. The engine
#: benchmark uses it: tail latency, retries and the hosts' own waits are part of a run's time.
HOSTILE_MIX: Mapping[str, float] = MappingProxyType(
    {
        **UNDEFENDED_HOSTILE_MIX,
        "valid": 0.28,
        "harvest": 0.06,
        "reject_tarpit": 0.02,
        "postscreen": 0.02,
        "strict_pipelining": 0.02,
        "require_tls": 0.02,
        "google": 0.06,
        "microsoft": 0.04,
        "disposable_mx": 0.01,
    }
)

_ROLE_LOCALS = ("info", "admin", "support", "sales", "postmaster", "noreply")
_DOMAIN_WORDS = (
    "acme", "anchor", "atlas", "aurora", "beacon", "boulder", "bramble", "canyon", "cedar",
    "copper", "crest", "delta", "dune", "ember", "falcon", "fern", "fjord", "glacier", "granite",
    "grove", "harbor", "hollow", "horizon", "ivory", "jasper", "juniper", "kestrel", "keystone",
    "lagoon", "lantern", "linden", "maple", "marble", "meadow", "mesa", "nimbus", "northwind",
    "oasis", "orbit", "orchid", "pioneer", "prairie", "quartz", "ridge", "river", "sequoia",
    "sierra", "summit", "timber", "tundra", "valley", "vertex", "wharf", "willow", "zenith",
    "zephyr",
)  # fmt: skip
_FIRST_NAMES = (
    "ada", "alan", "alice", "amara", "anna", "ben", "carla", "chen", "david", "diego", "elena",
    "emma", "farah", "felix", "grace", "hana", "hugo", "ines", "ivan", "jade", "james", "julia",
    "kai", "karim", "laura", "leo", "lucia", "marco", "maya", "mia", "nadia", "noah", "olga",
    "omar", "paul", "priya", "rosa", "sam", "sofia", "tariq", "tom", "vera", "yuki", "zoe",
)  # fmt: skip
_LAST_NAMES = (
    "abbott", "baker", "becker", "castro", "chen", "cohen", "costa", "dubois", "evans", "fischer",
    "garcia", "gupta", "hansen", "ito", "jensen", "kim", "kowalski", "lambert", "lopez", "martin",
    "meyer", "moreau", "nakamura", "nguyen", "novak", "okafor", "olsen", "patel", "perez", "rossi",
    "sato", "schmidt", "silva", "smith", "tanaka", "weber", "wilson", "young", "zhang",
)  # fmt: skip


@dataclass(frozen=True)
class GeneratedWorld:
    """A generated world, the addresses to verify in it and the verdict each must get."""

    world: World
    #: Every address to verify, in a shuffled but seeded order.
    addresses: tuple[str, ...]
    #: What the decision table says each address must get (``check_smtp`` on).
    expected: Mapping[str, Verdict]
    #: The behaviour of :data:`BEHAVIOURS` each address was made for, to break results down.
    kinds: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def world_json(self) -> str:
        """The world as JSON text, defaults left out; the same seed gives the same text."""
        data = self.world.model_dump(mode="json", exclude_defaults=True)
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"

    def write(self, world_path: str | Path, addresses_path: str | Path | None = None) -> None:
        """Write the world as JSON and, if a path is given, the addresses one per line."""
        Path(world_path).write_text(self.world_json(), encoding="utf-8")
        if addresses_path is not None:
            text = "".join(address + "\n" for address in self.addresses)
            Path(addresses_path).write_text(text, encoding="utf-8")


def generate_world(
    seed: int,
    *,
    domains: int = 300,
    addresses: int = 3000,
    latency_ms: int = 20,
    hosts: int | None = None,
    mix: Mapping[str, float] | None = None,
) -> GeneratedWorld:
    """A world of ``domains`` domains and ``addresses`` addresses, the same for the same seed.

    Every domain is used by at least one address. ``hosts`` is the number of mail hosts, by
    default one per three domains that take mail; each answers after ``latency_ms``. ``mix``
    replaces :data:`DEFAULT_MIX` (names from :data:`BEHAVIOURS`, weights normalised to shares of
    addresses); extend the default with ``{**DEFAULT_MIX, "silent": 0.05}``.
    """
    weights = _check_mix(DEFAULT_MIX if mix is None else mix)
    if domains < 1 or addresses < domains:
        raise ValueError(
            f"need 1 <= domains <= addresses (got domains={domains}, addresses={addresses}): "
            "every domain is used by at least one address"
        )
    if latency_ms < 0:
        raise ValueError(f"latency_ms must be >= 0 (got {latency_ms})")
    return _Generator(random.Random(seed), latency_ms).build(
        seed, domains, addresses, hosts, weights
    )


def _check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    unknown = [name for name in mix if name not in BEHAVIOURS]
    if unknown:
        raise ValueError(
            f"unknown behaviour(s) in mix: {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(BEHAVIOURS)}"
        )
    out: dict[str, float] = {}
    for name in BEHAVIOURS:  # a fixed order, whatever the order of the mapping
        weight = mix.get(name, 0.0)
        if not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"mix[{name!r}] must be a finite number >= 0 (got {weight!r})")
        if weight > 0:
            out[name] = float(weight)
    if not out:
        raise ValueError("mix gives no behaviour a positive weight")
    return out


def _apportion(
    total: int,
    weights: Sequence[float],
    *,
    minimum: Sequence[int] | None = None,
    maximum: Sequence[int] | None = None,
) -> list[int]:
    """Split ``total`` into integers proportional to ``weights`` (largest remainder), in bounds."""
    n = len(weights)
    low = list(minimum) if minimum is not None else [0] * n
    high = list(maximum) if maximum is not None else [total] * n
    if sum(low) > total or sum(high) < total:
        raise ValueError(f"cannot split {total} within bounds {low}..{high}")
    scale = sum(weights)
    quotas = [total * w / scale if scale else 0.0 for w in weights]
    counts = [min(max(math.floor(q), lo), hi) for q, lo, hi in zip(quotas, low, high, strict=True)]
    while sum(counts) < total:
        i = max((i for i in range(n) if counts[i] < high[i]), key=lambda i: quotas[i] - counts[i])
        counts[i] += 1
    while sum(counts) > total:
        i = min((i for i in range(n) if counts[i] > low[i]), key=lambda i: quotas[i] - counts[i])
        counts[i] -= 1
    return counts


@dataclass
class _Domain:
    name: str
    group: str  # "ordinary" or a domain or host behaviour
    kinds: list[str] = field(default_factory=list)  # one per address: the behaviour it was made for
    provider: list[str] = field(default_factory=list)  # its mail hosts


#: Host behaviours that need a provider of two MX hosts.
_PAIRED = ("silent_mx", "backup_mx")


class _Generator:
    def __init__(self, rng: random.Random, latency_ms: int) -> None:
        self.rng = rng
        self.latency_ms = latency_ms

    def build(
        self, seed: int, n_domains: int, n_addresses: int, n_hosts: int | None,
        weights: dict[str, float],
    ) -> GeneratedWorld:  # fmt: skip
        rng = self.rng
        names = list(weights)
        per_kind = dict(zip(names, _apportion(n_addresses, list(weights.values())), strict=True))
        mailbox_share = {k: per_kind[k] for k in _MAILBOX_VERDICTS if per_kind.get(k)}

        # Groups of domains: ordinary ones hold the mailbox kinds; each other behaviour its own.
        group_sizes: dict[str, int] = {}
        if mailbox_share:
            group_sizes["ordinary"] = sum(mailbox_share.values())
        for name in names:
            if name not in _MAILBOX_VERDICTS and per_kind[name]:
                group_sizes[name] = per_kind[name]
        groups = list(group_sizes)
        if n_domains < len(groups):
            raise ValueError(
                f"domains={n_domains} is fewer than the {len(groups)} kinds of domain this mix "
                f"and address count need ({', '.join(groups)})"
            )
        sizes = list(group_sizes.values())
        domain_counts = _apportion(n_domains, sizes, minimum=[1] * len(sizes), maximum=sizes)

        labels = [g for g, count in zip(groups, domain_counts, strict=True) for _ in range(count)]
        rng.shuffle(labels)
        all_domains = [
            _Domain(f"{rng.choice(_DOMAIN_WORDS)}{i}.test", label)
            for i, label in enumerate(labels, start=1)
        ]
        by_group = {g: [d for d in all_domains if d.group == g] for g in groups}
        for group, members in by_group.items():
            kinds = self._kinds_of(group, group_sizes[group], mailbox_share)
            rng.shuffle(kinds)
            counts = self._spread(len(kinds), len(members))
            start = 0
            for domain, count in zip(members, counts, strict=True):
                domain.kinds = kinds[start : start + count]
                start += count

        hosts = self._assign_hosts(all_domains, n_hosts)
        return self._assemble(seed, all_domains, hosts)

    def _kinds_of(self, group: str, size: int, mailbox_share: dict[str, int]) -> list[str]:
        """The behaviour of each address of a group, before shuffling."""
        if group == "ordinary":
            return [k for k, count in mailbox_share.items() for _ in range(count)]
        if group in _DOMAIN_VERDICTS:
            return [group] * size
        # A host behaviour: its mailboxes follow the ordinary proportions (all valid if none).
        share = _MAILBOX_SHARE.get(group) or mailbox_share or {"valid": 1}
        counts = _apportion(size, list(share.values()))
        return [k for k, count in zip(share, counts, strict=True) for _ in range(count)]

    def _spread(self, total: int, parts: int) -> list[int]:
        """``total`` addresses over ``parts`` domains, at least one each, some domains bigger."""
        weights = [self.rng.lognormvariate(0.0, 0.8) for _ in range(parts)]
        counts = [1] * parts
        for i in self.rng.choices(range(parts), weights=weights, k=total - parts):
            counts[i] += 1
        return counts

    def _host_behaviour(self, domain: _Domain) -> str | None:
        """The behaviour of the hosts a domain needs, None when it needs no mail host."""
        if domain.group in ("ordinary", "catch_all", "implicit_mx"):
            return "ordinary"
        if domain.group == "greylist_catch_all":
            return "greylist"
        if domain.group == "disposable_mx":
            return "disposable_mx"
        if domain.group in _HOST_VERDICTS:
            return domain.group
        return None

    def _assign_hosts(self, domains: list[_Domain], n_hosts: int | None) -> dict[str, str]:
        """Give hosted domains their providers' hosts; return host name -> behaviour."""
        rng = self.rng
        hosted: dict[str, list[_Domain]] = {}
        for domain in domains:
            behaviour = self._host_behaviour(domain)
            if behaviour is not None:
                hosted.setdefault(behaviour, []).append(domain)
        if not hosted:
            if n_hosts:
                raise ValueError(f"hosts={n_hosts}, but no domain of this mix takes mail")
            return {}
        behaviours = list(hosted)
        sizes = [len(hosted[b]) for b in behaviours]
        total = n_hosts if n_hosts is not None else max(len(behaviours), round(sum(sizes) / 3))
        if not len(behaviours) <= total <= sum(sizes):
            raise ValueError(
                f"hosts={total} must be between the {len(behaviours)} kinds of mail host and the "
                f"{sum(sizes)} domains that take mail"
            )
        counts = _apportion(total, sizes, minimum=[1] * len(sizes), maximum=sizes)
        out: dict[str, str] = {}
        provider_number = 0
        for behaviour, count in zip(behaviours, counts, strict=True):
            if behaviour in ("google", "disposable_mx"):  # one provider's hosts for all
                names = list(_PROVIDER_HOSTS.get(behaviour, (DISPOSABLE_HOST,)))
                out.update(dict.fromkeys(names, behaviour))
                for domain in hosted[behaviour]:
                    domain.provider = names
                continue
            if behaviour == "microsoft":  # a host name of its own for each tenant
                for domain in hosted[behaviour]:
                    tenant = domain.name.replace(".", "-")
                    domain.provider = [f"{tenant}.mail.protection.outlook.com"]
                    out[domain.provider[0]] = behaviour
                continue
            providers: list[list[str]] = []
            left = count
            pairs = behaviour in _PAIRED
            while left or not providers:
                size = 2 if pairs or (left >= 2 and rng.random() < 0.25) else 1
                provider_number += 1
                names = [f"mx{n}.hosting{provider_number}.test" for n in range(1, size + 1)]
                providers.append(names)
                out.update(dict.fromkeys(names, behaviour))
                left = max(0, left - size)
            members = hosted[behaviour][:]
            rng.shuffle(members)
            for i, domain in enumerate(members):
                domain.provider = providers[i] if i < len(providers) else rng.choice(providers)
        return out

    def _assemble(self, seed: int, domains: list[_Domain], hosts: dict[str, str]) -> GeneratedWorld:
        rng = self.rng
        world_domains: dict[str, dict[str, Any]] = {}
        expected: dict[str, Verdict] = {}
        kinds: dict[str, str] = {}
        for domain in domains:
            spec, locals_ = self._domain_spec(domain)
            if spec is not None:
                world_domains[domain.name] = spec
            group_verdict = _DOMAIN_VERDICTS.get(domain.group) or _HOST_VERDICTS.get(domain.group)
            for local, kind in locals_:
                address = f"{local}@{domain.name}"
                expected[address] = group_verdict or _MAILBOX_VERDICTS[kind]
                kinds[address] = kind if domain.group == "ordinary" else domain.group
        world_hosts = {name: self._host_spec(name, behaviour) for name, behaviour in hosts.items()}
        providers = {
            name: {"hosts": members, **_PROVIDER_LIMITS[name]}
            for name in _PROVIDER_LIMITS
            if (members := [h for h, b in hosts.items() if b == name])
        }
        world = World.from_dict(
            {
                "description": (
                    f"Generated by listhygiene.sandbox.generate (seed {seed}): "
                    f"{len(domains)} domains, {len(expected)} addresses, {len(hosts)} mail hosts."
                ),
                "domains": world_domains,
                "hosts": world_hosts,
                **({"providers": providers} if providers else {}),
            },
            source=f"<generated world, seed {seed}>",
        )
        order = list(expected)
        rng.shuffle(order)
        return GeneratedWorld(
            world=world,
            addresses=tuple(order),
            expected=MappingProxyType({a: expected[a] for a in order}),
            kinds=MappingProxyType({a: kinds[a] for a in order}),
        )

    def _domain_spec(self, domain: _Domain) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
        """The domain's world entry (None: absent from the world) and its (local, kind) pairs."""
        rng = self.rng
        used: set[str] = set()
        roles = list(_ROLE_LOCALS)
        rng.shuffle(roles)
        pairs: list[tuple[str, str]] = []
        spec: dict[str, Any] = {}
        mailboxes: list[str] = []
        full: list[str] = []
        disabled: list[str] = []
        for kind in domain.kinds:
            if kind == "role" and roles:
                local = roles.pop()
                used.add(local)
            else:
                kind = "valid" if kind == "role" else kind  # more roles than role names: a person
                local = self._person(used)
            pairs.append((local, kind))
            if kind in ("valid", "role"):
                mailboxes.append(local)
            elif kind == "full":
                full.append(local)
            elif kind == "disabled":
                disabled.append(local)
            elif kind in ("catch_all", "greylist_catch_all") and rng.random() < 0.5:
                mailboxes.append(local)  # a catch-all domain still has real mailboxes
        match domain.group:
            case "nxdomain":
                if rng.random() < 0.5:
                    return None, pairs  # not in the world at all
                spec["dns"] = "nxdomain"
            case "servfail":
                spec["dns"] = "servfail"
            case "dns_timeout":
                spec["dns"] = "timeout"
            case "null_mx":
                spec["null_mx"] = True
            case "no_mx":
                spec["txt"] = ["v=spf1 -all"]
            case "implicit_mx":
                spec["a"] = list(domain.provider)
            case _:
                spec["mx"] = [
                    {"preference": 10 * (i + 1), "host": host}
                    for i, host in enumerate(domain.provider)
                ]
        if domain.group in ("catch_all", "greylist_catch_all", "disposable_mx"):
            spec["catch_all"] = True
        for key, values in (("mailboxes", mailboxes), ("full", full), ("disabled", disabled)):
            if values and domain.provider:
                spec[key] = values
        return spec, pairs

    def _person(self, used: set[str]) -> str:
        """A fresh person-like local part (mostly ``first.last``), unique within a domain."""
        rng = self.rng
        first, last = rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES)
        pattern = rng.choices(
            ("{f}.{l}", "{f}{l}", "{i}.{l}", "{f}_{l}", "{f}"), weights=(10, 2, 2, 1, 1)
        )[0]
        local = pattern.format(f=first, l=last, i=first[0])
        candidate, n = local, 1
        while candidate in used:
            n += 1
            candidate = f"{local}{n}"
        used.add(candidate)
        return candidate

    def _host_spec(self, name: str, behaviour: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"latency_ms": self.latency_ms}
        number = name.partition(".hosting")[2].partition(".")[0]
        provider = int(number) if number.isdigit() else 0
        match behaviour:
            case "greylist":
                spec["greylist_delay_ms"] = GREYLIST_DELAY_MS
                if provider % 2:  # every other provider names its delay, as postgrey can
                    spec["greylist_names_delay"] = True
            case "silent_mx":
                spec["behaviour"] = "silent"
            case "backup_mx" if name.startswith("mx1."):
                spec["behaviour"] = "silent"
            case "rcpt_cap":
                spec["max_rcpt_per_connection"] = RCPT_CAP
                spec["too_many_reply"] = "452"
            case "silent":
                spec["behaviour"] = "silent"
            case "tarpit":
                spec["banner_delay_ms"] = TARPIT_BANNER_DELAY_MS
            case "refuse":
                spec["behaviour"] = "refuse"
            case "blocked":
                spec["block"] = {"stage": "rcpt"}
            case "harvest":
                spec.update(POSTFIX_ERROR_LIMITS)
            case "reject_tarpit":
                spec["rejected_rcpt_delay_ms"] = REJECT_TARPIT_MS
            case "postscreen":
                spec["postscreen"] = dict(POSTSCREEN)
            case "strict_pipelining":
                spec.update(pipelining=False, strict_pipelining=True)
            case "require_tls":
                spec.update(starttls=True, require_tls=True)
        return spec

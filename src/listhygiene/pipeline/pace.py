"""How long verifying a list would take, from the engine's politeness budgets: the time model of
``clean --estimate`` (docs/pipeline.md, "Estimating a run").

An estimate, not a measurement. Nothing is looked up: a domain's mail provider is known from its
name alone (``gmail.com`` is Google's: ``engine.providers.DOMAIN_PROVIDERS``) or from what the
verdict store remembers of the domain; every other domain is taken to have mail hosts of its
own. The model, per domain with ``n`` addresses to verify (one more: the catch-all probe):

- its SMTP sessions are ``ceil((n + 1) / rcpt_per_session)``, one after another (the engine
  probes a domain over one session at a time), each taking :attr:`Pace.session_seconds` to open
  and close and :attr:`Pace.rcpt_seconds` a recipient; after :attr:`Pace.dns_seconds` of DNS;
- the domains of one big provider share its budget (``provider_budgets``: sessions at once and
  new sessions a second): the provider takes at least its sessions' time over its concurrency
  and its sessions over its rate;
- a domain of its own mail host opens at most ``host_rate`` sessions a second;
- the whole run holds at most ``concurrency`` sessions at once.

The estimate is the longest of these. What a run meets and this does not count: greylisting
(minutes, the second pass), tarpits and error sleeps, bans, slow or silent hosts, and domains
that a big provider hosts under their own name (a Microsoft 365 or Google Workspace tenant looks
self-hosted here, and is paced by its provider's budget in the run). So a list of companies on
Microsoft 365 takes longer than estimated; a list of consumer addresses is paced as estimated.
Without SMTP only the DNS lookups count, ``concurrency`` at a time.
"""

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from listhygiene.engine.provider_limits import BUDGETED

if TYPE_CHECKING:
    from listhygiene.engine import EngineSettings

__all__ = ["OWN_HOSTS", "PACE", "Pace", "ProviderTime", "TimeEstimate", "time_needed"]

#: The group of the domains no big provider's budget paces (each of their hosts has its own).
OWN_HOSTS = "own_hosts"


@dataclass(frozen=True, slots=True)
class Pace:
    """What one step takes against a mail host on the internet (the model's assumptions)."""

    #: Connect, banner, EHLO, STARTTLS, EHLO again, MAIL FROM and QUIT: a few round trips and
    #: a TLS handshake.
    session_seconds: float = 1.5
    #: One recipient's RCPT and its reply.
    rcpt_seconds: float = 0.1
    #: One domain's DNS: its MX records and their hosts' addresses.
    dns_seconds: float = 0.2


PACE = Pace()


@dataclass(frozen=True, slots=True)
class ProviderTime:
    """One provider's share (or :data:`OWN_HOSTS`': its ``seconds`` are its longest domain's)."""

    domains: int
    addresses: int
    sessions: int
    seconds: float


@dataclass(frozen=True)
class TimeEstimate:
    """How long the addresses left to verify would take (an estimate: see the module)."""

    seconds: float
    check_smtp: bool
    #: Domains and addresses to verify (valid syntax, not reused), SMTP sessions to open.
    domains: int
    addresses: int
    sessions: int
    #: Domains whose provider was known (by name, or from the verdict store).
    recognised: int
    #: What sets the estimate: ``provider google``, ``domain example.com``, ``concurrency``,
    #: ``dns``; None with nothing to verify.
    limited_by: str | None
    providers: Mapping[str, ProviderTime] = field(default_factory=dict)
    assumptions: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "check_smtp": self.check_smtp,
            "domains": self.domains,
            "addresses": self.addresses,
            "sessions": self.sessions,
            "recognised_domains": self.recognised,
            "limited_by": self.limited_by,
            "providers": {
                name: {**asdict(share), "seconds": round(share.seconds, 1)}
                for name, share in self.providers.items()
            },
            "assumptions": dict(self.assumptions),
        }


def time_needed(
    domains: Mapping[str, int],
    providers: Mapping[str, str | None],
    settings: "EngineSettings",
    *,
    check_smtp: bool,
    pace: Pace = PACE,
) -> TimeEstimate:
    """The time model over ``domains`` (domain -> addresses to verify there), with each
    domain's provider where it is known (``providers``; absent or None: not known)."""
    budgets = settings.provider_budgets()
    assumptions: dict[str, Any] = {
        **asdict(pace),
        "concurrency": settings.concurrency,
        "host_rate": settings.host_rate,
        "rcpt_per_session": settings.rcpt_per_session,
        "provider_budgets": {name: list(budget) for name, budget in budgets.items()},
    }
    addresses = sum(domains.values())
    recognised = sum(1 for d in domains if providers.get(d))
    if not domains:
        return TimeEstimate(0.0, check_smtp, 0, 0, 0, recognised, None, {}, assumptions)
    dns = pace.dns_seconds * math.ceil(len(domains) / settings.concurrency)
    if not check_smtp:
        return TimeEstimate(
            dns, False, len(domains), addresses, 0, recognised, "dns", {}, assumptions
        )
    groups: dict[str, list[tuple[str, int, float]]] = {}  # group -> (domain, sessions, seconds)
    for domain, count in domains.items():
        sessions = math.ceil((count + 1) / settings.rcpt_per_session)
        work = sessions * pace.session_seconds + (count + 1) * pace.rcpt_seconds
        provider = providers.get(domain)
        group = provider if provider in BUDGETED else OWN_HOSTS
        groups.setdefault(group, []).append((domain, sessions, work))

    times: list[tuple[float, str]] = []
    shares: dict[str, ProviderTime] = {}
    for group, members in sorted(groups.items(), key=lambda item: item[0] == OWN_HOSTS):
        sessions = sum(m[1] for m in members)
        work = sum(m[2] for m in members)
        count = sum(domains[m[0]] for m in members)
        if group == OWN_HOSTS:
            longest, name = max(
                (pace.dns_seconds + max(w, s / settings.host_rate), d) for d, s, w in members
            )
            times.append((longest, f"domain {name}"))
            shares[group] = ProviderTime(len(members), count, sessions, longest)
            continue
        at_once, rate = budgets[group]
        seconds = pace.dns_seconds + max(
            max(m[2] for m in members), work / at_once, sessions / rate
        )
        times.append((seconds, f"provider {group}"))
        shares[group] = ProviderTime(len(members), count, sessions, seconds)
    all_sessions = sum(share.sessions for share in shares.values())
    all_work = sum(w for members in groups.values() for _, _, w in members)
    times.append((dns + all_work / settings.concurrency, "concurrency"))
    seconds, limited_by = max(times)
    return TimeEstimate(
        seconds,
        True,
        len(domains),
        addresses,
        all_sessions,
        recognised,
        limited_by,
        shares,
        assumptions,
    )

"""Refresh the disposable services' mail hosts from the MX records of the listed disposable
domains (docs/engine.md, "Lists").

Resolves the MX records of the domains of the ``disposable-email-domains`` package (all of them,
or a sample: ``--limit``), counts how many listed domains each mail host serves, and writes the
hosts that serve at least ``--minimum`` (default 3) of them below the marker line of
``src/listhygiene/engine/data/disposable_mx_hosts.txt``; the part above the marker (hosts taken
from public records, each group with its source) is kept as it is. Hosts of mail providers shared
by very many unrelated domains (Google, Microsoft, Cloudflare Email Routing, Zoho, Yandex,
Mailgun, hosting companies: ``listhygiene.engine.lists.never_learned``) are never written:
sharing such a host proves nothing. Needs the internet (DNS):

    .venv/bin/python scripts/refresh_disposable_mx.py                  # every listed domain
    .venv/bin/python scripts/refresh_disposable_mx.py --limit 2000 --dry-run
    .venv/bin/python scripts/refresh_disposable_mx.py --minimum 5 --concurrency 100 --timeout 3

Review the written hosts before committing them: a host serving several listed domains that is
in fact a hosting company's belongs in ``SHARED_MAIL_HOSTS`` (engine/lists.py) instead.
"""

import argparse
import asyncio
import datetime
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

from listhygiene.engine.lists import never_learned

DATA = Path(__file__).resolve().parents[1] / "src" / "listhygiene" / "engine" / "data"
TARGET = DATA / "disposable_mx_hosts.txt"
MARKER = "# --- written by scripts/refresh_disposable_mx.py below this line"


def _host(name: str) -> str:
    return name.strip().lower().rstrip(".")


def _under(host: str, names: Iterable[str]) -> bool:
    return any(host == name or host.endswith("." + name) for name in names)


def count_hosts(answers: Mapping[str, Sequence[str]]) -> Counter[str]:
    """How many of the answered domains each mail host serves (a host named twice by one domain
    counts once; case, a trailing dot and the null MX "." are ignored)."""
    counts: Counter[str] = Counter()
    for hosts in answers.values():
        counts.update({name for name in (_host(h) for h in hosts) if name})
    return counts


def select_hosts(
    answers: Mapping[str, Sequence[str]], minimum: int = 3, known: Iterable[str] = ()
) -> dict[str, int]:
    """The hosts serving at least ``minimum`` of the answered (listed disposable) domains, with
    their counts, most served first: less the shared providers' hosts (``never_learned``) and
    the hosts already ``known`` (equal to, or under, a name of the hand-kept part)."""
    kept = [_host(name) for name in known]
    chosen = {
        host: n
        for host, n in count_hosts(answers).items()
        if n >= minimum and not never_learned(host) and not _under(host, kept)
    }
    return dict(sorted(chosen.items(), key=lambda item: (-item[1], item[0])))


def render(
    current: str,
    chosen: Mapping[str, int],
    *,
    source: str,
    asked: int,
    answered: int,
    minimum: int,
    day: str,
) -> str:
    """The data file: ``current`` up to the marker line (kept), then the chosen hosts, each with
    the number of listed domains it served as a comment."""
    head = current.split(MARKER, 1)[0].rstrip("\n")
    lines = [
        head,
        "",
        f"{MARKER}; {day} ---",
        f"# {source}: {asked} domains asked, {answered} with an MX answer; hosts serving at",
        f"# least {minimum} of them, less the shared mail providers' and those kept by hand above.",
        *(f"{host}  # {n} listed domains" for host, n in chosen.items()),
    ]
    return "\n".join(lines) + "\n"


def known_hosts(current: str) -> list[str]:
    """The host entries of the hand-kept part (above the marker line)."""
    head = current.split(MARKER, 1)[0]
    return [
        _host(line.split("#", 1)[0])
        for line in head.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-"))
    ]


async def resolve_mx(
    domains: Sequence[str], *, concurrency: int, per_query: float
) -> dict[str, list[str]]:
    """Each domain's MX host names; domains without an answer (no MX, no such domain, a time
    out, a server failure) are left out."""
    import dns.asyncresolver
    import dns.exception

    resolver = dns.asyncresolver.Resolver()
    resolver.lifetime = per_query
    gate = asyncio.Semaphore(concurrency)
    answers: dict[str, list[str]] = {}

    async def one(domain: str) -> None:
        async with gate:
            try:
                answer = await resolver.resolve(domain, "MX")
            except (dns.exception.DNSException, OSError):
                return
        answers[domain] = [str(record.exchange) for record in answer]

    await asyncio.gather(*(one(domain) for domain in domains))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="a random sample of N domains")
    parser.add_argument("--seed", type=int, default=0, help="the sample's random seed")
    parser.add_argument("--minimum", type=int, default=3, help="listed domains a host serves")
    parser.add_argument("--concurrency", type=int, default=50, help="queries under way at once")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for one query")
    parser.add_argument("--dry-run", action="store_true", help="print instead of writing")
    args = parser.parse_args()

    from disposable_email_domains import blocklist

    domains = sorted(d.lower() for d in blocklist)
    if args.limit and args.limit < len(domains):
        domains = sorted(random.Random(args.seed).sample(domains, args.limit))
    answers = asyncio.run(resolve_mx(domains, concurrency=args.concurrency, per_query=args.timeout))
    if not answers:
        # no DNS (no internet): keep the hosts of the last run rather than write none
        raise SystemExit(f"none of {len(domains)} domains answered: the file is left as it is")
    current = TARGET.read_text("utf-8")
    chosen = select_hosts(answers, args.minimum, known_hosts(current))
    version = metadata.version("disposable-email-domains")
    text = render(
        current,
        chosen,
        source=f"disposable-email-domains {version}",
        asked=len(domains),
        answered=len(answers),
        minimum=args.minimum,
        day=datetime.date.today().isoformat(),
    )
    if args.dry_run:
        print(text)
    else:
        TARGET.write_text(text, "utf-8")
    print(f"{len(answers)} of {len(domains)} domains answered; {len(chosen)} hosts written")


if __name__ == "__main__":
    main()

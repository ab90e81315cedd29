"""An authoritative DNS server for a world, over UDP and TCP, on dnspython's message handling.

Every name the world does not know is NXDOMAIN; a known name without the asked type is an empty
answer with the zone's SOA (so resolvers can cache the negative answer); a domain set to
``servfail`` or ``timeout`` answers so, or not at all; one with ``dns_latency_ms`` answers that
much later (without holding up other answers). Blocklist zones answer ``127.0.0.2`` for a listed
address, as DNSBLs do; the reverse zone answers the world's PTR records. A world with an
``nxdomain_answer`` is a lying resolver: unknown names answer that address instead of NXDOMAIN.
"""

import asyncio
import ipaddress
import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from listhygiene.sandbox.world import World

log = logging.getLogger(__name__)

__all__ = ["DnsServer", "Zone"]

_SOA_TEMPLATE = "ns.{apex}. hostmaster.{apex}. 1 3600 600 86400 {minimum}"
#: The TXT text a blocklist zone returns for a listed address.
DNSBL_TXT = "Listed by the listhygiene sandbox"
#: The apex of the reverse zone of the world's ``ptr`` records.
REVERSE_APEX = "in-addr.arpa"


@dataclass
class _Node:
    rrsets: dict[int, dns.rrset.RRset] = field(default_factory=dict)
    failure: str = "ok"  # ok | nxdomain | servfail | timeout
    latency: float = 0.0  # seconds before an answer for a name under it
    soa: dns.rrset.RRset | None = None  # set on the world's domains: each is a zone apex


def _ancestors(name: dns.name.Name) -> Iterator[dns.name.Name]:
    """The names above ``name``, up to the root."""
    while name != dns.name.root:
        name = name.parent()
        yield name


class Zone:
    """Everything the server answers, keyed by owner name (built once from a world)."""

    def __init__(self, world: World, host_addresses: dict[str, str]) -> None:
        self._nodes: dict[dns.name.Name, _Node] = {}
        for host, address in host_addresses.items():
            self._add(host, "A", 300, [address])
        for name, spec in world.domains.items():
            node = self._node(name)
            node.failure = spec.dns
            node.latency = spec.dns_latency_ms / 1000
            node.soa = self._rrset(
                name, "SOA", spec.ttl, [_SOA_TEMPLATE.format(apex=name, minimum=spec.ttl)]
            )
            if spec.null_mx:
                self._add(name, "MX", spec.ttl, ["0 ."])
            elif spec.mx:
                self._add(name, "MX", spec.ttl, [f"{m.preference} {m.host}." for m in spec.mx])
            addresses = [host_addresses.get(a, a) for a in spec.a]
            if addresses:
                self._add(name, "A", spec.ttl, addresses)
            if spec.aaaa:
                self._add(name, "AAAA", spec.ttl, spec.aaaa)
            if spec.txt:
                quoted = ['"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in spec.txt]
                self._add(name, "TXT", spec.ttl, quoted)
        for host in host_addresses:  # a host outside every domain of the world is its own zone
            if self._zone_of(dns.name.from_text(host + ".")) is None:
                self._node(host).soa = self._rrset(
                    host, "SOA", 300, [_SOA_TEMPLATE.format(apex=host, minimum=300)]
                )
        for zone, listed in world.dnsbl.items():
            self._node(zone).soa = self._rrset(
                zone, "SOA", 300, [_SOA_TEMPLATE.format(apex=zone, minimum=300)]
            )
            for item in listed:
                listed_ip = ipaddress.IPv4Address(host_addresses.get(item, item))
                owner = ".".join(reversed(str(listed_ip).split("."))) + "." + zone
                self._add(owner, "A", 300, ["127.0.0.2"])
                self._add(owner, "TXT", 300, [f'"{DNSBL_TXT}"'])
        if world.ptr:
            self._node(REVERSE_APEX).soa = self._rrset(
                REVERSE_APEX, "SOA", 300, [_SOA_TEMPLATE.format(apex=REVERSE_APEX, minimum=300)]
            )
        for address, name in world.ptr.items():
            owner = ".".join(reversed(address.split("."))) + "." + REVERSE_APEX
            self._add(owner, "PTR", 300, [name + "."])
        #: What a lying resolver answers for a name that does not exist (None: NXDOMAIN).
        self._nxdomain_answer = world.nxdomain_answer
        #: Every name with a node below it: a name that is not a node but is one of these exists
        #: (an empty non-terminal: no data, RFC 8020), any other is NXDOMAIN. A set, so that a
        #: query for an unknown name costs the same in a world of 10 domains or of 100,000.
        self._ancestors = {parent for name in self._nodes for parent in _ancestors(name)}

    @staticmethod
    def _rrset(name: str, rdtype: str, ttl: int, values: list[str]) -> dns.rrset.RRset:
        return dns.rrset.from_text_list(name + ".", ttl, "IN", rdtype, values)

    def _node(self, name: str) -> _Node:
        return self._nodes.setdefault(dns.name.from_text(name + "."), _Node())

    def _add(self, name: str, rdtype: str, ttl: int, values: list[str]) -> None:
        rrset = self._rrset(name, rdtype, ttl, values)
        node = self._node(name)
        existing = node.rrsets.get(rrset.rdtype)
        if existing is not None:
            # what Rdataset.union_update does, through dnspython's typed methods
            existing.update_ttl(rrset.ttl)
            for rdata in rrset:
                existing.add(rdata)
        else:
            node.rrsets[rrset.rdtype] = rrset

    def _zone_of(self, name: dns.name.Name) -> _Node | None:
        """The closest enclosing domain of the world (a node with an SOA), if any."""
        while True:
            node = self._nodes.get(name)
            if node is not None and node.soa is not None:
                return node
            if name == dns.name.root:
                return None
            name = name.parent()

    def _has_descendants(self, name: dns.name.Name) -> bool:
        return name in self._ancestors

    def latency(self, query: dns.message.Message) -> float:
        """Seconds to wait before answering ``query`` (its domain's ``dns_latency_ms``)."""
        if len(query.question) != 1:
            return 0.0
        zone = self._zone_of(query.question[0].name.canonicalize())
        return zone.latency if zone is not None else 0.0

    def answer(self, query: dns.message.Message) -> dns.message.Message | None:
        """The response to ``query``, or None to stay silent (a timeout)."""
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if len(query.question) != 1:
            response.set_rcode(dns.rcode.FORMERR)
            return response
        question = query.question[0]
        if question.rdclass != dns.rdataclass.IN:
            response.set_rcode(dns.rcode.REFUSED)
            return response
        name = question.name.canonicalize()
        zone = self._zone_of(name)
        # a broken domain is broken for every name under it
        if zone is not None and zone.failure == "timeout":
            return None
        if zone is not None and zone.failure == "servfail":
            response.flags &= ~dns.flags.AA
            response.set_rcode(dns.rcode.SERVFAIL)
            return response
        soa = [zone.soa] if zone is not None and zone.soa is not None else []
        node = self._nodes.get(name)
        if (zone is not None and zone.failure == "nxdomain") or (
            node is None and not self._has_descendants(name)
        ):
            if self._nxdomain_answer is not None:  # a lying resolver: the name "exists"
                response.flags &= ~dns.flags.AA
                if question.rdtype == dns.rdatatype.A:
                    response.answer.append(
                        self._rrset(name.to_text(True), "A", 60, [self._nxdomain_answer])
                    )
                return response
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.extend(soa)  # RFC 2308: lets resolvers cache the denial
            return response
        rrsets = node.rrsets if node is not None else {}
        if question.rdtype == dns.rdatatype.ANY and rrsets:
            response.answer.extend(rrsets.values())
        elif question.rdtype in rrsets:
            response.answer.append(rrsets[question.rdtype])
        elif question.rdtype == dns.rdatatype.SOA and node is not None and node.soa is not None:
            response.answer.append(node.soa)
        else:
            response.authority.extend(soa)  # no data (empty non-terminals too, RFC 8020)
        return response


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: "DnsServer") -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a datagram endpoint's transport; asyncio types this argument more widely
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        wire, delay = self.server.respond_later(data, max_size=None)
        if wire is None or self.transport is None:
            return
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._send, wire, addr)
        else:
            self.transport.sendto(wire, addr)

    def _send(self, wire: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(wire, addr)


class DnsServer:
    """Serves a :class:`Zone` on one address and port, over UDP and TCP."""

    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self.queries = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None

    def respond(self, data: bytes, *, max_size: int | None) -> bytes | None:
        """Wire bytes in, wire bytes out (None: say nothing). UDP answers may be truncated."""
        return self.respond_later(data, max_size=max_size)[0]

    def respond_later(self, data: bytes, *, max_size: int | None) -> tuple[bytes | None, float]:
        """As :meth:`respond`, with the seconds to wait before sending the answer."""
        self.queries += 1
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return None, 0.0  # not a DNS message: a real server ignores it
        response = self.zone.answer(query)
        if response is None:
            return None, 0.0
        delay = self.zone.latency(query)
        if max_size is None:  # UDP: the client's EDNS payload, or 512
            max_size = max(512, query.payload) if query.edns >= 0 else 512
            return response.to_wire(max_size=max_size, prefer_truncation=True), delay
        return response.to_wire(max_size=max_size), delay

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port, the same for UDP and TCP); return the port."""
        loop = asyncio.get_running_loop()
        self._tcp = await asyncio.start_server(self._serve_tcp, host, port)
        port = self._tcp.sockets[0].getsockname()[1]
        try:
            self._udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(self), local_addr=(host, port)
            )
        except OSError:
            self._tcp.close()
            await self._tcp.wait_closed()
            raise
        return port

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack("!H", await reader.readexactly(2))
                wire, delay = self.respond_later(await reader.readexactly(length), max_size=65535)
                if wire is None:
                    continue  # a timeout: the client gives up
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(struct.pack("!H", len(wire)) + wire)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

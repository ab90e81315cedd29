"""Mail hosts of a world: aiosmtpd servers with the behaviours of ``HostSpec``.

Well-behaved hosts are aiosmtpd's SMTP protocol with a handler that applies the world's mailboxes
and the host's policies. Reply latency is applied to what the server *reads*, one delay per
segment, so a client that pipelines several commands pays one round trip for the batch and a
client that waits for each reply pays one per command, as on a real network. Broken hosts
(``silent``, ``garbage``, ``drop``, ``endless``) are small raw protocols.
"""

import asyncio
import logging
import math
import ssl
import time
from dataclasses import dataclass, field, fields
from typing import Any, AnyStr, cast

from aiosmtpd.smtp import SMTP, Envelope, Session

from listhygiene.sandbox.world import HostSpec, World, normalise_name

log = logging.getLogger(__name__)

__all__ = ["Directory", "HostStats", "MailHost"]

OK = "250 2.1.5 OK"
SENDER_OK = "250 2.1.0 OK"
USER_UNKNOWN = "550 5.1.1 <{address}>: Recipient address rejected: User unknown"
MAILBOX_DISABLED = "550 5.2.1 <{address}>: Mailbox disabled, not accepting messages"
MAILBOX_FULL = "552 5.2.2 <{address}>: Mailbox full, over quota"
GREYLISTED = "450 4.2.0 <{address}>: Recipient address rejected: Greylisted, try again later"
GREYLISTED_NAMED = (
    "450 4.2.0 <{address}>: Recipient address rejected: Greylisted for {seconds} seconds"
)
TOO_MANY_452 = "452 4.5.3 Too many recipients"
TOO_MANY_421 = "421 4.7.0 Too many recipients in this session, closing connection"
TOO_MANY_CONNECTIONS = "421 4.7.0 {host} Too many concurrent connections, try again later"
BLOCKED = "{code} 5.7.1 Service unavailable; client [{client}] blocked using {blocklist}"
UTF8_UNDECLARED = "553 5.6.7 Must declare SMTPUTF8 to send unicode address"
RELAY_DENIED = "554 5.7.1 <{address}>: Relay access denied"


@dataclass
class HostStats:
    """What a host saw: lets tests check how politely and efficiently a client behaved."""

    connections: int = 0
    active: int = 0
    max_active: int = 0
    mail_commands: int = 0
    rcpt_commands: int = 0
    #: Most SMTP commands that arrived in one read: more than one means the client pipelined.
    max_commands_per_read: int = 0
    recipients: list[str] = field(default_factory=list)
    #: ``time.monotonic()`` of each connection's opening and closing, in order: tells whether a
    #: client was talking to another host while this one's connection was still open.
    opened_at: list[float] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)

    def reset(self) -> None:
        """Every count back to its default (fresh lists), but ``active``: those still open."""
        fresh = HostStats(active=self.active)
        for counter in fields(self):
            setattr(self, counter.name, getattr(fresh, counter.name))


class _Greylist:
    """(client, sender, recipient) triplets first seen, as postgrey keeps them."""

    def __init__(self, delay_ms: int, names_delay: bool = False) -> None:
        self.delay = delay_ms / 1000
        self.first_seen: dict[tuple[str, str, str], float] = {}
        # postgrey's "Greylisted for %s seconds": the whole delay, in whole seconds
        self.seconds = math.ceil(self.delay) if names_delay else None

    def reply(self, address: str) -> str:
        if self.seconds is None:
            return GREYLISTED.format(address=address)
        return GREYLISTED_NAMED.format(address=address, seconds=self.seconds)

    def passes(self, client: str, sender: str, recipient: str) -> bool:
        key = (client, sender.lower(), recipient.lower())
        now = time.monotonic()
        first = self.first_seen.setdefault(key, now)
        return now - first >= self.delay and now != first


class Directory:
    """Who receives mail where: the world's mailboxes, indexed once for every host to share."""

    def __init__(self, world: World) -> None:
        self._kinds: dict[str, dict[str, str]] = {}
        self._catch_all: set[str] = set()
        self._hosts: dict[str, frozenset[str]] = {}
        for domain, spec in world.domains.items():
            kinds = {m.casefold(): OK for m in spec.mailboxes}
            kinds.update({m.casefold(): MAILBOX_DISABLED for m in spec.disabled})
            kinds.update({m.casefold(): MAILBOX_FULL for m in spec.full})
            self._kinds[domain] = kinds
            if spec.catch_all:
                self._catch_all.add(domain)
            self._hosts[domain] = frozenset(world.mail_hosts_of(domain))

    def reply(self, host: str, address: str) -> str:
        local, _, domain_part = address.rpartition("@")
        try:
            domain = normalise_name(domain_part)
        except ValueError:
            return RELAY_DENIED.format(address=address)
        if host not in self._hosts.get(domain, ()):
            return RELAY_DENIED.format(address=address)
        if domain in self._catch_all:
            return OK
        return self._kinds[domain].get(local.casefold(), USER_UNKNOWN).format(address=address)


class _Handler:
    """aiosmtpd handler hooks: the world's mailboxes and the host's policies."""

    def __init__(self, host: "MailHost") -> None:
        self.host = host

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        extra = ["250-ENHANCEDSTATUSCODES"]
        if self.host.spec.pipelining:
            extra.append("250-PIPELINING")
        return responses[:-1] + extra + responses[-1:]

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        self.host.stats.mail_commands += 1
        block = self.host.spec.block
        if block is not None and block.stage == "mail":
            return self.host.blocked_reply("550", session)
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return SENDER_OK

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        host, stats, spec = self.host, self.host.stats, self.host.spec
        stats.rcpt_commands += 1
        stats.recipients.append(address)
        assert isinstance(server, _SandboxSMTP)  # the only protocol that takes this handler
        protocol = server
        protocol.rcpt_count += 1
        cap = spec.max_rcpt_per_connection
        if cap is not None and protocol.rcpt_count > cap:
            if spec.too_many_reply == "421":
                protocol.close_after_reply = True
                return TOO_MANY_421
            return TOO_MANY_452
        if not address.isascii() and not envelope.smtp_utf8:
            return UTF8_UNDECLARED  # RFC 6531 section 3.4
        if spec.block is not None and spec.block.stage == "rcpt":
            return host.blocked_reply("550", session)
        greylist = host.greylist
        client = session.peer[0] if session.peer else ""
        if greylist is not None and not greylist.passes(client, envelope.mail_from or "", address):
            return greylist.reply(address)
        reply = host.mailbox_reply(address)
        if reply.startswith("250"):
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
        return reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        return "250 2.0.0 OK: discarded by the sandbox"


class _SandboxSMTP(SMTP):
    """aiosmtpd's protocol plus latency, a tarpit, connection caps and connect-time blocks."""

    def __init__(self, host: "MailHost", **kwargs: Any) -> None:
        super().__init__(_Handler(host), **kwargs)
        self.host = host
        self.rcpt_count = 0
        self.close_after_reply = False
        self._latency = host.spec.latency_ms / 1000
        self._last_due = 0.0
        self._counted = False

    # Latency: each segment the client sends is read one delay later, in order.
    def data_received(self, data: bytes) -> None:
        commands = data.count(b"\n")
        stats = self.host.stats
        stats.max_commands_per_read = max(stats.max_commands_per_read, commands)
        if self._latency <= 0:
            super().data_received(data)
            return
        now = self.loop.time()
        self._last_due = max(now + self._latency, self._last_due + 1e-6)
        self.loop.call_at(self._last_due, self._deliver, data)

    def _deliver(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            super().data_received(data)

    async def push(self, status: AnyStr) -> None:
        await super().push(status)
        if self.close_after_reply and self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None:  # not the second call that follows STARTTLS
            self.host.connections.add(transport)
        super().connection_made(transport)

    async def _handle_client(self) -> None:
        stats, spec = self.host.stats, self.host.spec
        self._counted = True
        stats.connections += 1
        stats.opened_at.append(time.monotonic())
        stats.active += 1
        stats.max_active = max(stats.max_active, stats.active)
        delay = (spec.banner_delay_ms + spec.latency_ms) / 1000
        if delay:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                # the client hung up before the banner (aiosmtpd cancels the handler on EOF):
                # close our side too, or the connection lingers half-open (CLOSE-WAIT)
                if self.transport is not None:
                    self.transport.close()
                raise
        if spec.max_connections is not None and stats.active > spec.max_connections:
            await self._refuse(TOO_MANY_CONNECTIONS.format(host=self.host.name))
            return
        if spec.block is not None and spec.block.stage == "connect":
            await self._refuse(self.host.blocked_reply("554", self.session))
            return
        await super()._handle_client()

    async def _refuse(self, reply: str) -> None:
        await super().push(reply)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, error: Exception | None) -> None:
        if self._original_transport is not None:
            self.host.connections.discard(self._original_transport)
        elif self.transport is not None:
            self.host.connections.discard(self.transport)
        if self._counted:
            self._counted = False
            self.host.stats.active -= 1
            self.host.stats.closed_at.append(time.monotonic())
        super().connection_lost(error)


class _BrokenProtocol(asyncio.Protocol):
    """Hosts that misbehave on purpose, to prove a client's time-outs and limits."""

    def __init__(self, host: "MailHost") -> None:
        self.host = host
        self.transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server's transport is a Transport; asyncio types this argument more widely
        stream = cast(asyncio.Transport, transport)
        self.transport = stream
        self.host.connections.add(transport)
        self.host.stats.connections += 1
        self.host.stats.opened_at.append(time.monotonic())
        behaviour = self.host.spec.behaviour
        if behaviour == "garbage":
            stream.write(b"\x00\xffHELLO?? \x1b[31m not smtp\r\n")
        elif behaviour == "drop":
            stream.write(f"220 {self.host.banner_name} ESMTP\r\n".encode())
        elif behaviour == "endless":
            self._task = asyncio.get_running_loop().create_task(self._endless())

    async def _endless(self) -> None:
        assert self.transport is not None
        self.transport.write(b"220-" + self.host.banner_name.encode() + b" ")
        chunk = b"x" * 4096
        while self.transport is not None and not self.transport.is_closing():
            self.transport.write(chunk)
            await asyncio.sleep(0.01)

    def data_received(self, data: bytes) -> None:
        behaviour = self.host.spec.behaviour
        if self.transport is None:
            return
        if behaviour == "garbage":
            self.transport.write(b"\xde\xad\xbe\xef ???\r\n")
        elif behaviour == "drop":
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.host.connections.discard(self.transport)
            self.host.stats.closed_at.append(time.monotonic())
        self.transport = None
        if self._task is not None:
            self._task.cancel()


class MailHost:
    """One mail host of a world, listening on its own loopback address."""

    def __init__(
        self,
        name: str,
        spec: HostSpec,
        address: str,
        directory: "Directory",
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.address = address
        self.directory = directory
        self.banner_name = spec.banner_name or name
        self.tls_context = tls_context if spec.starttls else None
        self.greylist = (
            _Greylist(spec.greylist_delay_ms, spec.greylist_names_delay)
            if spec.greylist_delay_ms is not None
            else None
        )
        self.stats = HostStats()
        self.server: asyncio.Server | None = None
        #: Open client connections, closed on stop (``Server.close`` leaves them open).
        self.connections: set[asyncio.BaseTransport] = set()

    def blocked_reply(self, code: str, session: Session | None) -> str:
        client = session.peer[0] if session is not None and session.peer else "unknown"
        blocklist = self.spec.block.blocklist if self.spec.block else "a blocklist"
        return BLOCKED.format(code=code, client=client, blocklist=blocklist)

    def mailbox_reply(self, address: str) -> str:
        """The reply to ``RCPT TO:<address>`` from the world's mailboxes."""
        return self.directory.reply(self.name, address)

    def _protocol(self) -> asyncio.Protocol:
        if self.spec.behaviour != "smtp":
            return _BrokenProtocol(self)
        return _SandboxSMTP(
            self,
            hostname=self.banner_name,
            ident="ESMTP listhygiene-sandbox",
            enable_SMTPUTF8=self.spec.smtputf8,
            tls_context=self.tls_context,
            require_starttls=False,
            timeout=60,
        )

    async def start(self, port: int) -> None:
        if self.spec.behaviour == "refuse":
            return  # nothing listens: connection refused
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self._protocol, self.address, port)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for transport in list(self.connections):
            # the hosts' connections are stream transports (see connection_made)
            cast(asyncio.Transport, transport).abort()
        self.connections.clear()

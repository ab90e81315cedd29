"""Mail hosts of a world: aiosmtpd servers with the behaviours of ``HostSpec``.

Well-behaved hosts are aiosmtpd's SMTP protocol with a handler that applies the world's mailboxes
and the host's policies, and with the self-defences of real mail servers (``defences``): error
limits, tarpits, per-client connection limits, postscreen, strict pipelining, providers' bans.
Reply latency is applied to what the server *reads*, one delay per segment, so a client that
pipelines several commands pays one round trip for the batch and a client that waits for each
reply pays one per command, as on a real network. Broken hosts (``silent``, ``garbage``,
``drop``, ``endless``) are small raw protocols.
"""

import asyncio
import functools
import logging
import math
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Any, AnyStr, cast

from aiosmtpd.smtp import SMTP, Envelope, Session

from listhygiene.sandbox.defences import (
    DEEP_TEST,
    DESYNC,
    PREGREET,
    STARTTLS_FIRST,
    TOO_MANY_ERRORS,
    TOO_MANY_FROM,
    ClientLimits,
    EventKind,
    Provider,
    Screen,
)
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
    #: TCP connections open now, and the most at once (from accept to close).
    active: int = 0
    max_active: int = 0
    #: The most connections of one client open at once as the host's per-client limit counts
    #: them: from when the host sees a connection (one ``latency_ms`` after it opened) until it
    #: lets it go. A client that closes one and opens the next at once may show one more in
    #: ``max_active`` for the moment the host takes to see the close; never here.
    max_held: int = 0
    mail_commands: int = 0
    rcpt_commands: int = 0
    #: Most SMTP commands that arrived in one read: more than one means the client pipelined.
    max_commands_per_read: int = 0
    recipients: list[str] = field(default_factory=list)
    #: ``time.monotonic()`` of each connection's opening and closing, in order: tells whether a
    #: client was talking to another host while this one's connection was still open.
    opened_at: list[float] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)
    #: Times the host said the client went too far (docs/sandbox.md, "What the hosts said").
    limits_met: int = 0
    #: Bans of a client this host's provider started here.
    bans: int = 0
    #: Replies held back by ``error_sleep_ms`` or ``rejected_rcpt_delay_ms``.
    error_sleeps: int = 0
    #: ``(time.monotonic(), kind, reply)`` of each limit met; multi-line replies joined by "\n".
    events: list[tuple[float, str, str]] = field(default_factory=list)

    def limit_met(self, kind: EventKind, reply: str) -> None:
        """Record that the host told the client it went too far."""
        self.limits_met += 1
        if kind == "rate_ban":
            self.bans += 1
        self.events.append((time.monotonic(), kind, reply))

    def defence_summary(self) -> dict[str, Any]:
        """The JSON-safe part of ``defence_report`` about this host."""
        return {
            "connections": self.connections,
            "max_active": self.max_active,
            "max_held": self.max_held,
            "limits_met": self.limits_met,
            "bans": self.bans,
            "error_sleeps": self.error_sleeps,
            "events": [list(event) for event in self.events],
        }

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


#: Refusals of a recipient that Exchange's tarpit holds back: unknown and disabled mailboxes.
_TARPITTED = ("550 5.1.1", "550 5.2.1")


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
        if self.host.spec.ehlo_names_client and session.peer:  # as Gmail's EHLO reply does
            responses = [f"{responses[0]} at your service, [{session.peer[0]}]", *responses[1:]]
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
        if protocol.deep_test:
            return DEEP_TEST  # postscreen's after-220 tests: come back in a new connection
        protocol.rcpt_count += 1
        cap = spec.max_rcpt_per_connection
        if cap is not None and protocol.rcpt_count > cap:
            if spec.too_many_reply == "421":
                protocol.close_after_reply = True
                stats.limit_met("too_many_recipients", TOO_MANY_421)
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
        elif reply.startswith(_TARPITTED):
            protocol.reply_delay += spec.rejected_rcpt_delay_ms / 1000  # Exchange's tarpit
        return reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        return "250 2.0.0 OK: discarded by the sandbox"


#: An aiosmtpd command method: ``smtp_MAIL(arg)`` and the like.
_Command = Callable[[str | None], Awaitable[None]]

#: The commands Postfix takes before STARTTLS when it requires TLS (``SMTPD_CMD_FLAG_PRE_TLS``).
_BEFORE_TLS = frozenset({"EHLO", "HELO", "STARTTLS", "NOOP", "QUIT", "HELP"})


class _SandboxSMTP(SMTP):
    """aiosmtpd's protocol plus latency, a tarpit, connection caps, connect-time blocks and the
    self-defences of real mail servers (docs/sandbox.md, "Hosts")."""

    def __init__(self, host: "MailHost", **kwargs: Any) -> None:
        super().__init__(_Handler(host), **kwargs)
        self.host = host
        self.rcpt_count = 0
        self.close_after_reply = False
        #: 4xx and 5xx replies given in this connection since the last message accepted:
        #: Postfix's error count (RSET keeps it).
        self.errors = 0
        #: Extra delay for the reply being made (Exchange's tarpit), set by the handler.
        self.reply_delay = 0.0
        #: postscreen's deep tests run in this session: every RCPT gets 450 4.3.2.
        self.deep_test = False
        self._latency = host.spec.latency_ms / 1000
        self._last_due = 0.0
        self._ended = False  # the client closed its end (eof_received)
        self._counted = False
        self._holding = False  # counted as open by anvil and the provider
        self._client = "unknown"
        self._strict = host.spec.strict_pipelining and not host.spec.pipelining
        self._greeted = False  # the final greeting line is out: the dialogue has begun
        self._mid_reply = False  # the last line sent was a continuation ("250-...")
        self._awaiting_reply = False  # a command line came in and its reply is not out yet
        self._in_content = False  # between DATA's 354 and the reply to the message
        self._out_of_sync = False  # the client talked out of turn (strict pipelining)
        self._hung_up = False  # a closing reply was sent: nothing more is said
        self._spoke = asyncio.Event()  # the client sent something before the final greeting
        self._smtp_methods = {
            name: self._guarded(name, method) for name, method in self._smtp_methods.items()
        }

    # Latency: each segment the client sends is read one delay later, in order.
    def data_received(self, data: bytes) -> None:
        commands = data.count(b"\n")
        stats = self.host.stats
        stats.max_commands_per_read = max(stats.max_commands_per_read, commands)
        if self._latency <= 0:
            self._take(data)
            return
        now = self.loop.time()
        self._last_due = max(now + self._latency, self._last_due + 1e-6)
        self.loop.call_at(self._last_due, self._deliver, data)

    def _deliver(self, data: bytes) -> None:
        # what was still on its way when the client closed is dropped: a real host reads the
        # client's end right after it (same path), and a new connection of the client only
        # after that, so the end must not wait for the delayed commands (a QUIT, mostly)
        if self.transport is not None and not self.transport.is_closing() and not self._ended:
            self._take(data)

    def eof_received(self) -> bool | None:
        self._ended = True
        return super().eof_received()

    def _take(self, data: bytes) -> None:
        self._watch_input(data)
        super().data_received(data)

    def _watch_input(self, data: bytes) -> None:
        """Note a client talking out of turn: before the final greeting (postscreen's pregreet),
        or while a reply is due (Postfix's pipelining check, on a host without PIPELINING)."""
        if not self._greeted:
            self._spoke.set()
        if self._in_content:
            return
        if self._strict and (self._awaiting_reply or not self._greeted or data.count(b"\n") > 1):
            self._out_of_sync = True
        if b"\n" in data:
            self._awaiting_reply = True

    # Replies: in order, held back and refused as Postfix and Exchange do.
    async def push(self, status: AnyStr) -> None:
        if self._hung_up:
            return
        text = status if isinstance(status, str) else status.decode("utf-8", "replace")
        if not self._greeted:
            await self._greet(text)
            return
        if not self._mid_reply and await self._refused_instead():
            return
        self._note_reply_line(text)
        await super().push(status)
        if self.close_after_reply and self.transport is not None:
            self.transport.close()

    async def _greet(self, banner: str) -> None:
        """aiosmtpd's greeting, unless the client already talked (strict pipelining)."""
        self._greeted = True
        if self._out_of_sync:
            await self._hang_up("pipelining", DESYNC)
            return
        await super().push(banner)

    async def _refused_instead(self) -> bool:
        """Before a reply: hold it back if due, then hang up instead when Postfix would."""
        await self._hold_reply()
        refusal = self._refusal()
        if refusal is None:
            return False
        await self._hang_up(*refusal)
        return True

    async def _hold_reply(self) -> None:
        """Delay a reply past smtpd_soft_error_limit (Postfix) or for a tarpit (Exchange)."""
        spec = self.host.spec
        delay, self.reply_delay = self.reply_delay, 0.0
        if spec.soft_error_limit is not None and self.errors >= spec.soft_error_limit:
            delay += spec.error_sleep_ms / 1000
        if delay > 0:
            self.host.stats.error_sleeps += 1
            await asyncio.sleep(delay)

    def _refusal(self) -> tuple[EventKind, str] | None:
        """What Postfix says instead of answering a command, if anything."""
        if self._out_of_sync:
            return "pipelining", DESYNC
        limit = self.host.spec.hard_error_limit
        if limit is not None and self.errors >= limit:
            return "too_many_errors", TOO_MANY_ERRORS.format(host=self.host.banner_name)
        return None

    def _note_reply_line(self, line: str) -> None:
        """Follow the dialogue: where a reply ends, the errors, DATA's content."""
        self._mid_reply = line[3:4] == "-"
        if self._mid_reply:
            return
        self._awaiting_reply = False  # before the line is sent: the client may answer at once
        if line[:1] in ("4", "5"):
            self.errors += 1
        if line.startswith("354"):
            self._in_content = True
        elif self._in_content:
            self._in_content = False
            if line.startswith("2"):
                self.errors = 0  # Postfix forgives a client's errors once a message got through

    async def _hang_up(self, kind: EventKind, reply: str) -> None:
        """Say ``reply`` (a limit the client met), close, and read no further command."""
        self._hung_up = True
        self.host.stats.limit_met(kind, reply)
        await self._say(reply)
        if self.transport is not None:
            self.transport.close()
        if self._handler_coroutine is not None:
            self._handler_coroutine.cancel()  # as aiosmtpd's QUIT does

    async def _say(self, reply: str) -> None:
        """Send a reply as it is, one line per "\n" (multi-line replies of providers)."""
        for line in reply.split("\n"):
            await super().push(line)

    def _guarded(self, name: str, command: _Command) -> _Command:
        """``command``, unless the connection is closing or Postfix would refuse to answer it
        (too many errors, a pipelining violation, no TLS yet): then the refusal is the answer."""

        @functools.wraps(command)
        async def guarded(arg: str | None) -> None:
            if self._hung_up:
                return
            if self._refusal() is not None and await self._refused_instead():
                return
            if self._needs_tls(name):
                await self.push(STARTTLS_FIRST)
                return
            await command(arg)

        return guarded

    def _needs_tls(self, name: str) -> bool:
        """``require_tls``: before STARTTLS, only Postfix's pre-TLS commands are taken."""
        return self.host.spec.require_tls and self._tls_protocol is None and name not in _BEFORE_TLS

    # The connection: counted, screened, then handed to aiosmtpd's dialogue.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None:  # not the second call that follows STARTTLS
            self.host.connections.add(transport)
        super().connection_made(transport)

    async def _handle_client(self) -> None:
        self._arrive()
        try:
            admitted = await self._before_session()
        except asyncio.CancelledError:
            # the client hung up before the banner (aiosmtpd cancels the handler on EOF):
            # close our side too, or the connection lingers half-open (CLOSE-WAIT)
            if self.transport is not None:
                self.transport.close()
            raise
        if admitted:
            await super()._handle_client()

    def _arrive(self) -> None:
        """Count the TCP connection in the host's stats."""
        stats = self.host.stats
        if self.session is not None and self.session.peer:
            self._client = str(self.session.peer[0])
        self._counted = True
        stats.connections += 1
        stats.opened_at.append(time.monotonic())
        stats.active += 1
        stats.max_active = max(stats.max_active, stats.active)

    def _hold(self) -> None:
        """The connection counts as open for anvil and the provider's front door."""
        self._holding = True
        self.host.clients.opened(self._client)
        stats = self.host.stats
        stats.max_held = max(stats.max_held, self.host.clients.open[self._client])
        if self.host.provider is not None:
            self.host.provider.opened(self._client)

    def _release(self) -> None:
        """The connection no longer counts as open for anvil and the provider."""
        if not self._holding:
            return
        self._holding = False
        self.host.clients.closed(self._client)
        if self.host.provider is not None:
            self.host.provider.closed(self._client)

    async def _before_session(self) -> bool:
        """Connection limits, the banner delay, a connect-time block and postscreen; False when
        the client was turned away.

        The per-client and provider limits judge a connection when the server sees it, one
        ``latency_ms`` after it was opened (as it sees what the client sends), against the
        connections it already holds; ``max_connections`` judges it when its greeting is due.
        """
        spec = self.host.spec
        if spec.latency_ms:
            await asyncio.sleep(spec.latency_ms / 1000)
        self._hold()
        refusal = self._client_limits()
        if refusal is not None:
            self._release()  # a server lets go of a refused connection at once
        if spec.banner_delay_ms:
            await asyncio.sleep(spec.banner_delay_ms / 1000)
        if refusal is None and self._over_capacity():
            refusal = "too_many_connections", TOO_MANY_CONNECTIONS.format(host=self.host.name)
        if refusal is not None:
            await self._turn_away(*refusal)
            return False
        if spec.block is not None and spec.block.stage == "connect":
            await self._refuse(self.host.blocked_reply("554", self.session))
            return False
        return await self._postscreen()

    def _client_limits(self) -> tuple[EventKind, str] | None:
        """The limits on one client IP, outermost first: the provider's, then anvil's."""
        host, client = self.host, self._client
        if host.provider is not None:
            refusal = host.provider.admit(client)
            if refusal is not None:
                return refusal
        if host.clients.too_many(client):
            return "too_many_connections", TOO_MANY_FROM.format(
                host=host.banner_name, client=client
            )
        return None

    def _over_capacity(self) -> bool:
        """``max_connections``: all clients together."""
        cap = self.host.spec.max_connections
        return cap is not None and self.host.stats.active > cap

    async def _postscreen(self) -> bool:
        """postscreen's greeting test, for a client it has not seen pass: ``220-``, a wait in
        which the client must keep quiet, then the real greeting. Also marks a deep-test session."""
        spec = self.host.spec.postscreen
        if spec is None:
            return True
        screen, client = self.host.screen, self._client
        if client not in screen.greeted:
            await super().push(f"220-{self.host.banner_name} ESMTP")
            try:
                await asyncio.wait_for(self._spoke.wait(), spec.greet_wait_ms / 1000)
            except TimeoutError:
                screen.greeted.add(client)
            else:
                await self._turn_away("pregreet", PREGREET)
                return False
        self.deep_test = spec.deep_tests and client not in screen.deep
        return True

    async def _turn_away(self, kind: EventKind, reply: str) -> None:
        """Greet with a limit's refusal, counted where it was said, and close."""
        self.host.stats.limit_met(kind, reply)
        if kind in ("rate_ban", "rate_limited") and self.host.provider is not None:
            self.host.provider.stats.limit_met(kind)
        await self._refuse(reply)

    async def _refuse(self, reply: str) -> None:
        await self._say(reply)
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
            self._leave()
        super().connection_lost(error)

    def _leave(self) -> None:
        """Uncount the connection; a deep-test session that ends lets its client pass."""
        self._release()
        if self.deep_test:
            self.host.screen.deep.add(self._client)


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
        provider: Provider | None = None,
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
        #: The big provider this host belongs to, whose limits it shares with its other hosts.
        self.provider = provider
        self.clients = ClientLimits(
            spec.max_connections_per_client, spec.connection_rate_limit, spec.rate_window_ms
        )
        self.screen = Screen()

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

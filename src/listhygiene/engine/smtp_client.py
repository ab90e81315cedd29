"""A small SMTP client for probing mailboxes: EHLO, STARTTLS, MAIL, RCPT (pipelined), QUIT.

Why not aiosmtplib for this part: its protocol parses one reply per segment received and must be
awaited once per command, so replies to pipelined commands (RFC 2920), which arrive together,
cannot be read. A prober lives on pipelining: MAIL and a whole batch of RCPT in one round trip.
This client speaks just what a probe needs, on asyncio streams, with hard bounds everywhere a
hostile server could stall or flood it: a time limit per step, a line-length limit and a limit on
lines per reply.
"""

import asyncio
import contextlib
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from listhygiene.engine.proxies import proxy_address
from listhygiene.engine.trace import active

__all__ = [
    "Reply",
    "SmtpClient",
    "SmtpConnectError",
    "SmtpDisconnected",
    "SmtpError",
    "SmtpProtocolError",
    "SmtpTimeout",
]

#: RFC 5321 allows 512 octets a reply line; real servers stay well under 4 KiB.
LINE_LIMIT = 4096
#: A reply of more lines than this is not a probe's business.
MAX_REPLY_LINES = 64
_ENHANCED = re.compile(r"^([245])\.(\d{1,3})\.(\d{1,3})\b")


class SmtpError(Exception):
    """Any failure to hold an SMTP conversation (not a reply: replies are values).

    ``partial`` holds the replies read before the failure, in command order, so that a pipelined
    batch cut short (a 421 that closes the connection, say) loses none of its answers.
    """

    def __init__(self, message: str, partial: list["Reply"] | None = None) -> None:
        super().__init__(message)
        self.partial: list[Reply] = partial or []


class SmtpConnectError(SmtpError):
    """No TCP connection: refused, unreachable, or the proxy failed."""


class SmtpTimeout(SmtpError):
    """A step took longer than its time limit."""


class SmtpDisconnected(SmtpError):
    """The server closed the connection."""


class SmtpProtocolError(SmtpError):
    """The server does not speak SMTP (garbage, endless lines, malformed replies)."""


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    text: str
    #: RFC 3463 enhanced status code ("5.1.1") when the reply carries one.
    enhanced: str | None = None

    @property
    def is_positive(self) -> bool:
        return 200 <= self.code < 300

    @property
    def is_transient(self) -> bool:
        return 400 <= self.code < 500

    @property
    def is_permanent(self) -> bool:
        return 500 <= self.code < 600

    def __str__(self) -> str:
        return f"{self.code} {self.text}".strip()


def _parse_reply(lines: list[bytes]) -> Reply:
    code = int(lines[0][:3])
    texts = [line[4:].decode("utf-8", "replace").strip() for line in lines]
    text = "\n".join(texts)
    match = _ENHANCED.match(texts[0])
    enhanced = None
    if match and match.group(1) == str(code)[0]:
        enhanced = ".".join(match.groups())
    return Reply(code, text, enhanced)


def _tls_context() -> ssl.SSLContext:
    # Opportunistic TLS, as mail servers do among themselves: encrypt when offered, do not
    # verify (mail hosts' certificates often do not match or chain, RFC 7435).
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class SmtpClient:
    """One SMTP connection. Every method raises :class:`SmtpError` subclasses, nothing else."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.timeout = timeout
        self.extensions: dict[str, str] = {}
        self.tls = False
        #: QUIT was sent (pipelined with the last transaction): only closing is left.
        self.quitting = False
        #: The recorder of ``listhygiene explain`` (engine/trace.py), None when not tracing.
        self._trace = active()
        self._peer = ""
        #: Seconds each reply of the last exchange took after the one before (the first: after
        #: the send): how a host's pace shows, e.g. an error sleep (engine/probe.py).
        self.gaps: list[float] = []
        #: The shortest round trip of one command seen on this connection (None before one).
        self.rtt: float | None = None
        #: Called with (index in the exchange, reply, seconds after the one before) as each
        #: reply arrives: a prober reads a host's pace while a batch is still being answered.
        self.on_reply: Callable[[int, Reply, float], None] | None = None

    def _record(self, sent: list[str], replies: list[Reply], started: float) -> None:
        assert self._trace is not None
        took = (time.perf_counter() - started) * 1000
        for line in sent:
            self._trace.add("send", line, peer=self._peer)
        for reply in replies:
            self._trace.add("reply", str(reply), took_ms=took, peer=self._peer)

    @classmethod
    async def connect(
        cls, address: str, port: int, *, step_seconds: float, proxy: str | None = None
    ) -> "SmtpClient":
        """Open a connection (through a SOCKS proxy when given); the banner is not read yet."""
        trace = active()
        if trace is None:
            return await cls._connect(address, port, step_seconds, proxy)
        started = time.perf_counter()
        peer = f"{address}:{port}"
        try:
            client = await cls._connect(address, port, step_seconds, proxy)
        except SmtpError as exc:
            took = (time.perf_counter() - started) * 1000
            trace.add("connect", f"failed: {exc}", took_ms=took, peer=peer)
            raise
        how = f"connected via proxy {proxy_address(proxy)}" if proxy else "connected"
        trace.add("connect", how, took_ms=(time.perf_counter() - started) * 1000, peer=peer)
        client._peer = peer
        return client

    @classmethod
    async def _connect(
        cls, address: str, port: int, step_seconds: float, proxy: str | None
    ) -> "SmtpClient":
        timeout = step_seconds
        try:
            async with asyncio.timeout(timeout):
                if proxy:
                    from python_socks.async_.asyncio import Proxy

                    sock = await Proxy.from_url(proxy).connect(
                        dest_host=address, dest_port=port, timeout=timeout
                    )
                    reader, writer = await asyncio.open_connection(sock=sock, limit=LINE_LIMIT)
                else:
                    reader, writer = await asyncio.open_connection(address, port, limit=LINE_LIMIT)
        except TimeoutError:
            raise SmtpTimeout(f"connect to {address}:{port} timed out") from None
        except (OSError, ValueError) as exc:
            raise SmtpConnectError(f"connect to {address}:{port}: {exc}") from None
        except Exception as exc:  # python-socks' ProxyError and friends
            via = proxy_address(proxy) if proxy else "?"
            raise SmtpConnectError(f"connect to {address}:{port} via proxy {via}: {exc}") from None
        return cls(reader, writer, timeout)

    # -- replies ---------------------------------------------------------------------------------

    async def _read_reply(self) -> Reply:
        lines: list[bytes] = []
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                raise SmtpProtocolError("reply line too long") from None
            except asyncio.IncompleteReadError:
                raise SmtpDisconnected("connection closed by the server") from None
            except (ConnectionError, OSError) as exc:
                raise SmtpDisconnected(f"connection lost: {exc}") from None
            except ValueError:  # the stream's own limit, hit inside readuntil
                raise SmtpProtocolError("reply line too long") from None
            if (
                len(line) < 4
                or not line[:3].isdigit()
                or line[3:4] not in (b" ", b"-", b"\r", b"\n")
            ):
                raise SmtpProtocolError(f"not an SMTP reply: {line[:40]!r}")
            if lines and line[:3] != lines[0][:3]:
                raise SmtpProtocolError("reply lines with different codes")
            lines.append(line.rstrip(b"\r\n"))
            if line[3:4] != b"-":
                return _parse_reply(lines)
            if len(lines) >= MAX_REPLY_LINES:
                raise SmtpProtocolError("reply with too many lines")

    async def _replies(self, count: int, each: float, later: float | None = None) -> list[Reply]:
        """``count`` replies, each within ``each`` seconds of the one before (or of the send);
        after the first, within ``later`` when given.

        Each reply is timed, not the batch: a host that answers errors slowly on purpose
        (Postfix's error sleep, Exchange's tarpit) is alive, and a pipelined batch of slow
        refusals must not run out of one step's time (docs/engine.md, "Hosts that defend
        themselves"). ``gaps`` keeps how long each reply took after the one before it.
        """
        replies: list[Reply] = []
        loop = asyncio.get_running_loop()
        self.gaps = []
        last = loop.time()
        try:
            while len(replies) < count:
                async with asyncio.timeout(each if later is None or not replies else later):
                    reply = await self._read_reply()
                now = loop.time()
                self.gaps.append(now - last)
                if self.on_reply is not None:
                    self.on_reply(len(replies), reply, now - last)
                last = now
                replies.append(reply)
        except TimeoutError:
            raise SmtpTimeout("no reply within the time limit", replies) from None
        except SmtpError as exc:
            exc.partial = replies
            raise
        return replies

    async def _send(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            async with asyncio.timeout(self.timeout):
                await self._writer.drain()
        except TimeoutError:
            raise SmtpTimeout("send timed out") from None
        except (ConnectionError, OSError, RuntimeError) as exc:
            raise SmtpDisconnected(f"connection lost: {exc}") from None

    # -- commands --------------------------------------------------------------------------------

    async def banner(self) -> Reply:
        if self._trace is not None:
            return (await self._traced([], 1, self.timeout))[0]
        return (await self._replies(1, self.timeout))[0]

    async def command(self, line: str, *, patience: float | None = None) -> Reply:
        """Send one command and read its reply, within ``patience`` seconds if given (a host
        known to be alive, which may hold the reply on purpose), else one step's limit."""
        wait = self.timeout if patience is None else patience
        if self._trace is not None:
            reply = (await self._traced([line], 1, wait))[0]
        else:
            await self._send(line.encode("utf-8") + b"\r\n")
            reply = (await self._replies(1, wait))[0]
        self.rtt = self.gaps[0] if self.rtt is None else min(self.rtt, self.gaps[0])
        return reply

    async def pipeline(self, lines: list[str], *, patience: float | None = None) -> list[Reply]:
        """Send every command at once (RFC 2920) and read their replies in order, each within
        one step's time limit of the reply before it; once the first has come (the host is
        alive), within ``patience`` if given, for a host that holds replies on purpose."""
        if self._trace is not None:
            return await self._traced(lines, len(lines), self.timeout, patience)
        await self._send(b"".join(line.encode("utf-8") + b"\r\n" for line in lines))
        return await self._replies(len(lines), self.timeout, patience)

    async def _traced(
        self, lines: list[str], count: int, each: float, later: float | None = None
    ) -> list[Reply]:
        """``lines`` sent and ``count`` replies read, each recorded with the round trip."""
        started = time.perf_counter()
        try:
            if lines:
                await self._send(b"".join(line.encode("utf-8") + b"\r\n" for line in lines))
            replies = await self._replies(count, each, later)
        except SmtpError as exc:
            self._record(lines, exc.partial, started)
            assert self._trace is not None
            self._trace.add("note", f"{type(exc).__name__}: {exc}", peer=self._peer)
            raise
        self._record(lines, replies, started)
        return replies

    async def ehlo(self, name: str) -> Reply:
        """EHLO, falling back to HELO (RFC 5321 section 3.2); records the extensions."""
        reply = await self.command(f"EHLO {name}")
        if reply.is_permanent:
            self.extensions = {}
            return await self.command(f"HELO {name}")
        extensions: dict[str, str] = {}
        for line in reply.text.splitlines()[1:]:
            keyword, _, params = line.strip().partition(" ")
            if keyword:
                extensions[keyword.upper()] = params
        self.extensions = extensions
        return reply

    def supports(self, extension: str) -> bool:
        return extension.upper() in self.extensions

    async def starttls(self) -> Reply:
        """STARTTLS; on success the connection is encrypted and EHLO must be sent again."""
        reply = await self.command("STARTTLS")
        if reply.code != 220:
            return reply
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.start_tls(_tls_context())
        except TimeoutError:
            raise SmtpTimeout("TLS handshake timed out") from None
        except (ssl.SSLError, ConnectionError, OSError) as exc:
            raise SmtpProtocolError(f"TLS handshake failed: {exc}") from None
        self.tls = True
        self.extensions = {}
        if self._trace is not None:
            self._trace.add("note", "TLS established (certificate not verified)", peer=self._peer)
        return reply

    async def quit(self, *, wait: bool = True) -> None:
        """Say goodbye politely without waiting long for the answer, then close.

        ``wait=False`` closes right after sending QUIT: for a host that holds every reply of
        the session (an error sleep), or a conversation out of step after a time-out."""
        if self.quitting:
            self.close()
            return
        if not wait:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                self._writer.write(b"QUIT\r\n")
            self.quitting = True
            self.close()
            return
        try:
            self._writer.write(b"QUIT\r\n")
            started = time.perf_counter()
            reply = await self._replies(1, min(self.timeout, 2.0))
            if self._trace is not None:
                self._record(["QUIT"], reply, started)
        except (SmtpError, ConnectionError, OSError, RuntimeError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self._writer.close()

"""Probing the mailboxes of one domain over as few SMTP sessions as possible.

One session carries many recipients: MAIL and a batch of RCPT in one round trip when the host
advertises PIPELINING, several transactions per session (RSET between). The first transaction of a
domain also asks for a random local part: if that is accepted, the domain is catch-all. The probe
is retried like any recipient, and the domain's verdicts wait for its answer, so a run that meets
greylisting gives the verdicts of one that does not. A "too many recipients" reply is not a
verdict: the host's cap is learnt and the rest go in new sessions. Temporary refusals
(greylisting, 421) are tried again after the shortest wait the host accepts (``retry.py``); what
is still refused then is unknown, with the reason. Mail exchangers are tried in preference order,
each address of one in turn, the next one starting after a short head start when the one before
has not opened a session yet (RFC 8305's idea, for MX hosts): a silent primary costs the head
start, not its time-out. Hosts that defend themselves are read from what they say and how fast:
a session ends before the host's error limits (``errors_per_session``, lowered by an error sleep
or a "too many errors" 421), a host that holds its refusals (a tarpit) gets side sessions, and
a rate ban leaves the whole provider alone for a while. See docs/engine.md, "Hosts that defend
themselves".
"""

import asyncio
import contextlib
import logging
import secrets
import string
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from listhygiene.engine.host_memory import FleetMemory, HostLimits
from listhygiene.engine.pacing import Pacer
from listhygiene.engine.providers import OTHER, SELF_HOSTED, provider_of
from listhygiene.engine.replies import Limit, Meaning, classify, limit_of
from listhygiene.engine.resolver import MailRoute
from listhygiene.engine.retry import HostGreylisting, named_delay, next_retry
from listhygiene.engine.settings import EngineSettings
from listhygiene.engine.smtp_client import (
    Reply,
    SmtpClient,
    SmtpError,
    SmtpTimeout,
)
from listhygiene.engine.syntax import Address
from listhygiene.statuses import MailboxOutcome, Reason

log = logging.getLogger(__name__)

__all__ = ["DomainProber", "MailboxVerdict", "ProbeContext"]


@dataclass(frozen=True, slots=True)
class MailboxVerdict:
    mailbox: MailboxOutcome
    reason: Reason | None = None  # why undetermined
    is_catchall: bool | None = None


_FINAL = {
    Meaning.ACCEPTED: MailboxOutcome.ACCEPTED,
    Meaning.NOT_FOUND: MailboxOutcome.NOT_FOUND,
    Meaning.DISABLED: MailboxOutcome.DISABLED,
    Meaning.FULL: MailboxOutcome.FULL,
}
_UNDETERMINED_REASON = {
    Meaning.BLOCKED: Reason.BLOCKED,
    Meaning.SMTPUTF8: Reason.SMTPUTF8_UNSUPPORTED,
    Meaning.FAILED: Reason.SMTP_UNREACHABLE,
    Meaning.GREYLISTED: Reason.GREYLISTED,
    Meaning.RATE_LIMITED: Reason.RATE_LIMITED,
    Meaning.TOO_MANY: Reason.RATE_LIMITED,
    Meaning.TOO_MANY_ERRORS: Reason.RATE_LIMITED,
}
_TEMPORARY = {Meaning.GREYLISTED, Meaning.RATE_LIMITED, Meaning.TOO_MANY}
#: A reply this much later than the host's round trip (and than its round trip again) was held
#: on purpose: an error sleep or a tarpit (docs/engine.md, "Hosts that defend themselves").
_SLOW_REPLY = 0.2
#: Recipients a transaction carries on such a host: its sessions share the domain's recipients.
_SLOW_BATCH = 3
#: How long a host that could not open a session (time-out, refused, not SMTP) is taken as down:
#: other domains on it fail at once with the same reason instead of queueing for its time-out.
_DOWN_SECONDS = 300.0
#: The key of the catch-all probe among the addresses refused for a while.
_PROBE = "probe"


@dataclass
class ProbeContext:
    """State shared by every domain of a run (one per engine)."""

    settings: EngineSettings
    pacer: Pacer
    #: domain -> accepts any local part (None: could not tell yet)
    catch_all: dict[str, bool | None] = field(default_factory=dict)
    #: domain -> the random local part used to test for catch-all (kept for greylist retries)
    probe_local: dict[str, str] = field(default_factory=dict)
    host_limits: dict[str, HostLimits] = field(default_factory=dict)
    #: host address -> what its greylisting has shown (the waits that pass, or do not)
    greylisting: dict[str, HostGreylisting] = field(default_factory=dict)
    #: host address -> (the failure that took it down, until when, loop time)
    down: dict[str, tuple[SmtpError, float]] = field(default_factory=dict)
    #: provider (or host address) -> loop time until which it is left alone: it banned us
    bans: dict[str, float] = field(default_factory=dict)
    #: Replies in which a host said we went too far (``replies.Limit``), and the bans among them.
    limits_met: int = 0
    bans_met: int = 0
    #: Called with (domain, "ok" | "unreachable" | "blocked") after each domain's first session.
    on_reach: Callable[[str, str], None] = lambda domain, state: None
    #: What the fleet learnt of hosts (``shared_limits``; nothing without a store).
    fleet: FleetMemory = field(default_factory=lambda: FleetMemory(None))

    def limits(self, ip: str) -> HostLimits:
        limits = self.host_limits.get(ip)
        if limits is None:
            settings = self.settings
            limits = self.host_limits[ip] = HostLimits(
                settings.rcpt_per_session, settings.errors_per_session
            )
        return limits

    def politeness(self) -> dict[str, int]:
        """What the run's sessions cost the hosts: the ``politeness`` of a run's summary."""
        return {
            "sessions": self.pacer.sessions,
            "max_sessions_one_host": self.pacer.max_one_host,
            "limits_met": self.limits_met,
            "bans": self.bans_met,
        }

    def heard(self, reply: Reply, ip: str, provider: str | None) -> None:
        """Act on a reply that says we went too far: count it; a rate ban leaves the whole
        provider (or the host) alone for the time it names or ``ban_backoff``; too many
        connections means one session fewer at once to the host (and its provider)."""
        limit = limit_of(reply)
        if limit is None:
            return
        self.limits_met += 1
        log.info("mail host %s: %s (%s)", ip, str(reply).splitlines()[0], limit.value)
        if limit is Limit.CONNECTIONS:
            self.pacer.fewer_sessions(ip, provider)
        elif limit is Limit.RATE:
            self.pacer.fewer_sessions(ip, provider, slower=True)
            key = provider or ip
            now = asyncio.get_running_loop().time()
            backoff = named_delay(reply.text)
            seconds = self.settings.ban_backoff if backoff is None else backoff
            if self.bans.get(key, 0.0) <= now:
                self.bans_met += 1
            self.bans[key] = max(self.bans.get(key, 0.0), now + seconds)
            self.fleet.write_ban(ip, provider, seconds)

    def ban_left(self, ip: str, provider: str | None) -> float:
        """Seconds until the provider of ``ip`` (or ``ip`` itself) may be asked again."""
        now = asyncio.get_running_loop().time()
        return max([0.0, *(self.bans.get(k, 0.0) - now for k in (provider, ip) if k)])

    def greylist_of(self, ip: str) -> HostGreylisting:
        return self.greylisting.setdefault(ip, HostGreylisting())

    def mark_down(self, ip: str, failure: SmtpError) -> None:
        self.down[ip] = (failure, asyncio.get_running_loop().time() + _DOWN_SECONDS)

    def down_failure(self, ip: str) -> SmtpError | None:
        """A fresh error like the one that took ``ip`` down, while it counts as down."""
        entry = self.down.get(ip)
        if entry is None:
            return None
        failure, until = entry
        if asyncio.get_running_loop().time() >= until:
            del self.down[ip]
            return None
        return type(failure)(str(failure))


@dataclass
class _BatchOutcome:
    answered: int = 0
    progressed: bool = False
    stop: bool = False  # end the session (a cap was learnt, or the host is closing)


@dataclass
class _SessionPace:
    """How one session's replies came: refusals answered without delay, until one was held."""

    fast_refusals: int = 0
    slow: bool = False


class _SessionRefused(Exception):
    """The host would not hold a conversation (banner, EHLO or MAIL refused)."""

    def __init__(self, meaning: Meaning, reply: Reply) -> None:
        super().__init__(str(reply))
        self.meaning = meaning
        self.reply = reply


@dataclass
class _Opened:
    """A session past banner and EHLO, holding its host's politeness slot."""

    index: int  # of the candidate (exchanger address) in preference order
    ip: str
    client: SmtpClient
    slot: contextlib.AsyncExitStack


class _NoHost(Exception):
    """Every candidate from the first one raced failed to open a session."""

    def __init__(self, failure: BaseException, ip: str) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.ip = ip


def _refusals(replies: list[Reply]) -> int:
    return sum(1 for reply in replies if not reply.is_positive)


def _random_local() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "lh-" + "".join(secrets.choice(alphabet) for _ in range(14))


class DomainProber:
    """Verifies the mailboxes of one domain; ``finish`` receives each verdict once."""

    def __init__(
        self,
        context: ProbeContext,
        domain: str,
        route: MailRoute,
        finish: Callable[[Address, MailboxVerdict], None],
    ) -> None:
        self.ctx = context
        self.settings = context.settings
        self.domain = domain
        self.route = route
        self._finish = finish
        self.work: deque[Address] = deque()
        self.deferred: dict[Address, Reason] = {}
        self._reached_reported = False
        self.sessions = 0
        # the catch-all probe: still to ask in this round; refused for now (ask next round)
        self._probe_due = False
        self._probe_deferred: Reason | None = None
        #: Verdicts waiting for the probe's answer (their is_catchall, and valid vs catchall).
        self._held: list[tuple[Address, MailboxOutcome, Reason | None]] = []
        # temporary refusals: the domain's first and latest, each recipient's first (loop time,
        # host), the longest delay a reply of this round named, the host that refused
        self._first_refusal: float | None = None
        self._last_refusal = 0.0
        self._refused: dict[Address | str, tuple[float, str]] = {}
        self._named: float | None = None
        self._refusing_ip: str | None = None
        #: host address -> the big provider it belongs to (None: a host of its own)
        self._provider: dict[str, str | None] = {}
        #: the exchangers' addresses of this round, in preference order: (MX name, address)
        self._candidates: list[tuple[str, str]] = []
        #: side sessions beside the main one, on a host that holds its refusals
        self._side: list[asyncio.Task[tuple[Reason, bool] | None]] = []

    # -- verdicts --------------------------------------------------------------------------------

    def finish(
        self, address: Address, mailbox: MailboxOutcome, reason: Reason | None = None
    ) -> None:
        self.deferred.pop(address, None)
        if self.ctx.catch_all.get(self.domain) is None and (
            self._probe_due or self._probe_deferred
        ):
            self._held.append((address, mailbox, reason))  # until the probe is answered
            return
        self._emit(address, mailbox, reason)

    def _emit(self, address: Address, mailbox: MailboxOutcome, reason: Reason | None) -> None:
        self._finish(address, MailboxVerdict(mailbox, reason, self.ctx.catch_all.get(self.domain)))

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for address, mailbox, reason in held:
            self._emit(address, mailbox, reason)

    def _report_reach(self, state: str) -> None:
        if not self._reached_reported:
            self._reached_reported = True
            self.ctx.on_reach(self.domain, state)

    # -- rounds ----------------------------------------------------------------------------------

    async def run(self, pending: deque[Address]) -> None:
        """Verify everything in ``pending``, including what is added to it while this runs."""
        loop = asyncio.get_running_loop()
        tried = 0.0  # the longest wait after the first refusal that was still refused
        while pending or self.deferred or self._probe_deferred:
            retrying = self._first_refusal is not None and bool(
                self.deferred or self._probe_deferred
            )
            self.work.extend(self.deferred)
            self.work.extend(pending)
            pending.clear()
            await self._round(pending)
            if not (self.deferred or self._probe_deferred):
                continue
            assert self._first_refusal is not None
            if retrying:
                tried = max(tried, self._last_refusal - self._first_refusal)
            ip = self._refusing_ip
            if ip:  # what the fleet's triplets showed of the host's greylisting, if shared
                await self.ctx.fleet.read_greylisting(ip, self.ctx.greylisting)
            target = next_retry(
                schedule=self.settings.retry_delays,
                max_wait=self.settings.retry_max_wait,
                tried=tried,
                named=self._named,
                host=self.ctx.greylisting.get(ip) if ip else None,
            )
            if target is None:  # not in this run: unknown, for the second pass
                self._probe_deferred = None
                for address, reason in list(self.deferred.items()):
                    self.finish(address, MailboxOutcome.UNDETERMINED, reason)
                continue
            await asyncio.sleep(max(0.0, self._first_refusal + target - loop.time()))
        self._release_held()
        self._settle_catch_all()

    def _settle_catch_all(self) -> None:
        self.ctx.catch_all.setdefault(self.domain, None)

    def _take(self, pending: deque[Address], count: int) -> list[Address]:
        batch: list[Address] = []
        while len(batch) < count and (self.work or pending):
            batch.append(self.work.popleft() if self.work else pending.popleft())
        return batch

    def _has_work(self, pending: deque[Address], *, probe: bool = True) -> bool:
        return bool(self.work or pending or (probe and self._probe_due))

    async def _round(self, pending: deque[Address]) -> None:
        """Sessions over the exchangers until the work is done or every host has failed.

        One session at a time, but on a host that holds its refusals (a tarpit, an error
        sleep) up to ``host_concurrency`` sessions share the domain's recipients: the waits are
        the host's, and two sessions wait them side by side (docs/engine.md, "Hosts that defend
        themselves")."""
        if self.ctx.catch_all.get(self.domain) is None:
            known = await self.ctx.fleet.read_catch_all(self.domain)
            if known is not None:  # another worker's probe answered (shared store): no probe
                self.ctx.catch_all[self.domain] = known
                self._release_held()
        self.deferred = {}
        self._named = None
        self._probe_due = self.ctx.catch_all.get(self.domain) is None
        self._probe_deferred = None
        failure: tuple[Reason, bool] | None = None
        candidates = [(mx.name, ip) for mx in self.route.exchangers for ip in mx.addresses]
        self._candidates = candidates
        for name, ip in candidates:
            provider = provider_of([name], self.domain)
            self._provider[ip] = None if provider in (SELF_HOSTED, OTHER) else provider
        for _ in range(3):  # side sessions may hand work back as they end: another go takes it
            self._side = []
            try:
                failure = await self._sessions(pending, candidates, main=True) or failure
                for side in await asyncio.gather(*self._side):
                    failure = failure or side
            finally:
                for task in self._side:
                    task.cancel()
                await asyncio.gather(*self._side, return_exceptions=True)
            if failure or not self._has_work(pending):
                break
        if self._has_work(pending):
            reason, temporary = failure or (Reason.SMTP_UNREACHABLE, False)
            if failure and reason in (Reason.SMTP_TIMEOUT, Reason.SMTP_UNREACHABLE):
                self._report_reach("unreachable")
            elif failure and reason is Reason.BLOCKED:
                self._report_reach("blocked")
            if self._probe_due:
                self._probe_due = False
                self._probe_deferred = reason if temporary else None
            for address in self._take(pending, len(self.work) + len(pending)):
                if temporary:
                    self.deferred[address] = reason
                else:
                    self.finish(address, MailboxOutcome.UNDETERMINED, reason)

    async def _sessions(
        self, pending: deque[Address], candidates: list[tuple[str, str]], *, main: bool
    ) -> tuple[Reason, bool] | None:
        """One session after another, from the most preferred exchanger that answers; the
        failure that stopped them, if any. A side session (``main`` false) takes recipients
        only, never the catch-all probe, and ends when none is left."""
        failure: tuple[Reason, bool] | None = None
        index = 0
        guard = 0
        while self._has_work(pending, probe=main) and index < len(candidates):
            guard += 1
            if guard > 10_000:  # cannot happen with a sane server; never loop forever
                break
            if main:
                self._more_sessions(pending, candidates[index][1])
            try:
                opened = await self._open_race(candidates, index)
            except _NoHost as lost:
                failure = self._failure(lost.failure, lost.ip)
                break
            index = opened.index
            try:
                progressed = await self._converse(opened, pending, main=main)
            except (_SessionRefused, SmtpError) as exc:
                failure = self._failure(exc, opened.ip)
                index += 1
                continue
            if not progressed:
                index += 1  # a session that could not place a single recipient: next host
        return failure

    def _more_sessions(self, pending: deque[Address], ip: str) -> None:
        """Side sessions beside the main one, while the host holds its refusals and there are
        recipients enough to share."""
        if not self.ctx.limits(ip).error_sleep:
            return
        room = self.settings.host_concurrency - 1 - len(self._side)  # each keeps to the end
        left = len(self.work) + len(pending)
        for _ in range(min(room, left // _SLOW_BATCH)):
            self._side.append(
                asyncio.ensure_future(self._sessions(pending, self._candidates, main=False))
            )

    def _failure(self, exc: BaseException, ip: str) -> tuple[Reason, bool]:
        """(reason, temporary) of a session that failed."""
        if isinstance(exc, _SessionRefused):
            temporary = exc.meaning in _TEMPORARY or exc.meaning is Meaning.TOO_MANY_ERRORS
            if temporary:
                self._note_refusal(None, ip, exc.meaning, exc.reply)
            return _UNDETERMINED_REASON.get(exc.meaning, Reason.SMTP_UNREACHABLE), temporary
        if isinstance(exc, SmtpTimeout):
            return Reason.SMTP_TIMEOUT, False
        return Reason.SMTP_UNREACHABLE, False

    # -- opening: the exchangers raced with a head start -----------------------------------------

    async def _open_race(self, candidates: list[tuple[str, str]], start: int) -> _Opened:
        """A session opened with the first candidate from ``start`` that answers.

        The next candidate starts when the one before has failed, or has not opened within
        ``mx_head_start`` of starting to connect (time spent waiting for a host's politeness
        slot does not count: a busy primary is waited for, not raced). The first to open wins,
        the most preferred when several open together; the others are closed, so one session
        only ever carries this domain's recipients.
        """
        attempts: dict[asyncio.Future[_Opened], int] = {}
        connecting: dict[int, asyncio.Event] = {}
        failures: dict[int, BaseException] = {}
        next_index = start
        timer: asyncio.Future[None] | None = None

        def launch() -> None:
            nonlocal next_index, timer
            index, next_index = next_index, next_index + 1
            connecting[index] = asyncio.Event()
            task = asyncio.ensure_future(self._attempt(candidates[index][1], connecting[index]))
            attempts[task] = index
            if timer is not None:
                timer.cancel()
            timer = None
            if next_index < len(candidates):
                timer = asyncio.ensure_future(self._head_start(connecting[index]))

        launch()
        winners: list[tuple[int, _Opened]] = []
        settled = False
        try:
            while attempts and not winners:
                waiting: set[asyncio.Future[_Opened] | asyncio.Future[None]] = set(attempts)
                if timer is not None:
                    waiting.add(timer)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                launch_next = False
                if timer is not None and timer in done:
                    timer = None
                    launch_next = True
                for task in [attempt for attempt in attempts if attempt in done]:
                    index = attempts.pop(task)
                    error = task.exception()
                    if error is None:
                        winners.append((index, task.result()))
                    else:
                        failures[index] = error
                        if index == next_index - 1:  # the newest failed: the next one at once
                            launch_next = True
                if launch_next and not winners and next_index < len(candidates):
                    launch()
            settled = True
        finally:
            racing = list(attempts)
            left: list[asyncio.Future[_Opened] | asyncio.Future[None]] = [
                *racing,
                *([timer] if timer is not None else []),
            ]
            for future in left:
                future.cancel()
            results = await asyncio.gather(*left, return_exceptions=True)
            # the timer, if any, is last and opens nothing
            for task, result in zip(racing, results[: len(racing)], strict=True):
                if isinstance(result, _Opened):  # opened before it could be cancelled
                    winners.append((attempts[task], result))
            winners.sort(key=lambda pair: pair[0])
            for _, loser in winners[0 if not settled else 1 :]:
                await loser.client.quit()
                await loser.slot.aclose()
        if not winners:
            if not failures:
                raise _NoHost(SmtpError("no exchanger to try"), "")
            last = max(failures)  # the least preferred's failure, as when tried in turn
            raise _NoHost(failures[last], candidates[last][1])
        index, opened = winners[0]
        opened.index = index
        return opened

    async def _head_start(self, connecting: asyncio.Event) -> None:
        await connecting.wait()
        await asyncio.sleep(self.settings.mx_head_start)

    async def _attempt(self, ip: str, connecting: asyncio.Event) -> _Opened:
        """Take ``ip``'s politeness slot, connect, read the banner, EHLO (and STARTTLS)."""
        slot = contextlib.AsyncExitStack()
        provider = self._provider.get(ip)
        try:
            down = self.ctx.down_failure(ip)
            if down is None:
                await self.ctx.fleet.read_host(ip, self.ctx.limits(ip), provider, self.ctx.bans)
                await self._sit_out_ban(ip, provider)
                await slot.enter_async_context(self.ctx.pacer.session(ip, provider))
                down = self.ctx.down_failure(ip)  # learnt while this waited for the slot
                await self._sit_out_ban(ip, provider)  # a ban that came while it waited
            connecting.set()
            if down is not None:
                raise down
            self.sessions += 1
            client: SmtpClient | None = None
            try:
                client = await SmtpClient.connect(
                    ip,
                    self.settings.smtp_port,
                    step_seconds=self.settings.smtp_timeout,
                    proxy=self.settings.proxy_for(provider),
                )
                await self._open(client, ip)
            except _SessionRefused:
                assert client is not None
                await client.quit()  # a polite refusal deserves a polite goodbye
                raise
            except SmtpError as exc:
                if client is not None:
                    client.close()
                self.ctx.mark_down(ip, exc)
                raise
            except BaseException:
                if client is not None:
                    client.close()  # cancelled: another exchanger opened first
                raise
            return _Opened(-1, ip, client, slot)  # the race sets its index
        except BaseException:
            await slot.aclose()
            raise

    async def _sit_out_ban(self, ip: str, provider: str | None) -> None:
        """Wait out a ban of the host's provider (or the host) if the run waits that long; a
        longer one refuses the session as the provider would, for the retries to judge."""
        left = self.ctx.ban_left(ip, provider)
        if not left:
            return
        if left > self.settings.retry_max_wait:
            reply = Reply(421, f"4.7.0 {provider or ip} banned us for {left:.0f} more seconds")
            raise _SessionRefused(Meaning.RATE_LIMITED, reply)
        await asyncio.sleep(left)

    async def _open(self, client: SmtpClient, ip: str) -> None:
        provider = self._provider.get(ip)
        banner = await client.banner()
        if not banner.is_positive:
            self.ctx.heard(banner, ip, provider)
            raise _SessionRefused(classify(banner), banner)
        reply = await client.ehlo(self.settings.helo)
        if not reply.is_positive:
            self.ctx.heard(reply, ip, provider)
            raise _SessionRefused(classify(reply), reply)
        if self.settings.starttls and client.supports("STARTTLS"):
            reply = await client.starttls()
            if reply.code == 220:
                reply = await client.ehlo(self.settings.helo)
                if not reply.is_positive:
                    self.ctx.heard(reply, ip, provider)
                    raise _SessionRefused(classify(reply), reply)

    # -- one session -----------------------------------------------------------------------------

    async def _converse(self, opened: _Opened, pending: deque[Address], *, main: bool) -> bool:
        """The transactions of an opened session; returns whether it got anywhere."""
        client = opened.client
        try:
            self._report_reach("ok")
            progressed = await self._transactions(client, opened.ip, pending, main=main)
        except _SessionRefused:
            await client.quit()
            raise
        except BaseException:
            client.close()  # a broken conversation: do not wait for a QUIT reply
            raise
        else:
            await client.quit()
            return progressed
        finally:
            await opened.slot.aclose()
            await self.ctx.fleet.write_host(opened.ip, self.ctx.limits(opened.ip))
            await self.ctx.fleet.write_greylisting(opened.ip, self.ctx.greylisting.get(opened.ip))

    async def _transactions(
        self, client: SmtpClient, ip: str, pending: deque[Address], *, main: bool = True
    ) -> bool:
        """Transactions (MAIL + a batch of RCPT) until the work is done or the host stops us.

        A session also ends, politely and before the host must end it, once it has collected
        the host's budget of refused commands (``errors_per_session``, lowered per host by what
        it shows): Postfix slows every reply past its soft error limit and ends the session at
        its hard limit, so the next session goes on with a fresh count."""
        limits = self.ctx.limits(ip)
        provider = self._provider.get(ip)
        most = max(self.settings.smtp_timeout, self.settings.retry_max_wait)
        utf8 = client.supports("SMTPUTF8")
        rcpts_on_connection = 0
        errors = 0  # refused commands in this session: what a host's error limits count
        pace = _SessionPace()
        transactions = 0
        progressed = False
        while self._has_work(pending, probe=main):
            budget = limits.error_budget - errors
            if budget < 1:
                await client.quit(wait=False)  # its replies may be held: do not wait for one
                return True
            need_probe = main and self._probe_due
            room = min(limits.rcpt_cap, budget) - (1 if need_probe else 0)
            if limits.error_sleep or not limits.answered:
                # small batches on a host that holds its refusals, so that side sessions share
                # them; and on a host not heard yet, so that it can show it does
                room = min(room, _SLOW_BATCH - (1 if need_probe else 0))
            batch = self._take(pending, room) if room > 0 else []
            if not batch and not need_probe:
                break
            if not utf8:  # a UTF-8 local part cannot be sent to this host at all
                for address in [a for a in batch if a.needs_smtputf8]:
                    batch.remove(address)
                    self.finish(address, MailboxOutcome.UNDETERMINED, Reason.SMTPUTF8_UNSUPPORTED)
                    progressed = True
                if not batch and not need_probe:
                    continue
            recipients = ([self._probe_address()] if need_probe else []) + [
                a.smtp_address for a in batch
            ]
            sender = f"MAIL FROM:<{self.settings.mail_from}>"
            if utf8 and any(a.needs_smtputf8 for a in batch):
                sender += " SMTPUTF8"
            commands = (["RSET"] if transactions else []) + [sender]
            commands += [f"RCPT TO:<{r}>" for r in recipients]
            # The last transaction of the session carries QUIT in its group (RFC 2920 3.1):
            # the goodbye costs no round trip of its own.
            last = limits.one_transaction or not (self.work or pending)
            quit_now = last and client.supports("PIPELINING")
            if quit_now:
                commands.append("QUIT")
                client.quitting = True
            transactions += 1
            error: SmtpError | None = None
            client.on_reply = self._pace_watch(client, limits, pace, most, pending, ip, main)
            try:
                replies = await self._exchange(client, commands, limits, errors)
            except SmtpError as exc:
                replies, error = exc.partial, exc
            finally:
                client.on_reply = None
            errors_before = errors
            errors += _refusals(replies)
            limits.answered = limits.answered or len(replies) > 1
            for reply in replies:
                if not reply.is_positive:
                    self.ctx.heard(reply, ip, provider)
            if quit_now and len(replies) == len(commands):
                replies = replies[:-1]  # QUIT's 221
            if transactions > 1:
                replies = replies[1:]  # the RSET's reply
            if not replies:  # not even MAIL was answered
                self.work.extendleft(reversed(batch))
                raise error or SmtpError("no reply to MAIL")
            mail, rcpt_replies = replies[0], replies[1:]
            if not mail.is_positive:
                self.work.extendleft(reversed(batch))
                if classify(mail) is Meaning.TOO_MANY_ERRORS:
                    limits.saw_error_limit(errors_before)
                    return True  # the host ended the session: the next one goes on
                raise _SessionRefused(classify(mail), mail)
            # "too many errors" ends the session: what it cut off goes on in the next one
            cut = next(
                (i for i, r in enumerate(rcpt_replies) if classify(r) is Meaning.TOO_MANY_ERRORS),
                None,
            )
            if cut is not None:
                limits.saw_error_limit(errors_before + _refusals(replies[: cut + 1]))
                rcpt_replies = rcpt_replies[:cut]
                error = None
            closing = False
            if need_probe and rcpt_replies:
                probe_reply, rcpt_replies = rcpt_replies[0], rcpt_replies[1:]
                meaning = self._record_probe(probe_reply, ip, limits, rcpts_on_connection)
                progressed = progressed or meaning is not Meaning.TOO_MANY
                closing = probe_reply.code == 421
                if meaning is Meaning.TOO_MANY:
                    if not batch:
                        return True  # the cap is learnt; the probe goes in the next session
                else:
                    rcpts_on_connection += 1
            outcome = self._read_batch(
                batch, rcpt_replies, limits, rcpts_on_connection, ip, closing
            )
            rcpts_on_connection += outcome.answered
            progressed = progressed or outcome.progressed
            if cut is not None:
                return True
            if outcome.stop:
                return True
            if error is not None:
                raise error
            if limits.one_transaction or quit_now:
                return True
        return progressed or transactions > 0

    def _pace_watch(
        self,
        client: SmtpClient,
        limits: HostLimits,
        pace: "_SessionPace",
        most: float,
        pending: deque[Address],
        ip: str,
        main: bool,
    ) -> Callable[[int, Reply, float], None]:
        """What reads the host's pace from each reply of an exchange as it arrives: the first
        one held on purpose (an error sleep, a tarpit) teaches the host's limits at once, and
        side sessions may start while this one waits (``_more_sessions``)."""
        rtt = client.rtt or 0.0
        pipelined = client.supports("PIPELINING")

        def watch(index: int, reply: Reply, gap: float) -> None:
            # pipelined, only the first reply of a write carries a round trip; one by one, each
            held = gap - (rtt if index == 0 or not pipelined else 0.0)
            if held > max(_SLOW_REPLY, rtt):
                limits.saw_slow_reply(None if pace.slow else pace.fast_refusals, held, most)
                if not pace.slow and main:
                    self._more_sessions(pending, ip)
                pace.slow = True
            elif not reply.is_positive and not pace.slow:
                pace.fast_refusals += 1

        return watch

    def _read_batch(
        self,
        batch: list[Address],
        replies: list[Reply],
        limits: "HostLimits",
        rcpts_before: int,
        ip: str,
        closing: bool = False,
    ) -> "_BatchOutcome":
        """Turn a batch's RCPT replies into verdicts; put back what was not answered."""
        outcome = _BatchOutcome()
        back: list[Address] = []
        too_many = False
        for address, reply in zip(batch, replies, strict=False):
            meaning = classify(reply)
            if reply.code == 421:
                closing = True
            if meaning is Meaning.TOO_MANY:
                too_many = True
                back.append(address)
                continue
            outcome.answered += 1
            outcome.progressed = True
            if closing and meaning is Meaning.RATE_LIMITED:
                self._note_refusal(address, ip, meaning, reply)
                self.deferred[address] = Reason.RATE_LIMITED
            elif meaning in _FINAL:
                self._note_answer(address, ip)
                self.finish(address, _FINAL[meaning])
            elif meaning in _TEMPORARY:
                self._note_refusal(address, ip, meaning, reply)
                self.deferred[address] = _UNDETERMINED_REASON[meaning]
            else:
                self.finish(address, MailboxOutcome.UNDETERMINED, _UNDETERMINED_REASON[meaning])
        unanswered = batch[len(replies) :]
        if too_many:
            # The host's cap per connection is what it took on this connection before refusing.
            taken = rcpts_before + outcome.answered
            if taken == 0 and limits.rcpt_cap == 1:
                for address in back + unanswered:  # it takes none at all: ask again later
                    self.deferred[address] = Reason.RATE_LIMITED
                self._refusal_time(ip)
            else:
                limits.rcpt_cap = max(1, min(limits.rcpt_cap, taken))
                limits.one_transaction = True
                self.work.extendleft(reversed(back + unanswered))
            outcome.progressed = True
            outcome.stop = True
        elif closing:
            for address in unanswered:  # 421: the host closes; the rest wait for a retry
                self.deferred[address] = Reason.RATE_LIMITED
            if unanswered:
                self._refusal_time(ip)
            outcome.progressed = True
            outcome.stop = True
        else:
            self.work.extendleft(reversed(unanswered))
        return outcome

    # -- temporary refusals: what they teach about the wait (engine/retry.py) -------------------

    def _refusal_time(self, ip: str) -> float:
        now = asyncio.get_running_loop().time()
        if self._first_refusal is None:
            self._first_refusal = now
        self._last_refusal = now
        self._refusing_ip = ip
        return now

    def _note_refusal(
        self, key: Address | str | None, ip: str, meaning: Meaning, reply: Reply
    ) -> None:
        """A temporary refusal: when, by whom, the delay it names, what the host's shows."""
        now = self._refusal_time(ip)
        named = named_delay(reply.text)
        if named is not None:
            self._named = max(self._named or 0.0, named)
        if key is None or meaning is not Meaning.GREYLISTED:
            return
        first = self._refused.get(key)
        if first is None:
            self._refused[key] = (now, ip)
        elif first[1] == ip:
            self.ctx.greylist_of(ip).saw_refusal(now - first[0])

    def _note_answer(self, key: Address | str, ip: str) -> None:
        """A final answer: if the recipient was greylisted by this host, the wait that passed."""
        first = self._refused.pop(key, None)
        if first is not None and first[1] == ip:
            waited = asyncio.get_running_loop().time() - first[0]
            self.ctx.greylist_of(ip).saw_pass(waited)

    async def _exchange(
        self, client: SmtpClient, commands: list[str], limits: HostLimits, errors: int
    ) -> list[Reply]:
        """Send commands pipelined when the host allows it, else one by one.

        One by one, the batch stops early, before a recipient that would take the session past
        the host's error budget (``errors`` refusals so far), learnt from this batch's replies
        too: what is not sent goes in the next session."""
        patience = max(self.settings.smtp_timeout, self.settings.retry_max_wait)
        if client.supports("PIPELINING"):
            return await client.pipeline(commands, patience=patience)
        replies: list[Reply] = []
        for command in commands:
            if command.startswith("RCPT") and errors >= limits.error_budget:
                break
            try:
                # a host that has answered MAIL is alive: wait for a held RCPT reply patiently
                wait = patience if command.startswith("RCPT") else None
                reply = await client.command(command, patience=wait)
            except SmtpError as exc:
                exc.partial = replies
                raise
            replies.append(reply)  # its pace was read as it came (``_pace_watch``)
            if not reply.is_positive:
                errors += 1
            if command.startswith("MAIL") and not reply.is_positive:
                break
            if reply.code == 421:
                break
        return replies

    # -- the catch-all probe ---------------------------------------------------------------------

    def _probe_address(self) -> str:
        local = self.ctx.probe_local.get(self.domain)
        if local is None:
            local = self.ctx.probe_local[self.domain] = _random_local()
        return f"{local}@{self.domain}"

    def _record_probe(
        self, reply: Reply, ip: str, limits: HostLimits, rcpts_before: int
    ) -> Meaning:
        """The probe's answer: the catch-all verdict, or a refusal retried like any RCPT."""
        meaning = classify(reply)
        if meaning is Meaning.TOO_MANY:
            if rcpts_before == 0 and limits.rcpt_cap == 1:  # the host takes none: later
                self._probe_due = False
                self._probe_deferred = Reason.RATE_LIMITED
                self._refusal_time(ip)
            else:  # the probe is asked again within the cap
                limits.rcpt_cap = max(1, min(limits.rcpt_cap, rcpts_before))
                limits.one_transaction = True
            return meaning
        self._probe_due = False
        if meaning in _TEMPORARY:
            self._note_refusal(_PROBE, ip, meaning, reply)
            self._probe_deferred = _UNDETERMINED_REASON[meaning]
            return meaning
        if meaning is Meaning.ACCEPTED:
            self.ctx.catch_all[self.domain] = True
        elif meaning in (Meaning.NOT_FOUND, Meaning.DISABLED, Meaning.FULL):
            self.ctx.catch_all[self.domain] = False
        if meaning in _FINAL:
            self._note_answer(_PROBE, ip)
            # an answer, never a refusal for now or a block, is the fleet's (shared store)
            self.ctx.fleet.write_catch_all(self.domain, self.ctx.catch_all.get(self.domain), ip)
        self._probe_deferred = None
        self._release_held()  # whatever the probe said, it will not be asked again this round
        return meaning

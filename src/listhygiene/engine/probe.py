"""Probing the mailboxes of one domain over as few SMTP sessions as possible.

One session carries many recipients: MAIL and a batch of RCPT in one round trip when the host
advertises PIPELINING, several transactions per session (RSET between). The first transaction of a
domain also asks for a random local part: if that is accepted, the domain is catch-all. A "too
many recipients" reply is not a verdict: the host's cap is learnt and the rest go in new sessions.
Temporary refusals (greylisting, 421) are tried again after the configured delays; what is still
refused after them is unknown, with the reason. Mail exchangers are tried in preference order, and
each address of one in turn.
"""

import asyncio
import logging
import secrets
import string
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from listhygiene.engine.pacing import Pacer
from listhygiene.engine.replies import Meaning, classify
from listhygiene.engine.resolver import MailRoute
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
}
_TEMPORARY = {Meaning.GREYLISTED, Meaning.RATE_LIMITED, Meaning.TOO_MANY}


@dataclass
class _HostLimits:
    """What a mail host has told us about itself during this run."""

    rcpt_cap: int
    one_transaction: bool = False


@dataclass
class ProbeContext:
    """State shared by every domain of a run (one per engine)."""

    settings: EngineSettings
    pacer: Pacer
    #: domain -> accepts any local part (None: could not tell yet)
    catch_all: dict[str, bool | None] = field(default_factory=dict)
    #: domain -> the random local part used to test for catch-all (kept for greylist retries)
    probe_local: dict[str, str] = field(default_factory=dict)
    host_limits: dict[str, _HostLimits] = field(default_factory=dict)
    #: Called with (domain, "ok" | "unreachable" | "blocked") after each domain's first session.
    on_reach: Callable[[str, str], None] = lambda domain, state: None

    def limits(self, ip: str) -> _HostLimits:
        limits = self.host_limits.get(ip)
        if limits is None:
            limits = self.host_limits[ip] = _HostLimits(self.settings.rcpt_per_session)
        return limits


@dataclass
class _BatchOutcome:
    answered: int = 0
    progressed: bool = False
    stop: bool = False  # end the session (a cap was learnt, or the host is closing)


class _SessionRefused(Exception):
    """The host would not hold a conversation (banner, EHLO or MAIL refused)."""

    def __init__(self, meaning: Meaning, reply: Reply) -> None:
        super().__init__(str(reply))
        self.meaning = meaning


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

    # -- verdicts --------------------------------------------------------------------------------

    def finish(
        self, address: Address, mailbox: MailboxOutcome, reason: Reason | None = None
    ) -> None:
        self.deferred.pop(address, None)
        self._finish(address, MailboxVerdict(mailbox, reason, self.ctx.catch_all.get(self.domain)))

    def _report_reach(self, state: str) -> None:
        if not self._reached_reported:
            self._reached_reported = True
            self.ctx.on_reach(self.domain, state)

    # -- rounds ----------------------------------------------------------------------------------

    async def run(self, pending: deque[Address]) -> None:
        """Verify everything in ``pending``, including what is added to it while this runs."""
        delays = list(self.settings.retry_delays)
        while pending or self.deferred:
            self.work.extend(self.deferred)
            self.work.extend(pending)
            pending.clear()
            await self._round(pending)
            if not self.deferred:
                continue
            if not delays:
                for address, reason in list(self.deferred.items()):
                    self.finish(address, MailboxOutcome.UNDETERMINED, reason)
                continue
            await asyncio.sleep(delays.pop(0))
        self._settle_catch_all()

    def _settle_catch_all(self) -> None:
        self.ctx.catch_all.setdefault(self.domain, None)

    def _take(self, pending: deque[Address], count: int) -> list[Address]:
        batch: list[Address] = []
        while len(batch) < count and (self.work or pending):
            batch.append(self.work.popleft() if self.work else pending.popleft())
        return batch

    async def _round(self, pending: deque[Address]) -> None:
        """Sessions over the exchangers until the work is done or every host has failed."""
        self.deferred = {}
        failure: tuple[Reason, bool] | None = None
        candidates = [(mx.name, ip) for mx in self.route.exchangers for ip in mx.addresses]
        index = 0
        guard = 0
        while (self.work or pending) and index < len(candidates):
            guard += 1
            if guard > 10_000:  # cannot happen with a sane server; never loop forever
                break
            _, ip = candidates[index]
            try:
                progressed = await self._session(ip, pending)
            except _SessionRefused as refused:
                meaning = refused.meaning
                failure = (
                    _UNDETERMINED_REASON.get(meaning, Reason.SMTP_UNREACHABLE),
                    meaning in _TEMPORARY,
                )
                index += 1
                continue
            except SmtpTimeout:
                failure = (Reason.SMTP_TIMEOUT, False)
                index += 1
                continue
            except SmtpError:
                failure = (Reason.SMTP_UNREACHABLE, False)
                index += 1
                continue
            if not progressed:
                index += 1  # a session that could not place a single recipient: next host
        if self.work or pending:
            reason, temporary = failure or (Reason.SMTP_UNREACHABLE, False)
            if failure and reason in (Reason.SMTP_TIMEOUT, Reason.SMTP_UNREACHABLE):
                self._report_reach("unreachable")
            elif failure and reason is Reason.BLOCKED:
                self._report_reach("blocked")
            for address in self._take(pending, len(self.work) + len(pending)):
                if temporary:
                    self.deferred[address] = reason
                else:
                    self.finish(address, MailboxOutcome.UNDETERMINED, reason)

    # -- one session -----------------------------------------------------------------------------

    async def _session(self, ip: str, pending: deque[Address]) -> bool:
        """One SMTP session with ``ip``; returns whether it got anywhere (else: next host)."""
        settings = self.settings
        async with self.ctx.pacer.session(ip):
            self.sessions += 1
            client = await SmtpClient.connect(
                ip,
                settings.smtp_port,
                step_seconds=settings.smtp_timeout,
                proxy=settings.socks_proxy,
            )
            try:
                await self._open(client)
                self._report_reach("ok")
                progressed = await self._transactions(client, ip, pending)
            except _SessionRefused:
                await client.quit()  # a polite refusal deserves a polite goodbye
                raise
            except BaseException:
                client.close()  # a broken conversation: do not wait for a QUIT reply
                raise
            await client.quit()
            return progressed

    async def _open(self, client: SmtpClient) -> None:
        banner = await client.banner()
        if not banner.is_positive:
            raise _SessionRefused(classify(banner), banner)
        reply = await client.ehlo(self.settings.helo)
        if not reply.is_positive:
            raise _SessionRefused(classify(reply), reply)
        if self.settings.starttls and client.supports("STARTTLS"):
            reply = await client.starttls()
            if reply.code == 220:
                reply = await client.ehlo(self.settings.helo)
                if not reply.is_positive:
                    raise _SessionRefused(classify(reply), reply)

    async def _transactions(self, client: SmtpClient, ip: str, pending: deque[Address]) -> bool:
        """Transactions (MAIL + a batch of RCPT) until the work is done or the host stops us."""
        limits = self.ctx.limits(ip)
        utf8 = client.supports("SMTPUTF8")
        rcpts_on_connection = 0
        transactions = 0
        progressed = False
        while self.work or pending:
            need_probe = self.ctx.catch_all.get(self.domain) is None and limits.rcpt_cap > 1
            batch = self._take(pending, limits.rcpt_cap - (1 if need_probe else 0))
            if not utf8:  # a UTF-8 local part cannot be sent to this host at all
                for address in [a for a in batch if a.needs_smtputf8]:
                    batch.remove(address)
                    self.finish(address, MailboxOutcome.UNDETERMINED, Reason.SMTPUTF8_UNSUPPORTED)
                    progressed = True
                if not batch:
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
            try:
                replies = await self._exchange(client, commands)
            except SmtpError as exc:
                replies, error = exc.partial, exc
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
                raise _SessionRefused(classify(mail), mail)
            if need_probe and rcpt_replies:
                self._record_probe(rcpt_replies[0])
                rcpt_replies = rcpt_replies[1:]
                rcpts_on_connection += 1
            outcome = self._read_batch(batch, rcpt_replies, limits, rcpts_on_connection)
            rcpts_on_connection += outcome.answered
            progressed = progressed or outcome.progressed
            if outcome.stop:
                return True
            if error is not None:
                raise error
            if limits.one_transaction or quit_now:
                return True
        return progressed or transactions > 0

    def _read_batch(
        self,
        batch: list[Address],
        replies: list[Reply],
        limits: "_HostLimits",
        rcpts_before: int,
    ) -> "_BatchOutcome":
        """Turn a batch's RCPT replies into verdicts; put back what was not answered."""
        outcome = _BatchOutcome()
        back: list[Address] = []
        too_many = closing = False
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
                self.deferred[address] = Reason.RATE_LIMITED
            elif meaning in _FINAL:
                self.finish(address, _FINAL[meaning])
            elif meaning in _TEMPORARY:
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
            else:
                limits.rcpt_cap = max(1, min(limits.rcpt_cap, taken))
                limits.one_transaction = True
                self.work.extendleft(reversed(back + unanswered))
            outcome.progressed = True
            outcome.stop = True
        elif closing:
            for address in unanswered:  # 421: the host closes; the rest wait for a retry
                self.deferred[address] = Reason.RATE_LIMITED
            outcome.progressed = True
            outcome.stop = True
        else:
            self.work.extendleft(reversed(unanswered))
        return outcome

    async def _exchange(self, client: SmtpClient, commands: list[str]) -> list[Reply]:
        """Send commands pipelined when the host allows it, else one by one."""
        if client.supports("PIPELINING"):
            return await client.pipeline(commands)
        replies: list[Reply] = []
        for command in commands:
            try:
                reply = await client.command(command)
            except SmtpError as exc:
                exc.partial = replies
                raise
            replies.append(reply)
            if command.startswith("MAIL") and not reply.is_positive:
                break
            if reply.code == 421:
                break
        return replies

    def _probe_address(self) -> str:
        local = self.ctx.probe_local.get(self.domain)
        if local is None:
            local = self.ctx.probe_local[self.domain] = _random_local()
        return f"{local}@{self.domain}"

    def _record_probe(self, reply: Reply) -> None:
        meaning = classify(reply)
        if meaning is Meaning.ACCEPTED:
            self.ctx.catch_all[self.domain] = True
        elif meaning in (Meaning.NOT_FOUND, Meaning.DISABLED, Meaning.FULL):
            self.ctx.catch_all[self.domain] = False

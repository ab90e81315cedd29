"""The port 25 check: the mail hosts of a few big providers asked for a greeting, directly or
through the SOCKS proxy the engine would use, side by side; the first greeting ends it."""

import asyncio
import contextlib
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from listhygiene.engine.doctor.report import Check, Status
from listhygiene.engine.providers import OTHER, SELF_HOSTED, provider_of
from listhygiene.engine.proxies import proxy_address
from listhygiene.engine.resolver import Resolver
from listhygiene.engine.settings import EngineSettings
from listhygiene.engine.smtp_client import Reply, SmtpClient, SmtpError
from listhygiene.statuses import DnsOutcome

__all__ = [
    "SMTP_SECONDS",
    "Attempt",
    "MailHosts",
    "ip_text",
    "mail_hosts",
    "port_25_check",
    "proxy_of",
]

#: The most a mail host has to accept the connection and greet (the EHLO after it gets 1 s).
SMTP_SECONDS = 2.5
#: Mail hosts tried per domain (its first exchangers' first addresses).
HOSTS_PER_DOMAIN = 2
#: The address a mail host names in its EHLO reply, as Gmail's does: "at your service, [IP]".
_NAMED_ADDRESS = re.compile(r"\[([0-9A-Fa-f:.]+)\]")
#: asyncio's words for a failed connect, with the errno to say it in words.
_CONNECT_FAILED = re.compile(r"\[Errno (\d+)\] Connect call failed")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One mail host asked for a greeting."""

    host: str
    ip: str
    proxy: str | None
    banner: Reply | None = None
    failure: str = ""
    #: The address the host named in its EHLO reply (how it saw us), if it did.
    seen_as: str | None = None

    @property
    def where(self) -> str:
        via = f" via proxy {proxy_address(self.proxy)}" if self.proxy else ""
        return f"{self.host} ({self.ip}){via}"


def proxy_of(host: str, domain: str, settings: EngineSettings) -> str | None:
    """The SOCKS proxy a session to ``host`` goes through, as the engine picks it."""
    provider = provider_of([host], domain)
    return settings.proxy_for(None if provider in (SELF_HOSTED, OTHER) else provider)


async def _greet(host: str, ip: str, domain: str, settings: EngineSettings) -> Attempt:
    proxy = proxy_of(host, domain, settings)
    attempt = Attempt(host, ip, proxy)
    client: SmtpClient | None = None
    try:
        async with asyncio.timeout(SMTP_SECONDS):
            client = await SmtpClient.connect(
                ip, settings.smtp_port, step_seconds=SMTP_SECONDS, proxy=proxy
            )
            banner = await client.banner()
    except TimeoutError:
        if client is not None:
            client.close()
        return replace(attempt, failure=f"no greeting within {SMTP_SECONDS:g} s")
    except SmtpError as exc:
        if client is not None:
            client.close()
        return replace(attempt, failure=_short(str(exc)))
    seen_as = None
    if banner.is_positive:
        with contextlib.suppress(SmtpError, TimeoutError):
            async with asyncio.timeout(1.0):
                ehlo = await client.ehlo(settings.helo)
                found = _NAMED_ADDRESS.search(ehlo.text.splitlines()[0] if ehlo.text else "")
                seen_as = ip_text(found.group(1)) if found else None
    await client.quit(wait=False)
    return replace(attempt, banner=banner, seen_as=seen_as)


def _short(message: str) -> str:
    """An error's reason in words, without the "connect to IP:PORT" its attempt already names:
    "[Errno 111] Connect call failed (...)" is "connection refused"."""
    head, colon, rest = message.partition(": ")
    reason = rest if colon and head.startswith("connect to ") else message
    failed = _CONNECT_FAILED.match(reason)
    return os.strerror(int(failed.group(1))).lower() if failed else reason


def ip_text(text: str) -> str | None:
    """``text`` as an IP address in its usual form; None when it is not one."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


@dataclass
class MailHosts:
    """The mail hosts to try, and why a domain gave none."""

    targets: list[tuple[str, str, str]] = field(default_factory=list)  # (host, ip, domain)
    problems: list[str] = field(default_factory=list)


async def mail_hosts(resolver: Resolver, domains: Sequence[str]) -> MailHosts:
    found = MailHosts()
    routes = await asyncio.gather(*(resolver.route(d) for d in domains), return_exceptions=True)
    for domain, route in zip(domains, routes, strict=True):
        if isinstance(route, BaseException):
            found.problems.append(f"{domain}: {type(route).__name__}")
        elif not route.exchangers:
            why = "lookup failed" if route.outcome is DnsOutcome.ERROR else "no usable mail host"
            found.problems.append(f"{domain}: {why}")
        for exchanger in () if isinstance(route, BaseException) else route.exchangers:
            if len([t for t in found.targets if t[2] == domain]) < HOSTS_PER_DOMAIN:
                found.targets.append((exchanger.name, exchanger.addresses[0], domain))
    return found


async def port_25_check(
    hosts: MailHosts, domains: Sequence[str], settings: EngineSettings
) -> tuple[Check, list[Attempt]]:
    if not hosts.targets:
        return (
            Check(
                "port_25",
                Status.FAIL,
                f"not tried: no mail host of {', '.join(domains)} was found "
                f"({'; '.join(hosts.problems)})",
                "fix the resolver (the resolver check) or name reachable mail domains with "
                "--domain",
            ),
            [],
        )
    attempts: list[Attempt] = []
    tasks = [asyncio.create_task(_greet(h, ip, d, settings)) for h, ip, d in hosts.targets]
    try:
        for next_done in asyncio.as_completed(tasks):
            attempt = await next_done
            attempts.append(attempt)
            if attempt.banner is not None and attempt.banner.is_positive:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    via = " (through the SOCKS proxy)" if any(a.proxy for a in attempts) else ""
    greeted = [a for a in attempts if a.banner is not None]
    if greeted and greeted[-1].banner is not None and greeted[-1].banner.is_positive:
        answer = greeted[-1]
        first = str(answer.banner).splitlines()[0]
        return Check(
            "port_25", Status.OK, f"{answer.where} answered on port {settings.smtp_port}: {first}"
        ), attempts
    if greeted:
        refusal = greeted[0]
        return (
            Check(
                "port_25",
                Status.WARN,
                f"port {settings.smtp_port} is open{via}, but {refusal.where} refused this "
                f"machine: {str(refusal.banner).splitlines()[0]}",
                "see the blocklists and reverse DNS checks; verify from another address",
            ),
            attempts,
        )
    failures = "; ".join(f"{a.where}: {a.failure}" for a in attempts)
    advice = (
        "check that the SOCKS proxy runs and may reach port 25"
        if via
        else "open outbound port 25 (most clouds and ISPs block it: ask yours to lift the "
        "block), or verify through a SOCKS proxy on a host that may: --socks-proxy "
        "socks5://HOST:PORT"
    )
    return (
        Check(
            "port_25",
            Status.FAIL,
            f"no mail host answered on port {settings.smtp_port}{via}: {failures}",
            advice,
        ),
        attempts,
    )

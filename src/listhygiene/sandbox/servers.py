"""All the servers of one world, started and stopped together on one event loop."""

import asyncio
import errno
import random
from dataclasses import asdict, dataclass
from typing import Any

from listhygiene.sandbox.defences import Provider
from listhygiene.sandbox.dns_server import DnsServer, Zone
from listhygiene.sandbox.smtp_server import Directory, HostStats, MailHost
from listhygiene.sandbox.tls import server_context
from listhygiene.sandbox.world import World

__all__ = ["PortInUseError", "SandboxServers"]

_PORT_TRIES = 50


class PortInUseError(OSError):
    """A port the sandbox was told to use is taken."""


@dataclass(frozen=True)
class Endpoints:
    """Where a running world can be reached."""

    dns_host: str
    dns_port: int
    smtp_port: int
    hosts: dict[str, str]  # mail host name -> loopback address

    @property
    def dns_server(self) -> str:
        return f"{self.dns_host}:{self.dns_port}"

    def engine_environment(self) -> dict[str, str]:
        """The ``LISTHYGIENE_*`` settings that point the engine at this world, and no verdict
        store: a simulated world's verdicts must neither enter the user's store (the sample
        world has real domain names) nor stand in for another world's (docs/sandbox.md)."""
        return {
            "LISTHYGIENE_DNS_SERVER": self.dns_server,
            "LISTHYGIENE_SMTP_PORT": str(self.smtp_port),
            "LISTHYGIENE_ALLOW_PRIVATE_MX": "1",
            "LISTHYGIENE_VERDICTS": "none",
        }


class SandboxServers:
    """The DNS server and every mail host of a world. Use from inside a running event loop."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.addresses = world.host_addresses()
        self.dns = DnsServer(Zone(world, self.addresses))
        needs_tls = any(h.starttls for h in world.hosts.values())
        tls = server_context() if needs_tls else None
        directory = Directory(world)
        #: Big providers: one shared front door (limits, bans) for each provider's hosts.
        self.providers = {name: Provider(name, spec) for name, spec in world.providers.items()}
        self.hosts = {
            name: MailHost(name, spec, self.addresses[name], directory, tls, self._provider(name))
            for name, spec in world.hosts.items()
        }
        self.endpoints: Endpoints | None = None

    def _provider(self, host: str) -> Provider | None:
        name = self.world.provider_of(host)
        return None if name is None else self.providers[name]

    def stats(self, host: str) -> HostStats:
        return self.hosts[host].stats

    def defence_report(self) -> dict[str, Any]:
        """What the hosts said to clients that went too far, JSON-safe (docs/sandbox.md, "What
        the hosts said"): hosts with at least one connection, totals, and each provider."""
        every = [host.stats for host in self.hosts.values()]
        return {
            "hosts": {
                name: host.stats.defence_summary()
                for name, host in self.hosts.items()
                if host.stats.connections
            },
            "limits_met": sum(stats.limits_met for stats in every),
            "bans": sum(stats.bans for stats in every),
            "providers": {name: asdict(p.stats) for name, p in self.providers.items()},
        }

    async def start(
        self, *, dns_host: str = "127.0.0.1", dns_port: int = 0, smtp_port: int = 0
    ) -> Endpoints:
        """Bind everything. Port 0 picks free ports; a taken explicit port is PortInUseError."""
        try:
            port = await self.dns.start(dns_host, dns_port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    exc.errno, f"DNS port {dns_port} on {dns_host} is already in use"
                ) from None
            raise
        try:
            smtp = await self._start_hosts(smtp_port)
        except BaseException:
            await self.dns.stop()
            raise
        self.endpoints = Endpoints(dns_host, port, smtp, dict(self.addresses))
        return self.endpoints

    async def _start_hosts(self, smtp_port: int) -> int:
        candidates = (
            [smtp_port] if smtp_port else [random.randint(20000, 60000) for _ in range(_PORT_TRIES)]
        )
        for port in candidates:
            current: MailHost | None = None
            try:
                for current in self.hosts.values():
                    await current.start(port)
            except OSError as exc:
                await self._stop_hosts()
                if exc.errno != errno.EADDRINUSE:
                    raise
                if smtp_port:
                    assert current is not None
                    raise PortInUseError(
                        exc.errno,
                        f"SMTP port {port} on {current.address} (host {current.name}) "
                        "is already in use",
                    ) from None
                continue
            return port
        raise PortInUseError(errno.EADDRINUSE, "no free SMTP port found for the mail hosts")

    async def _stop_hosts(self) -> None:
        await asyncio.gather(*(h.stop() for h in self.hosts.values()))

    async def stop(self) -> None:
        await self._stop_hosts()
        await self.dns.stop()

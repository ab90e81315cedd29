"""Run a world from Python: a context manager with its own event loop in a background thread.

The servers live on their own loop so that the code under test (sync or async, with its own
loop) talks to them over real sockets exactly as it would to the internet::

    with Sandbox("sample_data/world.json") as sandbox:
        settings = sandbox.engine_environment()   # LISTHYGIENE_DNS_SERVER, ..._SMTP_PORT, ...
"""

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypedDict, TypeVar

import dns.asyncresolver
import dns.resolver

from listhygiene.sandbox.servers import Endpoints, SandboxServers
from listhygiene.sandbox.smtp_server import HostStats
from listhygiene.sandbox.world import World, load_world

if TYPE_CHECKING:
    from listhygiene.engine.settings import EngineSettings

__all__ = ["Sandbox"]

_R = TypeVar("_R", bound=dns.resolver.BaseResolver)


class _Bind(TypedDict):
    """Where the servers listen: the keyword arguments of ``SandboxServers.start``."""

    dns_host: str
    dns_port: int
    smtp_port: int


class Sandbox:
    """A running mail world: an authoritative DNS server and one SMTP server per mail host."""

    def __init__(
        self,
        world: World | Mapping[str, object] | str | Path,
        *,
        dns_host: str = "127.0.0.1",
        dns_port: int = 0,
        smtp_port: int = 0,
    ) -> None:
        if isinstance(world, World):
            self.world = world
        elif isinstance(world, Mapping):
            self.world = World.from_dict(world)
        else:
            self.world = load_world(world)
        self._bind: _Bind = {"dns_host": dns_host, "dns_port": dns_port, "smtp_port": smtp_port}
        self._servers: SandboxServers | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._endpoints: Endpoints | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("this sandbox is already running")
        loop = asyncio.new_event_loop()
        servers = SandboxServers(self.world)
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._endpoints = loop.run_until_complete(servers.start(**self._bind))
            except BaseException as exc:
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(servers.stop())
                _cancel_remaining(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=run, name="listhygiene-sandbox", daemon=True)
        thread.start()
        started.wait()
        if failure:
            thread.join()
            raise failure[0]
        self._servers, self._loop, self._thread = servers, loop, thread
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._thread = self._loop = self._servers = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- where things are ------------------------------------------------------------------------

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None or self._thread is None:
            raise RuntimeError("the sandbox is not running; use it as a context manager")
        return self._endpoints

    @property
    def dns_server(self) -> str:
        """``HOST:PORT`` of the DNS server, as ``--dns-server`` takes it."""
        return self.endpoints.dns_server

    @property
    def dns_port(self) -> int:
        return self.endpoints.dns_port

    @property
    def smtp_port(self) -> int:
        return self.endpoints.smtp_port

    def address_of(self, host: str) -> str:
        """The loopback address a mail host listens on."""
        return self.endpoints.hosts[host]

    def engine_environment(self) -> dict[str, str]:
        return self.endpoints.engine_environment()

    def engine_settings(self, **changes: Any) -> "EngineSettings":
        """Engine settings pointed at this sandbox (its DNS server and SMTP port, loopback mail
        hosts allowed), with ``changes`` on top: what a test's engine or ``clean()`` needs."""
        from listhygiene.engine.settings import EngineSettings

        given: dict[str, Any] = {
            "dns_server": self.dns_server,
            "smtp_port": self.smtp_port,
            "allow_private_mx": True,
        }
        return EngineSettings(**(given | changes))

    def stats(self, host: str) -> HostStats:
        """What a mail host has seen so far (connections, commands, pipelining)."""
        if self._servers is None:
            raise RuntimeError("the sandbox is not running")
        return self._servers.stats(host)

    def defence_report(self) -> dict[str, Any]:
        """What the hosts said to clients that went too far (``SandboxServers.defence_report``),
        taken on the servers' own loop so that it is one consistent moment."""
        if self._servers is None or self._loop is None:
            raise RuntimeError("the sandbox is not running")
        servers = self._servers

        async def take() -> dict[str, Any]:
            return servers.defence_report()

        return asyncio.run_coroutine_threadsafe(take(), self._loop).result(timeout=30)

    @property
    def dns_queries(self) -> int:
        """DNS queries the sandbox has answered (or dropped) so far."""
        if self._servers is None:
            raise RuntimeError("the sandbox is not running")
        return self._servers.dns.queries

    def resolver(self) -> dns.resolver.Resolver:
        """A dnspython resolver that asks this sandbox and nothing else."""
        return self._configure(dns.resolver.Resolver(configure=False))

    def async_resolver(self) -> dns.asyncresolver.Resolver:
        return self._configure(dns.asyncresolver.Resolver(configure=False))

    def _configure(self, resolver: _R) -> _R:
        resolver.nameservers = [self.endpoints.dns_host]
        resolver.port = self.endpoints.dns_port
        resolver.lifetime = 2.0
        resolver.timeout = 1.0
        return resolver


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the per-connection tasks that closing the servers left, and let them finish."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

"""A simulated mail world on loopback: authoritative DNS and SMTP servers from a JSON file.

Tests, demos and users' own pipeline tests verify addresses against it with no network, over
real sockets and real protocols, as moto does for AWS::

    from listhygiene.sandbox import Sandbox

    with Sandbox("sample_data/world.json") as sandbox:
        print(sandbox.dns_server, sandbox.smtp_port)
"""

from listhygiene.sandbox.generate import generate_world
from listhygiene.sandbox.runner import Sandbox
from listhygiene.sandbox.servers import Endpoints, PortInUseError
from listhygiene.sandbox.smtp_server import HostStats
from listhygiene.sandbox.world import World, WorldError, load_world

__all__ = [
    "Endpoints",
    "HostStats",
    "PortInUseError",
    "Sandbox",
    "World",
    "WorldError",
    "generate_world",
    "load_world",
]

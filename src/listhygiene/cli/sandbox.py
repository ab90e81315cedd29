"""``listhygiene sandbox``: run a simulated mail world on loopback."""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from listhygiene.sandbox.servers import Endpoints


def _exports(endpoints: "Endpoints") -> str:
    return "\n".join(f"export {k}={v}" for k, v in endpoints.engine_environment().items())


@click.group()
def sandbox() -> None:
    """A simulated mail world (DNS + SMTP servers on loopback) for tests and demos."""


@sandbox.command()
@click.argument("world", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dns-host", default="127.0.0.1", show_default=True, help="DNS server address.")
@click.option("--dns-port", default=5300, show_default=True, help="DNS port (0: any free port).")
@click.option(
    "--smtp-port",
    default=2525,
    show_default=True,
    help="Port every mail host listens on, each on its own 127.x address (0: any free port).",
)
@click.option("--foreground", is_flag=True, help="Serve in this process until Ctrl-C.")
def up(world: Path, dns_host: str, dns_port: int, smtp_port: int, foreground: bool) -> None:
    """Start WORLD (a JSON world file) in the background.

    Prints the engine settings that point at it as shell exports, so that

    \b
        eval "$(listhygiene sandbox up sample_data/world.json)"

    configures the commands that follow. Stop it with `listhygiene sandbox down`.

    \b
    Example:
        listhygiene sandbox up sample_data/world.json --smtp-port 2525
    """
    from listhygiene.sandbox import daemon
    from listhygiene.sandbox.world import WorldError

    try:
        if foreground:

            def ready(endpoints: "Endpoints") -> None:
                click.echo(_exports(endpoints))
                click.echo(
                    f"sandbox serving {len(endpoints.hosts)} mail hosts; Ctrl-C stops it", err=True
                )

            daemon.run_foreground(
                world, dns_host=dns_host, dns_port=dns_port, smtp_port=smtp_port, on_ready=ready
            )
            return
        state = daemon.up(world, dns_host=dns_host, dns_port=dns_port, smtp_port=smtp_port)
    except (WorldError, daemon.DaemonError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(_exports(state.endpoints))
    click.echo(
        f"sandbox up (pid {state.pid}): {len(state.hosts)} mail hosts, DNS on "
        f"{state.dns_host}:{state.dns_port}, SMTP port {state.smtp_port}; "
        "stop it with: listhygiene sandbox down",
        err=True,
    )


@sandbox.command()
def down() -> None:
    """Stop the background sandbox started by `sandbox up`.

    \b
    Example:
        listhygiene sandbox down
    """
    from listhygiene.sandbox import daemon

    try:
        state = daemon.down()
    except daemon.DaemonError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"sandbox stopped (pid {state.pid})", err=True)


@sandbox.command()
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(as_json: bool) -> None:
    """Tell whether a background sandbox runs, and where (exit 1 when none does).

    \b
    Example:
        listhygiene sandbox status --json
    """
    from dataclasses import asdict

    from listhygiene.sandbox import daemon

    state = daemon.read_state()
    if state is None:
        click.echo("no sandbox is running", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(asdict(state), indent=2))
    else:
        click.echo(_exports(state.endpoints))
        click.echo(f"pid {state.pid}, world {state.world}, log {state.log}", err=True)


@sandbox.command()
@click.argument("world", type=click.Path(dir_okay=False, path_type=Path))
def check(world: Path) -> None:
    """Validate a world file without starting it.

    \b
    Example:
        listhygiene sandbox check sample_data/world.json
    """
    from listhygiene.sandbox.world import WorldError, load_world

    try:
        loaded = load_world(world)
    except WorldError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{world}: {len(loaded.domains)} domains, {len(loaded.hosts)} mail hosts: OK")


@sandbox.command()
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--domains", type=int, default=300, show_default=True)
@click.option("--addresses", type=int, default=3000, show_default=True)
@click.option("--latency-ms", type=int, default=20, show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the world (JSON).",
)
@click.option(
    "--addresses-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write its addresses, one per line.",
)
def generate(
    seed: int, domains: int, addresses: int, latency_ms: int, out: Path, addresses_out: Path | None
) -> None:
    """Generate a large world from a seed, for benchmarks.

    \b
    Example:
        listhygiene sandbox generate --seed 7 --out big.json --addresses-out big.txt
    """
    from listhygiene.sandbox.generate import generate_world

    generated = generate_world(seed, domains=domains, addresses=addresses, latency_ms=latency_ms)
    generated.write(out, addresses_out)
    click.echo(
        f"{out}: {len(generated.world.domains)} domains, {len(generated.addresses)} addresses",
        err=True,
    )

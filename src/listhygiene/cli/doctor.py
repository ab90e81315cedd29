"""``listhygiene doctor``: what on this machine would make every verdict unknown."""

import json
from typing import Any

import click

from listhygiene.cli.options import build_settings, engine_options


@click.command()
@click.option(
    "--address",
    metavar="IP",
    envvar="LISTHYGIENE_PUBLIC_ADDRESS",
    help="This machine's public address, as mail hosts see it (default: the one a mail host "
    "names, else the SOCKS proxy's, else the local address towards the mail hosts). "
    "[env: LISTHYGIENE_PUBLIC_ADDRESS]",
)
@click.option(
    "--domain",
    "domains",
    multiple=True,
    metavar="DOMAIN",
    help="A domain whose mail hosts port 25 is tried on (repeatable; default: gmail.com, "
    "outlook.com, yahoo.com).",
)
@click.option(
    "--dnsbl",
    metavar="ZONE[,ZONE]",
    help="DNS blocklists to look the address up in. [env: LISTHYGIENE_DNSBL_ZONES]",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@engine_options
def doctor(
    address: str | None,
    domains: tuple[str, ...],
    dnsbl: str | None,
    as_json: bool,
    engine_settings: dict[str, Any],
) -> None:
    """Check this machine for what makes every verdict unknown: port 25 out to real mail hosts
    (through --socks-proxy when given), the address's reverse DNS, whether the HELO name
    resolves to it, the address on the DNSBLs, and a resolver that answers NXDOMAIN
    truthfully. One line per check, with what to do.

    Exit 0 when all is well (warnings allowed), 6 when port 25 is blocked, 1 otherwise. See
    docs/engine.md, "Doctor: auditing this machine".

    \b
    Example:
        listhygiene doctor
        listhygiene doctor --socks-proxy socks5://10.0.0.5:1080 --json | jq .checks
    """
    import asyncio
    import ipaddress
    import sys

    from listhygiene.engine.doctor import DEFAULT_DOMAINS
    from listhygiene.engine.doctor import doctor as run_doctor

    if address is not None:
        try:
            address = str(ipaddress.ip_address(address.strip()))
        except ValueError:
            raise click.BadParameter(
                f"{address!r} is not an IP address", param_hint="--address"
            ) from None
    if dnsbl is not None:
        engine_settings["dnsbl_zones"] = dnsbl
    settings = build_settings(engine_settings)
    report = asyncio.run(run_doctor(settings, address=address, domains=domains or DEFAULT_DOMAINS))
    if as_json:
        click.echo(json.dumps(report.as_dict(), ensure_ascii=False))
    else:
        for line in report.lines():
            click.echo(line)
        click.echo(f"{report.address_line()}; {report.seconds:.2f} s", err=True)
    sys.exit(report.exit_code)

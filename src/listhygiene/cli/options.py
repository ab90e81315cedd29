"""Option bundles shared by every command that verifies (the product's engine settings)."""

import functools
from collections.abc import Callable
from typing import Any

import click

_ENGINE_OPTIONS = [
    click.option(
        "--dns-server",
        metavar="HOST[:PORT]",
        help="Nameserver to ask (default: the system's). [env: LISTHYGIENE_DNS_SERVER]",
    ),
    click.option(
        "--smtp-port",
        type=int,
        metavar="N",
        help="Port of the mail hosts (default 25). [env: LISTHYGIENE_SMTP_PORT]",
    ),
    click.option(
        "--helo",
        metavar="NAME",
        help="EHLO name (default: this machine's FQDN). [env: LISTHYGIENE_HELO]",
    ),
    click.option(
        "--mail-from",
        metavar="ADDRESS",
        help="Envelope sender of the probes (default: verify@HELO).",
    ),
    click.option(
        "--concurrency",
        type=int,
        metavar="N",
        help="SMTP sessions at once (default 50). [env: LISTHYGIENE_CONCURRENCY]",
    ),
    click.option(
        "--smtp-timeout",
        type=float,
        metavar="SECONDS",
        help="Time limit of each SMTP step (default 10).",
    ),
    click.option(
        "--allow-private-mx",
        is_flag=True,
        default=None,
        help="Accept mail hosts on private or loopback addresses.",
    ),
    click.option(
        "--socks-proxy",
        metavar="URL",
        help="socks5://[user:pass@]host:port to reach port 25 through; or one per provider, "
        "google=URL,microsoft=URL,*=URL (*: every other host; none: direct). Each proxy address "
        "has budgets of its own (docs/engine.md). [env: LISTHYGIENE_SOCKS_PROXY]",
    ),
    click.option(
        "--provider-limits",
        metavar="FILE",
        help="TOML file of per-provider budgets over the shipped defaults: [google] "
        "concurrency = 3, rate = 1.0 (docs/engine.md, Per-provider budgets and proxies). "
        "[env: LISTHYGIENE_PROVIDER_LIMITS]",
    ),
    click.option(
        "--shared-limits",
        metavar="URL",
        help="redis://host:port/db or postgresql://... that the processes of a fleet share for "
        "one politeness budget per mail host (docs/deploy.md). [env: LISTHYGIENE_SHARED_LIMITS]",
    ),
    click.option(
        "--lists-dir",
        metavar="DIR",
        help="Folder of your changes to the disposable, free and role lists "
        "(docs/engine.md, Lists). [env: LISTHYGIENE_LISTS_DIR]",
    ),
]


def engine_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the engine settings to a command; it receives them as ``engine_settings``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in _NAMES}
        kwargs["engine_settings"] = {k: v for k, v in given.items() if v is not None}
        return command(*args, **kwargs)

    for option in reversed(_ENGINE_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


_NAMES = (
    "dns_server",
    "smtp_port",
    "helo",
    "mail_from",
    "concurrency",
    "smtp_timeout",
    "allow_private_mx",
    "socks_proxy",
    "provider_limits",
    "shared_limits",
    "lists_dir",
)


def build_settings(overrides: dict[str, Any]) -> Any:
    """EngineSettings from the environment, with command-line options on top."""
    from pydantic import ValidationError

    from listhygiene.engine.settings import EngineSettings

    try:
        return EngineSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise click.UsageError(f"invalid engine settings: {problems}") from None

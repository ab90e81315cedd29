"""Each big provider's politeness budget: SMTP sessions open at once, and new sessions a second,
to all of its MX hosts together (docs/engine.md, "Per-provider budgets and proxies").

The defaults are shipped in ``engine/data/provider_limits.toml``, each with why; a user's file of
the same form (``--provider-limits FILE``, ``provider_limits``) changes them::

    [google]
    concurrency = 3   # sessions open at once
    rate = 1.0        # new sessions a second

The budget of a provider is, in order: the user's file as given (a table may give one of the
two numbers; the other is the provider's budget without it); else the shipped value, capped by
``provider_concurrency`` and ``provider_rate``; else those two settings (a provider the shipped
file does not name). A file names only big providers (``mx_provider``'s names but
``self_hosted`` and ``other``: their hosts have no budget together, each has its own).
"""

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from listhygiene.engine.providers import OTHER, PROVIDERS, SELF_HOSTED
from listhygiene.errors import ConfigurationError

__all__ = [
    "BUDGETED",
    "ProviderLimit",
    "provider_budgets",
    "read_provider_limits",
    "shipped_limits",
]

#: The providers whose MX hosts share one budget: ``mx_provider``'s names but the two that are
#: not one provider.
BUDGETED: tuple[str, ...] = tuple(p for p in PROVIDERS if p not in (SELF_HOSTED, OTHER))
_KEYS = ("concurrency", "rate")
_SHIPPED = "provider_limits.toml"


@dataclass(frozen=True, slots=True)
class ProviderLimit:
    """Partial or whole: None where a file does not say."""

    concurrency: int | None = None
    rate: float | None = None


def read_provider_limits(path: str | Path) -> dict[str, ProviderLimit]:
    """The providers a user's file names, with what it says of each. Raises
    :class:`ConfigurationError`, one line naming the file and what is wrong."""
    where = f"--provider-limits {path}"
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(f"{where}: cannot be read ({reason})") from None
    return _parse(text, where)


@functools.cache
def shipped_limits() -> Mapping[str, ProviderLimit]:
    """The documented defaults (``engine/data/provider_limits.toml``)."""
    data = resources.files(__package__).joinpath("data").joinpath(_SHIPPED)
    return _parse(data.read_text("utf-8"), f"{__package__}/data/{_SHIPPED}")


def provider_budgets(
    path: str | Path | None, *, concurrency: int, rate: float
) -> dict[str, tuple[int, float]]:
    """Each budgeted provider's (sessions at once, new sessions a second): the shipped
    defaults capped by ``concurrency`` and ``rate`` (``provider_concurrency``,
    ``provider_rate``), with the user's file at ``path`` over them as given."""
    out: dict[str, tuple[int, float]] = {}
    for name in BUDGETED:
        shipped = shipped_limits().get(name, ProviderLimit())
        out[name] = (
            min(shipped.concurrency or concurrency, concurrency),
            min(shipped.rate or rate, rate),
        )
    if path is not None:
        for name, given in read_provider_limits(path).items():
            was_concurrency, was_rate = out[name]
            out[name] = (
                was_concurrency if given.concurrency is None else given.concurrency,
                was_rate if given.rate is None else given.rate,
            )
    return out


def _parse(text: str, where: str) -> dict[str, ProviderLimit]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{where}: not valid TOML: {exc}") from None
    out: dict[str, ProviderLimit] = {}
    for name, table in data.items():
        if name not in BUDGETED:
            why = (
                f"{name!r} has no budget of its own (each of its hosts has host_concurrency "
                "and host_rate)"
                if name in (SELF_HOSTED, OTHER)
                else f"unknown provider {name!r}"
            )
            raise ConfigurationError(
                f"{where}: {why}; the providers: {', '.join(BUDGETED)} (provider_concurrency "
                "and provider_rate are the budget of any other)"
            )
        if not isinstance(table, dict):
            raise ConfigurationError(
                f"{where}: {name} must be a table: [{name}] with concurrency and rate"
            )
        out[name] = _limit(table, f"{where}: [{name}]")
    return out


def _limit(table: dict[str, Any], where: str) -> ProviderLimit:
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigurationError(f"{where} {unknown[0]!r}: expected concurrency or rate")
    concurrency, rate = table.get("concurrency"), table.get("rate")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ConfigurationError(
            f"{where} concurrency = {concurrency!r}: expected a whole number of sessions, 1 or more"
        )
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or rate <= 0
    ):
        raise ConfigurationError(
            f"{where} rate = {rate!r}: expected new sessions a second, a number above 0"
        )
    return ProviderLimit(concurrency, None if rate is None else float(rate))

"""``listhygiene verdicts``: look after a verdict store (PRODUCT.md, "Verdict store").

The store is imported inside the commands, so ``listhygiene --help`` stays instant.
"""

import json
from pathlib import Path
from typing import Any

import click

VERDICTS_VARIABLE = "LISTHYGIENE_VERDICTS"

verdicts_option = click.option(
    "--verdicts",
    "verdicts_url",
    envvar=VERDICTS_VARIABLE,
    metavar="URL",
    help="The verdict store: sqlite:///path.db, postgresql://..., or none (default: "
    "verdicts.sqlite in the user's cache directory). [env: LISTHYGIENE_VERDICTS]",
)


@click.group()
def verdicts() -> None:
    """The verdict store that `clean` reuses fresh verdicts from.

    Only keyed hashes of addresses are stored, never the addresses.

    \b
    Example:
        listhygiene verdicts stats
        listhygiene verdicts prune --max-age 30d
        listhygiene verdicts forget jane@example.com
    """


def _open(url: str | None) -> Any:
    from listhygiene.verdicts import VerdictStore, VerdictStoreError

    if url is not None and url.strip().lower() == "none":
        raise click.UsageError("--verdicts none: there is no store to look after")
    try:
        return VerdictStore(url)
    except VerdictStoreError as exc:
        raise click.ClickException(str(exc)) from None


@verdicts.command()
@verdicts_option
def stats(verdicts_url: str | None) -> None:
    """Print what the store holds, as JSON: verdicts by status and by age.

    \b
    Example:
        listhygiene verdicts stats --verdicts postgresql://db/hygiene
    """
    with _open(verdicts_url) as store:
        click.echo(json.dumps(store.stats(), indent=2))


@verdicts.command()
@verdicts_option
@click.option(
    "--max-age",
    metavar="DURATION|STATUS=DURATION,...",
    help="The max ages `clean` uses (default: its defaults); verdicts older than the longest "
    "of them are deleted.",
)
def prune(verdicts_url: str | None, max_age: str | None) -> None:
    """Delete the verdicts no run would reuse: older than the longest max age.

    \b
    Example:
        listhygiene verdicts prune --max-age 30d,invalid=180d
    """
    from listhygiene.verdicts import Freshness

    try:
        older_than = Freshness.of(max_age).longest
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-age") from None
    with _open(verdicts_url) as store:
        gone = store.prune(older_than)
    click.echo(f"{gone:,} verdicts older than {older_than / 86400:g} days deleted", err=True)


@verdicts.command()
@verdicts_option
@click.argument("addresses", nargs=-1)
@click.option(
    "--file",
    "file_",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A text file of addresses to forget, one per line.",
)
def forget(verdicts_url: str | None, addresses: tuple[str, ...], file_: Path | None) -> None:
    """Erase what the store knows of ADDRESSES (a person's right to erasure).

    Addresses are read as `clean` reads them (case, spaces and `mailto:` do not matter).

    \b
    Example:
        listhygiene verdicts forget jane@example.com 'John <john@example.org>'
    """
    wanted = list(addresses)
    if file_ is not None:
        wanted += [line for line in file_.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not wanted:
        raise click.UsageError("give addresses, or --file FILE")
    with _open(verdicts_url) as store:
        gone = store.forget(wanted)
    click.echo(f"{gone:,} of {len(wanted):,} addresses were stored, and are forgotten", err=True)

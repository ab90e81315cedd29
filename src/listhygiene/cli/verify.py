"""``listhygiene verify``: verify addresses, one JSON line per result."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from listhygiene.cli.options import build_settings, engine_options


def _addresses(addresses: tuple[str, ...], file: Path | None) -> Iterator[str]:
    yield from addresses
    if file is not None:
        stream = sys.stdin if str(file) == "-" else file.open(encoding="utf-8-sig")
        with stream:
            for line in stream:
                if line.strip():
                    yield line.rstrip("\r\n")


def _count(file: Path | None, addresses: tuple[str, ...]) -> int | None:
    if file is None:
        return len(addresses)
    if str(file) == "-":
        return None
    with file.open("rb") as stream:
        return len(addresses) + sum(1 for line in stream if line.strip())


@click.command()
@click.argument("addresses", nargs=-1)
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of addresses, one per line ('-' for standard input).",
)
@click.option("--no-smtp", is_flag=True, help="Do not probe mailboxes: syntax, DNS and lists only.")
@click.option(
    "--form",
    type=click.Choice(["a", "b", "full"]),
    default="a",
    show_default=True,
    help="Shape of each line: form A's result, form B's, or every field.",
)
@engine_options
def verify(
    addresses: tuple[str, ...],
    file: Path | None,
    no_smtp: bool,
    form: str,
    engine_settings: dict[str, Any],
) -> None:
    """Verify ADDRESSES (and/or those of --file); print one JSON line per result.

    Results come in the order they are final, each with its `email`. A progress bar shows on a
    terminal. When most domains cannot be reached on the SMTP port, a warning says so.

    \b
    Example:
        listhygiene verify alice@example.com bob@example.org
        listhygiene verify --file list.txt --no-smtp > results.jsonl
    """
    import asyncio

    from listhygiene.engine import Engine

    if not addresses and file is None:
        raise click.UsageError("give addresses, or --file FILE")
    if file is not None and str(file) != "-" and not file.is_file():
        raise click.BadParameter(f"{file}: no such file", param_hint="--file")
    settings = build_settings(engine_settings)
    engine = Engine(settings)
    total = _count(file, addresses)
    show_progress = sys.stderr.isatty()

    def line(result: Any) -> str:
        if form == "b":
            return json.dumps(result.to_form_b(), ensure_ascii=False)
        if form == "full":
            return str(result.model_dump_json())
        return json.dumps(result.to_form_a(), ensure_ascii=False)

    async def run() -> int:
        done = 0
        try:
            with click.progressbar(
                length=total or 0, label="verifying", file=sys.stderr, hidden=not show_progress
            ) as bar:
                async for result in engine.verify_many(
                    _addresses(addresses, file), check_smtp=not no_smtp
                ):
                    click.echo(line(result))
                    done += 1
                    bar.update(1)
        finally:
            await engine.aclose()
        return done

    try:
        asyncio.run(run())
    except OSError as exc:
        raise click.ClickException(str(exc)) from None
    problem = engine.health.problem
    if problem:
        click.secho(f"WARNING: {problem}", fg="red", bold=True, err=True)

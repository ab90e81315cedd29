"""``listhygiene explain``: one address's whole verification, step by step."""

import json
from typing import Any

import click

from listhygiene.cli.options import build_settings, engine_options


@click.command()
@click.argument("address")
@click.option("--no-smtp", is_flag=True, help="Do not probe the mailbox: syntax, DNS and lists.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@engine_options
def explain(address: str, no_smtp: bool, as_json: bool, engine_settings: dict[str, Any]) -> None:
    """Verify ADDRESS and print the whole conversation: every DNS question and answer, each
    SMTP command and reply with its round trip, the row of the decision table that decided, and
    what the sessions cost the mail hosts (the politeness counts of a run's summary).

    A fresh engine asks everything again (no cache), so the output is what was said. For
    support and debugging; see docs/engine.md, "Explaining one address".

    \b
    Example:
        listhygiene explain alice@example.com
        listhygiene explain alice@example.com --json | jq .decision
    """
    import asyncio

    from listhygiene.engine.explain import explain as run_explain

    settings = build_settings(engine_settings)
    try:
        explanation = asyncio.run(
            run_explain(address, settings, check_smtp=False if no_smtp else None)
        )
    except OSError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(explanation.as_dict(), ensure_ascii=False))
        return
    for line in explanation.lines():
        click.echo(line)

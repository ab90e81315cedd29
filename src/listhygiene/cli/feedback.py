"""``listhygiene feedback``: what mail sent to the list taught, read into the verdict store
(PRODUCT.md, "Feedback"; docs/feedback.md). The command only translates: the pipeline reads the
exports and the store keeps them; errors become exit codes (2 usage, 3 unreadable input, 1 a
store that cannot be used).
"""

import json
import sys
from pathlib import Path

import click

from listhygiene.cli.verdicts import verdicts_option

_FORMATS = ("auto", "sendgrid", "mailgun", "ses", "postmark", "generic")


@click.group()
def feedback() -> None:
    """Bounces, clicks and replies from your email service, kept for the next `clean`.

    A hard bounce newer than an address's verification makes it invalid (reason bounced); a
    click or reply makes an address of a catch-all domain valid. Only keyed hashes of the
    addresses are stored.

    \b
    Example:
        listhygiene feedback add sendgrid-events.json mailgun-events.json
        listhygiene feedback add bounces.csv --format generic --verdicts postgresql://db/hygiene
    """


@feedback.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--format",
    "shape",
    type=click.Choice(_FORMATS),
    default="auto",
    show_default=True,
    help="The export's shape; auto tells them apart by their fields.",
)
@click.option("--table", help="With a SQLAlchemy URL as FILE: the table of events (generic shape).")
@click.option("--query", help="With a SQLAlchemy URL as FILE: a query giving the events.")
@verdicts_option
@click.option("--json", "as_json", is_flag=True, help="Print what was read as one JSON object.")
def add(
    files: tuple[str, ...],
    shape: str,
    table: str | None,
    query: str | None,
    verdicts_url: str | None,
    as_json: bool,
) -> None:
    """Read email service event exports (FILE...) into the verdict store.

    SendGrid event webhook JSON or CSV, Mailgun events JSON, Amazon SES notifications (SNS),
    Postmark webhooks or bounces JSON, or a generic CSV/Parquet with email, event, at[,
    bounce_type]. Each event is kept once, however often it is added. Bad rows are counted
    and reported in one line per file.

    \b
    Example:
        listhygiene feedback add sample_data/feedback_sendgrid.json sample_data/feedback_generic.csv
    """
    from listhygiene.errors import ListHygieneError, exit_code
    from listhygiene.pipeline import add_feedback
    from listhygiene.verdicts import VerdictStoreError

    sources = list(files)
    for name in sources:
        if "://" not in name and not Path(name).is_file():
            click.echo(f"listhygiene feedback: {name}: no such file", err=True)
            sys.exit(3)
    try:
        result = add_feedback(
            sources, format=shape, verdicts=verdicts_url, table=table, query=query
        )
    except VerdictStoreError as exc:
        click.echo(f"listhygiene feedback: {exc}", err=True)
        sys.exit(1)
    except ValueError as exc:
        if isinstance(exc, ListHygieneError) and exit_code(exc) not in (None, 2):
            click.echo(f"listhygiene feedback: {exc}", err=True)
            sys.exit(exit_code(exc) or 1)
        raise click.UsageError(str(exc)) from None
    except ListHygieneError as exc:
        click.echo(f"listhygiene feedback: {exc}", err=True)
        sys.exit(exit_code(exc) or 1)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
    else:
        for line in result.lines():
            click.echo(line)


@feedback.command()
@verdicts_option
def stats(verdicts_url: str | None) -> None:
    """Print the feedback events the store holds, by event, as JSON.

    \b
    Example:
        listhygiene feedback stats
    """
    from listhygiene.cli.verdicts import _open
    from listhygiene.verdicts.feedback import event_counts

    with _open(verdicts_url) as store:
        counts = event_counts(store)
        click.echo(
            json.dumps(
                {"store": store.shown, "events": sum(counts.values()), "by_event": counts}, indent=2
            )
        )

"""``listhygiene keys``: issue API keys for ``listhygiene serve``.

The store (and SQLAlchemy) is imported inside the command, so ``listhygiene --help`` stays
instant. A new key goes to stdout alone, so that scripts can capture it; everything else goes to
stderr.
"""

import click

from listhygiene.vocabulary import DEFAULT_PLAN, PLANS

DEFAULT_DB = "sqlite:///listhygiene.db"


@click.group()
def keys() -> None:
    """API keys of the service: created here, stored hashed.

    \b
    Example:
        listhygiene keys create --db sqlite:///listhygiene.db --name acme --credits 1000
    """


_db_option = click.option(
    "--db",
    envvar="LISTHYGIENE_DB",
    default=DEFAULT_DB,
    show_default=True,
    metavar="URL",
    help="sqlite:///path.db or postgresql://user@host/db. [env: LISTHYGIENE_DB]",
)


@keys.command()
@_db_option
@click.option("--name", required=True, help="Who the key is for (shown in /credits).")
@click.option(
    "--credits",
    "credits_",
    required=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="Credits to start with.",
)
@click.option(
    "--plan",
    type=click.Choice(PLANS),
    default=DEFAULT_PLAN,
    show_default=True,
    help="Plan (sets form B's hourly and daily rate limits).",
)
def create(db: str, name: str, credits_: int, plan: str) -> None:
    """Create an API key and print it, alone on one line of stdout.

    The key is shown only now: the database keeps its hash. The database is created and
    migrated if needed.

    \b
    Example:
        KEY=$(listhygiene keys create --db sqlite:///listhygiene.db --name acme --credits 1000)
        listhygiene keys create --db postgresql://lh@db/lh --name big --credits 10 --plan starter
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from listhygiene.service.store import Store

    try:
        shown = make_url(db).render_as_string(hide_password=True)
    except ArgumentError as exc:
        raise click.BadParameter(str(exc), param_hint="--db") from None
    try:
        with Store(db) as store:
            key, row = store.create_key(name, credits_, plan)
    except (SQLAlchemyError, OSError, ImportError) as exc:
        reason = getattr(exc, "orig", None) or exc  # the driver's words, without SQLAlchemy's
        raise click.ClickException(f"cannot use the database {shown}: {reason}") from None
    click.echo(key)
    click.echo(
        f"created key {row.key_prefix}… (id {row.id}, plan {row.plan}, {row.credits_balance} "
        f"credits) in {shown}; it is not shown again",
        err=True,
    )


@keys.command()
@_db_option
@click.argument("key_id")
def disable(db: str, key_id: str) -> None:
    """Disable the key KEY_ID (its id, not the key): it is refused from now on.

    Form A answers a disabled key 403 4030 (access denied), form B 401 INVALID_API_KEY. Its
    jobs, webhooks and credits are kept; `keys enable` gives it back.

    \b
    Example:
        listhygiene keys disable --db sqlite:///listhygiene.db 01J9Z3Q6W8X2K4M7N5P0R1S2T3
    """
    _set_active(db, key_id, active=False)


@keys.command()
@_db_option
@click.argument("key_id")
def enable(db: str, key_id: str) -> None:
    """Enable the disabled key KEY_ID again.

    \b
    Example:
        listhygiene keys enable --db sqlite:///listhygiene.db 01J9Z3Q6W8X2K4M7N5P0R1S2T3
    """
    _set_active(db, key_id, active=True)


def _set_active(db: str, key_id: str, *, active: bool) -> None:
    from sqlalchemy.exc import SQLAlchemyError

    from listhygiene.service.store import Store

    try:
        with Store(db) as store:
            found = store.set_key_active(key_id, active)
    except (SQLAlchemyError, OSError, ImportError) as exc:
        reason = getattr(exc, "orig", None) or exc
        raise click.ClickException(f"cannot use the database: {reason}") from None
    if not found:
        raise click.ClickException(f"no key with id {key_id}")
    click.echo(f"key {key_id} {'enabled' if active else 'disabled'}", err=True)

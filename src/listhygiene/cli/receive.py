"""``listhygiene receive-webhooks``: the webhook receiver of a remote service's deliveries."""

import os
from pathlib import Path

import click


@click.command("receive-webhooks")
@click.option("--events", "events_path", required=True, metavar="PATH", help="The event store.")
@click.option("--form", type=click.Choice(["a", "b"]), required=True, help="The service's form.")
@click.option(
    "--secret-env",
    metavar="NAME",
    help="The environment variable holding the webhook's secret (unsigned deliveries without).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8090, show_default=True, type=click.IntRange(1, 65535))
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def receive_webhooks(
    events_path: str,
    form: str,
    secret_env: str | None,
    host: str,
    port: int,
    ssl_certfile: Path | None,
    ssl_keyfile: Path | None,
) -> None:
    """Receive a service's webhook deliveries, verify them and record them in --events.

    A `clean --webhook-events PATH` run (or an Airflow trigger, a Dagster sensor) waits on the
    same store instead of polling. Signatures are checked in constant time; stale and replayed
    deliveries are refused or recorded once.

    \b
    Example:
        export HOOK_SECRET=...   # the secret of the webhook registered with the service
        listhygiene receive-webhooks --events hooks.db --form b --secret-env HOOK_SECRET \\
            --host 0.0.0.0 --port 8443 --ssl-certfile cert.pem --ssl-keyfile key.pem
    """
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    secret = None
    if secret_env:
        secret = os.environ.get(secret_env)
        if not secret:
            raise click.UsageError(f"--secret-env: ${secret_env} is not set")
    from listhygiene.cli.serve import _require_service

    _require_service("listhygiene receive-webhooks")
    import uvicorn

    from listhygiene.clients import EventStore, WebhookReceiver

    receiver = WebhookReceiver(EventStore(events_path), secret=secret, form=form)  # type: ignore[arg-type]
    uvicorn.run(
        receiver.app,
        host=host,
        port=port,
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        log_level="info",
    )

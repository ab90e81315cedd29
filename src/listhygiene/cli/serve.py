"""``listhygiene serve``: the HTTP service, form A under /a/v1 and form B under /b/v1.

Heavy modules (FastAPI, uvicorn, SQLAlchemy) are imported inside the command.
"""

from pathlib import Path
from typing import Any

import click

from listhygiene.cli.keys import DEFAULT_DB
from listhygiene.cli.options import build_settings, engine_options


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--db",
    envvar="LISTHYGIENE_DB",
    default=DEFAULT_DB,
    show_default=True,
    metavar="URL",
    help="sqlite:///path.db or postgresql://user@host/db. [env: LISTHYGIENE_DB]",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TLS certificate (PEM); with --ssl-keyfile, serve HTTPS.",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TLS private key (PEM).",
)
@click.option(
    "--allow-http-webhooks", is_flag=True, help="Accept http:// webhook URLs (local use, tests)."
)
@click.option(
    "--allow-private-webhooks",
    is_flag=True,
    help="Accept webhook URLs on private or loopback addresses (local use, tests).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes (one per core); they share jobs, credits and limits via --db.",
)
@click.option(
    "--job-slots",
    default=2,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Jobs run at once (by the server's job runner process).",
)
@click.option(
    "--stale-after",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="A job whose server has been silent this long is taken over (resumed) by another.",
)
@click.option(
    "--sync-deadline",
    default=25.0,
    show_default=True,
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="Form A /verify/single and /verify/bulk answer within this: addresses not verified by "
    "then are unknown (smtp_timeout, free).",
)
@click.option(
    "--verdicts",
    "feedback",
    metavar="URL",
    default=None,
    help="A verdict store whose feedback (listhygiene feedback add) applies to every result: a "
    "hard bounce makes an address invalid, a click or reply a catch-all address valid. "
    "Default: none. Verdicts are never reused by the service.",
)
@engine_options
def serve(
    host: str,
    port: int,
    db: str,
    ssl_certfile: Path | None,
    ssl_keyfile: Path | None,
    allow_http_webhooks: bool,
    allow_private_webhooks: bool,
    workers: int,
    job_slots: int,
    stale_after: float,
    sync_deadline: float,
    feedback: str | None,
    engine_settings: dict[str, Any],
) -> None:
    """Serve the verification API: form A at /a/v1, form B at /b/v1.

    Keys come from `listhygiene keys create` on the same --db.

    \b
    Example:
        KEY=$(listhygiene keys create --db sqlite:///lh.db --name acme --credits 100)
        listhygiene serve --db sqlite:///lh.db --port 8080 &
        curl -H "LISTHYGIENE-API-KEY: $KEY" -H 'Content-Type: application/json' \\
             -d '{"email": "alice@example.com"}' http://127.0.0.1:8080/a/v1/verify/single
    """
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    settings = build_settings(engine_settings)
    _require_service("listhygiene serve")

    import os

    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from listhygiene.service.access_log import log_config
    from listhygiene.service.factory import CONFIG_VARIABLE, ServeConfig, build_app
    from listhygiene.service.guards import server_options
    from listhygiene.service.runner import JobRunner
    from listhygiene.service.store import Store

    try:
        Store(db).close()  # migrated once, here, and any problem said before serving
    except (SQLAlchemyError, OSError, ImportError) as exc:
        reason = getattr(exc, "orig", None) or exc
        raise click.ClickException(f"cannot use the database: {reason}") from None
    if feedback and feedback.strip().lower() != "none":
        from listhygiene.verdicts import VerdictStore, VerdictStoreError

        try:
            VerdictStore(feedback).close()  # migrated once, and a bad URL said before serving
        except VerdictStoreError as exc:
            raise click.ClickException(str(exc)) from None
    config = ServeConfig(
        db=db,
        engine=settings.model_dump(mode="json", exclude_unset=True),
        allow_http_webhooks=allow_http_webhooks,
        allow_private_webhooks=allow_private_webhooks,
        sync_deadline=sync_deadline,
        worker={"slots": job_slots, "stale_after": stale_after},
        run_jobs=False,
        feedback=feedback,
    )
    tls = {
        "ssl_certfile": str(ssl_certfile) if ssl_certfile else None,
        "ssl_keyfile": str(ssl_keyfile) if ssl_keyfile else None,
    }
    # Bounded request heads and an access log without query strings (docs/security.md).
    options = {**tls, **server_options(), "log_config": log_config()}
    # Jobs and webhook deliveries run in a process of their own, so that no job's work holds up
    # a request (docs/service.md, "Fairness"); the server processes only admit and read.
    runner = JobRunner(config)
    runner.start()
    try:
        if workers == 1:
            uvicorn.run(build_app(config), host=host, port=port, log_level="info", **options)
            return
        # uvicorn's worker processes import the app by name: they read the configuration from
        # the environment they inherit.
        os.environ[CONFIG_VARIABLE] = config.to_json()
        uvicorn.run(
            "listhygiene.service.factory:app_from_environment",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="info",
            **options,
        )
    finally:
        runner.stop()


def _require_service(what: str) -> None:
    """The service's packages come from the ``service`` extra (listhygiene.extras)."""
    from listhygiene.errors import ConfigurationError
    from listhygiene.extras import require_extra

    try:
        require_extra("service", what)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None

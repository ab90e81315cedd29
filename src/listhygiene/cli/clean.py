"""``listhygiene clean``: verify an address table, write one Parquet file per status.

Exit codes (PRODUCT.md, docs/pipeline.md): 0 success, 1 any other failure, 2 a usage error, 3 the
input cannot be read or has no email column, 4 the backend refuses (authentication, credits, an
unreachable service), 5 a data-quality check failed, 6 most domains could not be reached on
port 25.
"""

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from listhygiene.cli.options import build_settings, engine_options
from listhygiene.cli.verdicts import verdicts_option
from listhygiene.vocabulary import BACKEND_KINDS

EXIT_FAILURE = 1
EXIT_USAGE = 2


def parse_duration(value: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` -> seconds (listhygiene.durations), or a usage error."""
    from listhygiene.durations import parse_duration as seconds

    try:
        return seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("input_", metavar="INPUT")
@click.option(
    "--out", help="Output folder or filesystem URL (s3://..., ...); required unless --estimate."
)
@click.option(
    "--estimate",
    "estimate_only",
    is_flag=True,
    help="Verify nothing: print the rows, distinct addresses, those invalid by syntax, the "
    "verdicts the store would reuse, those left to verify, a remote backend's credits and "
    "balance, and a time estimate (docs/pipeline.md, 'Estimating a run'). The run's other "
    "options are taken as they are; --out is not needed.",
)
@click.option("--email-column", help="The column holding the addresses (found by default).")
@click.option("--table", help="With a SQLAlchemy URL as INPUT: the table to read.")
@click.option("--query", help="With a SQLAlchemy URL as INPUT: the query to read.")
@click.option("--encoding", help="The input file's encoding (sniffed by default).")
@click.option(
    "--backend",
    type=click.Choice(BACKEND_KINDS),
    default="local",
    show_default=True,
    help="What verifies the addresses: this machine's engine, or a remote service in form A or B.",
)
@click.option("--base-url", metavar="URL", help="form-a/form-b: the service, ending in /v1.")
@click.option(
    "--api-key-env",
    default="LISTHYGIENE_API_KEY",
    show_default=True,
    metavar="NAME",
    help="form-a/form-b: the environment variable holding the API key (never a command line).",
)
@click.option(
    "--api-key-header",
    default="LISTHYGIENE-API-KEY",
    show_default=True,
    help="form-a: the key header (a remote service puts its own name in it).",
)
@click.option(
    "--webhook-events",
    metavar="PATH",
    help="form-a/form-b: the event store of a running webhook receiver "
    "(`listhygiene receive-webhooks`): wait on it instead of polling.",
)
@click.option("--no-smtp", is_flag=True, help="Do not probe mailboxes: syntax, DNS and lists.")
@click.option(
    "--warn-only", is_flag=True, help="Publish the outputs even when a data-quality check fails."
)
@click.option(
    "--accept-unreachable",
    is_flag=True,
    help="Publish the outputs even when most domains could not be reached on port 25 "
    "(otherwise the run exits 6 and publishes nothing).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the run's summary as one JSON object on stdout (on failure: an object with "
    "an 'error' member); logs and progress stay on stderr.",
)
@verdicts_option
@click.option(
    "--max-age",
    metavar="DURATION|STATUS=DURATION,...",
    help="How old a stored verdict may be to be reused: 30d for every status, "
    "valid=14d,risky=1d for some, or both (defaults: docs/pipeline.md). unknown is never reused.",
)
@click.option(
    "--fresh", is_flag=True, help="Verify every address again (and update the verdict store)."
)
@click.option(
    "--columns",
    "extra_columns",
    metavar="+NAME,...",
    help="Extra columns after the result columns: +suggestion (the address likely meant when "
    "the domain looks like a typo), +mx_provider (who runs the domain's mail). The summary and "
    "the report count both either way (docs/results.md).",
)
@click.option(
    "--write-back",
    "write_back_url",
    metavar="URL",
    help="After publishing, upsert the result columns into a table of this database "
    "(SQLAlchemy URL: PostgreSQL, MySQL/MariaDB, SQLite, DuckDB), keyed by --write-back-key or "
    "the address.",
)
@click.option("--write-back-table", metavar="NAME", help="--write-back: the table (schema.name).")
@click.option(
    "--write-back-key",
    metavar="COLUMN",
    help="--write-back: the input column that keys the table (default: the verified address).",
)
@click.option(
    "--retry-unknown-after",
    metavar="DURATION",
    help="Verify again, after DURATION (e.g. 15m), addresses that ended unknown for "
    "a temporary reason (greylisting, rate limits, time-outs).",
)
@click.option(
    "--storage-option",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An fsspec storage option for s3:// inputs and outputs (repeat it; a value is read as "
    "JSON when it parses), added to $LISTHYGIENE_STORAGE_OPTIONS: docs/object-storage.md.",
)
@engine_options
def clean(
    input_: str,
    out: str | None,
    estimate_only: bool,
    email_column: str | None,
    table: str | None,
    query: str | None,
    encoding: str | None,
    backend: str,
    base_url: str | None,
    api_key_env: str,
    api_key_header: str,
    webhook_events: str | None,
    no_smtp: bool,
    warn_only: bool,
    accept_unreachable: bool,
    as_json: bool,
    verdicts_url: str | None,
    max_age: str | None,
    fresh: bool,
    extra_columns: str | None,
    write_back_url: str | None,
    write_back_table: str | None,
    write_back_key: str | None,
    retry_unknown_after: str | None,
    storage_options: tuple[str, ...],
    engine_settings: dict[str, Any],
) -> None:
    """Verify the addresses of INPUT and write one Parquet file per status into --out.

    INPUT is a file (CSV, TXT, XLSX, XLS, Parquet, JSON lines) or a SQLAlchemy URL with
    --table or --query. Every input row lands in exactly one of valid.parquet,
    invalid.parquet, unknown.parquet, risky.parquet, disposable.parquet, catchall.parquet and
    role.parquet, with its own columns and the result columns; summary.json and report.html
    describe the run. Run the same command again to resume a run that was interrupted.

    \b
    Example:
        listhygiene clean contacts.csv --out cleaned/
        listhygiene clean contacts.csv --estimate
        listhygiene clean contacts.csv --out cleaned/ --columns +suggestion,+mx_provider
        listhygiene clean postgresql://db/crm --table contacts --out s3://bucket/clean/ --no-smtp
        LISTHYGIENE_API_KEY=lh_... listhygiene clean contacts.csv --out cleaned/ \\
            --backend form-b --base-url https://verify.example.com/b/v1
    """
    if not estimate_only and out is None:
        raise click.UsageError("Missing option '--out' (or give --estimate).")
    if (write_back_url is None) != (write_back_table is None):
        raise click.UsageError("--write-back and --write-back-table go together")
    if write_back_key is not None and write_back_url is None:
        raise click.UsageError("--write-back-key needs --write-back")
    if not estimate_only:
        from listhygiene.pipeline import start_early

        start_early()  # GX's import begins before the pipeline's (docs/pipeline.md, "Small lists")
    settings = build_settings(engine_settings)
    retry_after = parse_duration(retry_unknown_after) if retry_unknown_after else None
    if max_age is not None:
        from listhygiene.verdicts import Freshness

        try:
            Freshness.of(max_age)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-age") from None
    if storage_options:
        use_storage_options(storage_options)
    chosen: Any = backend
    if backend != "local":
        events = None if estimate_only else webhook_events  # an estimate waits on nothing
        chosen = remote_backend(backend, base_url, api_key_env, api_key_header, events)
    # what a run and its estimate read, verify and reuse alike
    common: dict[str, Any] = {
        "email_column": email_column,
        "table": table,
        "query": query,
        "encoding": encoding,
        "backend": chosen,
        "check_smtp": False if no_smtp else None,
        "settings": settings,
        "verdicts": verdicts_url,
        "max_age": max_age,
        "fresh": fresh,
    }
    if estimate_only:
        _estimate(input_, common, backend=backend, base_url=base_url, as_json=as_json)
        return
    assert out is not None  # (checked above)
    from listhygiene.pipeline import clean as run_clean
    from listhygiene.progress import ProgressBars

    progress = ProgressBars()
    try:
        result = run_clean(
            input_,
            out,
            **common,
            quality="warn" if warn_only else "fail",
            retry_unknown_after=retry_after,
            accept_unreachable=accept_unreachable,
            progress=progress,
            extra_columns=extra_columns,
        )
    except Exception as exc:
        progress.close()
        _fail(exc, backend=backend, base_url=base_url, as_json=as_json)
    progress.close()
    summary = result.summary
    written = None
    if write_back_url is not None and write_back_table is not None:
        from listhygiene.pipeline import write_back

        try:
            written = write_back(result.out, write_back_url, write_back_table, key=write_back_key)
        except Exception as exc:
            _fail(exc, backend=backend, base_url=base_url, as_json=as_json)
    if as_json:
        shown = summary if written is None else {**summary, "write_back": written.as_dict()}
        click.echo(json.dumps(shown, ensure_ascii=False))
    else:
        counts = "  ".join(f"{s} {n:,}" for s, n in summary["rows"]["by_status"].items())
        click.echo(f"{summary['rows']['total']:,} rows -> {out}")
        click.echo(f"  {counts}")
        click.echo(f"  report: {Path(result.report) if '://' not in out else result.report}")
        if written is not None:
            click.echo(
                f"  written back: {written.written:,} rows into {written.table} "
                f"(key {written.key}; {written.skipped:,} rows without one)"
            )
    if not summary["quality"]["passed"]:
        click.secho(
            "WARNING: data-quality checks failed (published because of --warn-only)",
            fg="yellow",
            err=True,
        )
    problem = (summary.get("health") or {}).get("problem")
    if problem:
        click.secho(
            f"WARNING: {problem} (published because of --accept-unreachable)",
            fg="red",
            bold=True,
            err=True,
        )
    politeness = summary.get("politeness") or {}
    limits, bans = int(politeness.get("limits_met") or 0), int(politeness.get("bans") or 0)
    if limits or bans:
        click.secho(
            f"WARNING: mail hosts said we went too fast ({limits} limit{'s' * (limits != 1)} "
            f"met, {bans} ban{'s' * (bans != 1)}): see docs/engine.md, "
            '"Hosts that defend themselves"',
            fg="yellow",
            err=True,
        )


def _estimate(
    input_: str, options: dict[str, Any], *, backend: str, base_url: str | None, as_json: bool
) -> None:
    """``--estimate``: :func:`listhygiene.estimate` with the run's options, printed; its
    errors exit as the run's would (3 an unreadable input, 4 a backend that refuses)."""
    from listhygiene.cli.estimate import describe
    from listhygiene.pipeline import estimate

    try:
        found = estimate(input_, **options)
    except Exception as exc:
        _fail(exc, backend=backend, base_url=base_url, as_json=as_json)
    if as_json:
        click.echo(json.dumps(found.as_dict(), ensure_ascii=False))
    else:
        click.echo("\n".join(describe(found)))


def use_storage_options(pairs: tuple[str, ...]) -> None:
    """Add ``--storage-option`` pairs to ``LISTHYGIENE_STORAGE_OPTIONS`` of this process, where
    the pipeline's filesystems read them (listhygiene.pipeline.storage)."""
    import os

    from listhygiene.errors import ConfigurationError
    from listhygiene.pipeline import STORAGE_OPTIONS_VARIABLE, parse_option, storage_options

    try:
        options = {**storage_options(), **dict(parse_option(p) for p in pairs)}
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--storage-option") from None
    os.environ[STORAGE_OPTIONS_VARIABLE] = json.dumps(options)


def _fail(exc: Exception, *, backend: str, base_url: str | None, as_json: bool) -> NoReturn:
    """One line on stderr (and with --json one object on stdout), then the documented exit
    code of the error's category (listhygiene.errors.exit_code, the one mapping); an exception
    the library does not raise on purpose is re-raised (a bug: keep its traceback)."""
    from listhygiene.clients import ClientError
    from listhygiene.errors import (
        ListHygieneError,
        QualityError,
        ServiceError,
        UnreachableError,
        exit_code,
    )
    from listhygiene.verdicts import VerdictStoreError

    message = str(exc)
    extra: dict[str, Any] = {}
    if isinstance(exc, ListHygieneError):
        code, kind = exit_code(exc) or EXIT_FAILURE, exc.kind
    elif isinstance(exc, VerdictStoreError):
        # Not (yet) under ListHygieneError: verdicts/store.py is another module's.
        code, kind = EXIT_FAILURE, "verdicts"
    else:
        raise exc
    if code == EXIT_USAGE:  # settings that cannot work: a usage error, nothing on stdout
        raise click.UsageError(message)
    if isinstance(exc, (ServiceError, ClientError)):
        message = f"the {backend} service at {base_url}: {exc}"
    elif isinstance(exc, QualityError):
        extra["quality"] = dict(exc.quality)
    elif isinstance(exc, UnreachableError):
        message += "; rerun with --accept-unreachable to publish them"
        extra["health"] = dict(exc.health)
    if as_json:
        error = {"exit_code": code, "kind": kind, "message": message, **extra}
        click.echo(json.dumps({"error": error}, ensure_ascii=False, default=str))
    click.secho(f"Error: {message}", fg="red", err=True)
    sys.exit(code)


def remote_backend(
    form: str,
    base_url: str | None,
    api_key_env: str,
    api_key_header: str,
    webhook_events: str | None,
) -> Any:
    """The form A or form B backend of the command line's options (the core's one factory,
    ``make_backend``; docs/backends.md)."""
    import os

    from listhygiene.pipeline import make_backend

    if not base_url:
        raise click.UsageError(f"--backend {form} needs --base-url")
    key = os.environ.get(api_key_env)
    if not key:
        raise click.UsageError(f"--backend {form}: set the API key in ${api_key_env}")
    return make_backend(
        form,
        base_url=base_url,
        api_key=key,
        api_key_header=api_key_header,
        events=webhook_events or None,
    )

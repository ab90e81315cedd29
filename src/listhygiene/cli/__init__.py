"""The ``listhygiene`` command. It only parses options and calls the library.

Heavy modules are imported inside commands, so ``listhygiene --help`` stays instant.
"""

import atexit
import contextlib
import logging
import os
import sys
import threading
from typing import NoReturn

import click

from listhygiene._version import __version__
from listhygiene.cli.clean import clean
from listhygiene.cli.doctor import doctor
from listhygiene.cli.explain import explain
from listhygiene.cli.feedback import feedback
from listhygiene.cli.keys import keys
from listhygiene.cli.receive import receive_webhooks
from listhygiene.cli.sandbox import sandbox
from listhygiene.cli.serve import serve
from listhygiene.cli.verdicts import verdicts
from listhygiene.cli.verify import verify

__all__ = ["main", "run"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="listhygiene")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Batch email-list hygiene: verify address tables, write one Parquet file per status."""
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


main.add_command(clean)
main.add_command(doctor)
main.add_command(explain)
main.add_command(feedback)
main.add_command(keys)
main.add_command(receive_webhooks)
main.add_command(sandbox)
main.add_command(serve)
main.add_command(verdicts)
main.add_command(verify)


def run() -> None:
    """The ``listhygiene`` console script (and ``python -m listhygiene.cli``): :func:`main`,
    then the exit without the interpreter's teardown.

    Tearing the interpreter down (full garbage collections over every object the command's
    imports made: pandas, pyarrow, DuckDB, SQLAlchemy, pydantic; then every module) took
    0.3-0.4 s of a small list's run, after its outputs were published and its files closed.
    The command's exit code, the wait for its threads that are not daemons, its atexit handlers
    (logging's flush, temporary folders, the checks' child) and the flush of stdout and stderr
    are kept; what is skipped are finalizers
    of objects still alive at exit, which Python does not promise to run anyway
    (docs/pipeline.md, "Small lists"). A command that fails with an unexpected exception exits
    as Python does, traceback first. :func:`main` run in-process (a test's ``CliRunner``) is
    unchanged.
    """
    try:
        main(prog_name="listhygiene")
    except SystemExit as stop:
        _exit_now(stop.code)
    _exit_now(0)  # (click's standalone mode always raises SystemExit)


def _exit_now(code: object) -> NoReturn:
    """``sys.exit(code)`` as far as anything outside the process can tell, without the teardown."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    # the interpreter's own first steps of an exit, in its order: threads that are not daemons
    # finish (with the thread pools told to), then the atexit handlers. Both are CPython's own
    # helpers, not public API: an interpreter without them exits the usual way.
    shutdown = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exit_handlers is None:
        sys.exit(status)
    shutdown()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing can reach it
            stream.flush()
    os._exit(status)

"""The ``listhygiene`` command. It only parses options and calls the library.

Heavy modules are imported inside commands, so ``listhygiene --help`` stays instant.
"""

import gc
import logging

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
    then an exit that does not walk the heap once more.

    Interpreter shutdown runs full garbage collections over every object the command's imports
    made (pandas, pyarrow, DuckDB, SQLAlchemy, ...): 0.3-0.4 s of a small list's run, after its
    work is done and its files are closed. Frozen objects are left to reference counting, and
    atexit handlers still run (docs/pipeline.md, "Small lists"). Only the process's own exit
    does this: :func:`main` run in-process (a test's ``CliRunner``) keeps its collector.
    """
    try:
        main(prog_name="listhygiene")
    finally:
        gc.freeze()

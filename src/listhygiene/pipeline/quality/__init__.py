"""The output checks: data-quality checks on what a run wrote, declared as Great Expectations
expectations. The one package the CLI pipeline, the Airflow chunk merge and the Dagster asset
checks all call (docs/pipeline.md, "Quality checks"): :func:`check_outputs`, with
:func:`warm_up` at the start of a run.

The promise of ``listhygiene clean`` is that every input row comes out in exactly one per-status
file, in the file of its own status, with a score and an email, and that the summary counts what
the files hold. These checks prove it on the written output, not on the pipeline's intentions.
A failing check never raises; only misuse does.

Where each part is, from the bottom up (no module imports one above it)::

    results.py    what the checks return (CheckResult, QualityReport) and their names (CHECKS)
    reading.py    the output files read back in bounded batches (BATCH_ROWS rows), as frames
    ledger.py     every input row exactly once, counted across the batches (two bits a row)
    suite.py      GX: its lazy import, the expectations, the batches' results added up
    messages.py   each check's verdict in words, a table of sentences per check
    checks.py     the checks run in this process: read, validate, count, combine, word
    worker.py     GX imported ahead of the checks in a child process (or a thread): warm_up
    __init__.py   check_outputs: in the worker when given one, here otherwise

GX is imported only when checks run, never when this package is imported.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING

from listhygiene.pipeline.layout import ROW_COLUMN, STATUSES
from listhygiene.pipeline.quality.checks import _check_outputs_here, run_quality_checks
from listhygiene.pipeline.quality.reading import BATCH_ROWS, status_files
from listhygiene.pipeline.quality.results import CHECKS, SAMPLE, CheckResult, QualityReport
from listhygiene.pipeline.quality.suite import gx_missing
from listhygiene.pipeline.quality.worker import (
    WORKER_VARIABLE,
    QualityWorker,
    default_worker_kind,
    start_early,
    warm_up,
)

if TYPE_CHECKING:
    import pyarrow.fs

    from listhygiene.pipeline.quality.reading import RowNumbers

__all__ = [
    "BATCH_ROWS",
    "CHECKS",
    "ROW_COLUMN",
    "SAMPLE",
    "STATUSES",
    "WORKER_VARIABLE",
    "CheckResult",
    "QualityReport",
    "QualityWorker",
    "check_outputs",
    "default_worker_kind",
    "gx_missing",
    "run_quality_checks",
    "start_early",
    "status_files",
    "warm_up",
]


def check_outputs(
    files: Mapping[str, str],
    *,
    expected_rows: int,
    summary_rows: Mapping[str, int],
    row_numbers: "Mapping[str, RowNumbers] | None" = None,
    filesystem: "pyarrow.fs.FileSystem | None" = None,
    batch_rows: int = BATCH_ROWS,
    worker: "QualityWorker | None" = None,
) -> QualityReport:
    """Check every row of the written per-status Parquet files; never raises because a check
    fails. Memory is bounded by ``batch_rows``, whatever the files hold.

    ``files`` maps each status to its file (:func:`status_files` gives the seven of a folder;
    a status left out is reported as "file not written", a name that is no status as a stray
    file), on ``filesystem`` (pyarrow's; local paths when None). Each file is read for its
    ``status``, ``score`` and ``email`` (``result_<name>`` when the input had such a column) and
    its row numbers: the file's own :data:`ROW_COLUMN`, or ``row_numbers[status]`` when given
    (a Parquet file whose first column holds them in the file's row order, or arrays whose
    concatenation does; an iterable of arrays is consumed in the thread that reads the files
    ahead). A file with neither has no row numbers, which fails the checks.

    ``expected_rows`` is the input's row count; ``summary_rows`` the summary's count per status,
    compared with each file's row count (from its Parquet footer).

    With ``worker`` (from :func:`warm_up`) the checks run in its child process, where GX is
    already imported; the files must then be readable from there (paths, or a picklable
    filesystem). Raises :class:`ValueError` for a negative count or a file without a status or
    score column.

    For a run that writes the files itself (the runner)::

        worker = quality.warm_up()          # at run start: GX imports in a child meanwhile
        ...                                 # read, verify, write the staged files
        report = quality.check_outputs(
            {s: folder.staged(status_file(s)) for s in STATUSES},
            expected_rows=rows, summary_rows=by_status,
            row_numbers={s: work_path / f"rows-{s}.parquet" for s in STATUSES},
            filesystem=folder.fs, worker=worker,
        )
        worker.close()                      # also when the run fails before checking
    """
    check = _check_outputs_here if worker is None else worker.check_outputs
    return check(
        files,
        expected_rows=expected_rows,
        summary_rows=summary_rows,
        row_numbers=row_numbers,
        filesystem=filesystem,
        batch_rows=batch_rows,
    )

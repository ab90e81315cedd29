"""Cleaning an address table: read, verify, join back, write per status, check, report.

The public names of the pipeline, as they have always been imported from here. The work is
done by modules of one job each (docs/pipeline.md, "How a run is built"):

    api.py          clean(), aclean(), submit(), asubmit(): options in, a CleanResult out
    runner.py       Run: the stages of one run, resumable at each (workdir.py)
    worktables.py   distinct addresses, what is left to verify, the join: DuckDB, out of core
    writer.py       the joined rows appended to one Parquet file per status, batch by batch
    summary.py      Summary: summary.json, frozen
    result.py       CleanResult: the summary, and a DataFrame per status on demand
"""

from listhygiene.errors import BackendError, PipelineError, QualityError, UnreachableError
from listhygiene.pipeline.api import aclean, asubmit, clean, submit
from listhygiene.pipeline.result import STATUSES, CleanResult
from listhygiene.pipeline.runner import Progress

__all__ = [
    "STATUSES",
    "BackendError",
    "CleanResult",
    "PipelineError",
    "Progress",
    "QualityError",
    "UnreachableError",
    "aclean",
    "asubmit",
    "clean",
    "submit",
]

"""The pipeline: an address table in; one Parquet file per status, checks and a report out.

This is the pipeline's façade: the CLI, the service, the Airflow provider and the Dagster
integration import from here, never from the modules behind it. The package, layer by layer
(docs/architecture.md draws it; ``.importlinter`` keeps it so)::

    api.py, result.py      clean(), aclean(), submit(), asubmit(), estimate(); CleanResult
    estimates.py, pace.py  what a run would do, verifying nothing: Estimate, the time model
    feedback/              email services' event exports read into the verdict store
    runner.py, chunks.py   a run's stages, resumable (workdir.py); a list split and merged
    cancel.py              cancelling a run's jobs
    writer.py, publish.py  rows joined and written per status; the one publish step
    summary.py, report.py  summary.json and report.html (advice.py, report_advice.py)
    writeback.py           results written back to a database table
    quality/               the output checks (great-expectations, in a warm child process)
    worktables.py          DuckDB over the work folder: distinct addresses, the join
    verdict_memory.py      the verdict store's part of a run
    backends/              what addresses are verified with: local engine, form A, form B
    sources/               what a table is read from (files by format, SQL, DataFrames, URLs)
                           and which of its columns holds the addresses
    outputs.py, storage.py where files go: local folders and object storage
    layout.py              the names of the published files
"""

from typing import TYPE_CHECKING

from listhygiene._lazy import on_first_use
from listhygiene.errors import BackendError, PipelineError, QualityError, UnreachableError

if TYPE_CHECKING:
    from listhygiene.pipeline.api import aclean, asubmit, clean, estimate, submit
    from listhygiene.pipeline.backends import (
        KEY,
        Backend,
        JobRef,
        WaitTimeout,
        make_backend,
        wait_until_done,
    )
    from listhygiene.pipeline.cancel import CancellableRun, RunCancelled, cancel_jobs, recorded_jobs
    from listhygiene.pipeline.chunks import merge_chunks, split_by_domain
    from listhygiene.pipeline.estimates import Estimate
    from listhygiene.pipeline.feedback import FORMATS as FEEDBACK_FORMATS
    from listhygiene.pipeline.feedback import FeedbackResult, add_feedback
    from listhygiene.pipeline.layout import (
        CHANGED,
        REPORT,
        ROW_COLUMN,
        SPLIT_MANIFEST,
        STATUSES,
        SUMMARY,
        status_file,
    )
    from listhygiene.pipeline.outputs import OutputError, OutputFolder
    from listhygiene.pipeline.quality import (
        CHECKS,
        QualityReport,
        QualityWorker,
        check_outputs,
        run_quality_checks,
        start_early,
        warm_up,
    )
    from listhygiene.pipeline.result import CleanResult
    from listhygiene.pipeline.runner import Progress
    from listhygiene.pipeline.sources import Source, SourceError, SourceInfo, open_source
    from listhygiene.pipeline.storage import ENV as STORAGE_OPTIONS_VARIABLE
    from listhygiene.pipeline.storage import parse_option, storage_options
    from listhygiene.pipeline.writeback import WriteBack, write_back

#: Each name from its module on first use (``listhygiene._lazy``): importing the façade costs
#: nothing, so ``import listhygiene``, the CLI's start-up and the quality checks' child load only
#: what they use (tests/test_boundaries.py).
__getattr__, __dir__ = on_first_use(
    __name__,
    {
        **dict.fromkeys(
            ["aclean", "asubmit", "clean", "estimate", "submit"], "listhygiene.pipeline.api"
        ),
        "Estimate": "listhygiene.pipeline.estimates",
        "FEEDBACK_FORMATS": "listhygiene.pipeline.feedback:FORMATS",
        **dict.fromkeys(["FeedbackResult", "add_feedback"], "listhygiene.pipeline.feedback"),
        **dict.fromkeys(
            ["KEY", "Backend", "JobRef", "WaitTimeout", "make_backend", "wait_until_done"],
            "listhygiene.pipeline.backends",
        ),
        **dict.fromkeys(
            ["CancellableRun", "RunCancelled", "cancel_jobs", "recorded_jobs"],
            "listhygiene.pipeline.cancel",
        ),
        **dict.fromkeys(["merge_chunks", "split_by_domain"], "listhygiene.pipeline.chunks"),
        **dict.fromkeys(
            [
                "CHANGED",
                "REPORT",
                "ROW_COLUMN",
                "SPLIT_MANIFEST",
                "STATUSES",
                "SUMMARY",
                "status_file",
            ],
            "listhygiene.pipeline.layout",
        ),
        **dict.fromkeys(["OutputError", "OutputFolder"], "listhygiene.pipeline.outputs"),
        **dict.fromkeys(
            [
                "CHECKS",
                "QualityReport",
                "QualityWorker",
                "check_outputs",
                "run_quality_checks",
                "start_early",
                "warm_up",
            ],
            "listhygiene.pipeline.quality",
        ),
        "CleanResult": "listhygiene.pipeline.result",
        "Progress": "listhygiene.pipeline.runner",
        "STORAGE_OPTIONS_VARIABLE": "listhygiene.pipeline.storage:ENV",
        **dict.fromkeys(["parse_option", "storage_options"], "listhygiene.pipeline.storage"),
        **dict.fromkeys(["WriteBack", "write_back"], "listhygiene.pipeline.writeback"),
        **dict.fromkeys(
            ["Source", "SourceError", "SourceInfo", "open_source"], "listhygiene.pipeline.sources"
        ),
    },
)

__all__ = [
    "CHANGED",
    "CHECKS",
    "FEEDBACK_FORMATS",
    "KEY",
    "REPORT",
    "ROW_COLUMN",
    "SPLIT_MANIFEST",
    "STATUSES",
    "STORAGE_OPTIONS_VARIABLE",
    "SUMMARY",
    "Backend",
    "BackendError",
    "CancellableRun",
    "CleanResult",
    "Estimate",
    "FeedbackResult",
    "JobRef",
    "OutputError",
    "OutputFolder",
    "PipelineError",
    "Progress",
    "QualityError",
    "QualityReport",
    "QualityWorker",
    "RunCancelled",
    "Source",
    "SourceError",
    "SourceInfo",
    "UnreachableError",
    "WaitTimeout",
    "WriteBack",
    "aclean",
    "add_feedback",
    "asubmit",
    "cancel_jobs",
    "check_outputs",
    "clean",
    "estimate",
    "make_backend",
    "merge_chunks",
    "open_source",
    "parse_option",
    "recorded_jobs",
    "run_quality_checks",
    "split_by_domain",
    "start_early",
    "status_file",
    "storage_options",
    "submit",
    "wait_until_done",
    "warm_up",
    "write_back",
]

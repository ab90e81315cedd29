"""The names of what a run publishes, defined once (docs/pipeline.md, "Outputs").

Every writer, reader and check of an output folder takes its file names from here, so that a
run, a chunk merge, the quality checks and :class:`~listhygiene.pipeline.result.CleanResult` can
never disagree on them.
"""

from listhygiene.statuses import Status

__all__ = [
    "CHANGED",
    "REPORT",
    "ROW_COLUMN",
    "SPLIT_MANIFEST",
    "STATUSES",
    "SUMMARY",
    "published_files",
    "status_file",
]

#: The seven statuses, in the order of the product's table: each gets its file, in this order.
STATUSES: tuple[str, ...] = tuple(status.value for status in Status)

#: An output row's 1-based input row number, where a file carries it (chunk outputs, Dagster's
#: status tables) or the checks are given it beside the file.
ROW_COLUMN = "_source_row"

#: The run's summary (PRODUCT.md, "summary.json").
SUMMARY = "summary.json"

#: The run's HTML report.
REPORT = "report.html"

#: The rows whose verdict went bad since the verdict store last saw them (docs/verdicts.md).
CHANGED = "changed.parquet"

#: What ``split_by_domain`` wrote: the chunks, the input's name and row count.
SPLIT_MANIFEST = "split.json"


def status_file(status: str) -> str:
    """The file of one status's rows."""
    return f"{status}.parquet"


def published_files(*, changed: bool) -> list[str]:
    """Every file a finished run publishes, in the order they are moved into place: the summary
    last, so that a folder with a ``summary.json`` is complete."""
    files = [status_file(status) for status in STATUSES]
    if changed:
        files.append(CHANGED)
    return [*files, REPORT, SUMMARY]

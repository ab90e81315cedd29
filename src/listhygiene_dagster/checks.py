"""Asset checks: the pipeline's own great-expectations suite, run again on what a run published.

:func:`quality_report` is the pure pass/fail function: given the verification asset's value
(the output folder, the summary and the contacts asset's row count) it runs
:func:`listhygiene.pipeline.quality.check_outputs` - the very checks ``clean()`` and the Airflow
chunk merge run - over every row of the seven published per-status files, in bounded batches,
and returns its :class:`~listhygiene.pipeline.quality.QualityReport`. The expected row count
comes from the contacts asset, not from the pipeline's own count, so row conservation is checked
end to end: every row of the contacts asset is in exactly one status table.

:func:`build_quality_checks` wraps a function of that shape into one ``multi_asset_check`` with
one Dagster check per suite check, all evaluated by a single GX validation. The checks named in
``blocking`` (row conservation by default) are blocking: when one fails, the per-status assets
downstream of the verification asset are not materialised in that run.
"""

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from listhygiene.pipeline import CHECKS
from listhygiene.pipeline import ROW_COLUMN as ROW_COLUMN

if TYPE_CHECKING:
    import pandas as pd

    from listhygiene.pipeline import QualityReport

__all__ = [
    "QUALITY_CHECKS",
    "ROW_COLUMN",
    "build_quality_checks",
    "output_rows",
    "quality_report",
]

# ROW_COLUMN (``_source_row``), the core's one row-number column: the verification asset adds
# it to the contacts before cleaning them (the row's 1-based number in the contacts asset), and
# it is carried through to every per-status table.

#: The suite's checks and their descriptions, in order (importing them does not import GX).
QUALITY_CHECKS: dict[str, str] = dict(CHECKS)

#: The check whose failure blocks the per-status assets by default: row conservation.
ROW_CONSERVATION = "rows_in_exactly_one_output"


def output_rows(frame: "pd.DataFrame", status: str) -> "pd.DataFrame":
    """The rows of one published status file in the shape the suite reads: ``_row`` (from
    :data:`ROW_COLUMN`), ``_file`` (the file's status), ``status``, ``score``, ``email``.

    Result columns that clashed with an input column are ``result_<name>``, as the pipeline
    writes them. A file without :data:`ROW_COLUMN` gets null row numbers, which the suite fails.
    """
    import pandas as pd

    def column(name: str) -> Any:
        label = f"result_{name}" if f"result_{name}" in frame.columns else name
        return frame[label].to_numpy() if label in frame.columns else None

    rows = pd.DataFrame(
        {
            "_row": (
                pd.array(frame[ROW_COLUMN], dtype="Int64")
                if ROW_COLUMN in frame.columns
                else pd.array([None] * len(frame), dtype="Int64")
            ),
            "_file": pd.Series([status] * len(frame), dtype="object"),
            "status": column("status"),
            "score": column("score"),
        }
    )
    email = column("email")
    if email is not None:
        rows["email"] = email
    return rows


def quality_report(verification: Mapping[str, Any]) -> "QualityReport":
    """Run the pipeline's checks over the published files of ``verification`` (the value of the
    verification asset: ``out``, ``summary``, ``input_rows``). Never raises because a check
    fails; reads every row of the seven Parquet files of the output folder, a batch at a time."""
    from listhygiene.pipeline import STATUSES, OutputFolder, check_outputs

    folder = OutputFolder(str(verification["out"]))
    return check_outputs(
        {status: folder.final(f"{status}.parquet") for status in STATUSES},
        expected_rows=int(verification["input_rows"]),
        summary_rows=dict(verification["summary"]["rows"]["by_status"]),
        filesystem=folder.fs,
    )


def build_quality_checks(
    *,
    asset_key: dg.AssetKey,
    name: str | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    blocking: Collection[str] = (ROW_CONSERVATION,),
    evaluate: Callable[[Mapping[str, Any]], "QualityReport"] = quality_report,
) -> dg.AssetChecksDefinition:
    """One Dagster check per suite check on the verification asset ``asset_key``, evaluated
    together by ``evaluate`` (default :func:`quality_report`); a failure has ERROR severity, and
    the checks in ``blocking`` stop the assets downstream."""
    unknown = set(blocking).difference(QUALITY_CHECKS)
    if unknown:
        raise ValueError(f"unknown check(s) {sorted(unknown)}; known: {sorted(QUALITY_CHECKS)}")
    specs = [
        dg.AssetCheckSpec(
            check,
            asset=asset_key,
            description=description,
            blocking=check in blocking,
            partitions_def=partitions_def,
        )
        for check, description in QUALITY_CHECKS.items()
    ]
    op_name = name or f"{'_'.join(asset_key.path)}_quality_checks"

    @dg.multi_asset_check(
        specs=specs,
        name=op_name,
        description="The pipeline's great-expectations suite on the published status files.",
        ins={"verification": dg.AssetIn(key=asset_key)},
    )
    def quality_checks(context: dg.AssetCheckExecutionContext, verification: dict[str, Any]) -> Any:
        report = evaluate(verification)
        for check in report.checks:
            if not check.passed:
                context.log.error(f"{check.name} failed: {check.details}")
            yield dg.AssetCheckResult(
                check_name=check.name,
                asset_key=asset_key,
                passed=check.passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=check.details,
                metadata={
                    "details": dg.MetadataValue.text(check.details),
                    "expectation suite": dg.MetadataValue.text(
                        "listhygiene.pipeline.quality.check_outputs"
                    ),
                    "validation seconds": dg.MetadataValue.float(round(report.seconds, 3)),
                },
            )

    return quality_checks

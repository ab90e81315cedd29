"""The asset factory: a contact list as Dagster assets, in a few lines.

::

    contacts  ->  verification  ->  valid, invalid, unknown, risky, disposable, catchall, role
    (raw table)   (clean() run,      (one Parquet asset per status)
                   its summary)

``<name>/contacts`` reads the list through the :class:`ContactSourceResource`;
``<name>/verification`` runs :func:`listhygiene.clean` on it into
``<output_dir>/<name>/<partition or "all">`` (resumable there: a failed run picks up where it
stopped) and returns the output folder, the summary and the contacts' row count;
``<name>/<status>`` publishes each status's rows. The great-expectations checks of
:mod:`listhygiene_dagster.checks` sit on the verification asset, and the row-conservation one is
blocking, so the status tables are never published from a run that lost or doubled rows.

A remote backend (form A, form B) is waited on inside the verification asset: the pipeline
polls the job's status with a growing interval, or waits on the webhook event store when the
resource has ``events_path``. The job ids are recorded in the output folder before the wait, so a
run that dies while waiting reads the same jobs when run again instead of paying twice.
"""

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
from listhygiene.pipeline import STATUSES
from listhygiene_dagster.checks import (
    ROW_COLUMN,
    ROW_CONSERVATION,
    build_quality_checks,
    quality_report,
)

if TYPE_CHECKING:
    import pandas as pd

    from listhygiene.pipeline import QualityReport

__all__ = ["STATUSES", "build_email_hygiene_assets", "column_schema", "statuses_table"]

#: Columns shown in a status asset's preview, when present.
_PREVIEW = ("email", "status", "reason", "score")


def build_email_hygiene_assets(
    *,
    name: str,
    output_dir: str,
    source_resource_key: str = "contact_source",
    backend_resource_key: str = "verification_backend",
    verdicts_resource_key: str | None = None,
    write_back_resource_key: str | None = None,
    io_manager_key: str = "listhygiene_parquet_io_manager",
    results_io_manager_key: str = "io_manager",
    partitions_def: dg.PartitionsDefinition | None = None,
    group_name: str | None = None,
    quality: str = "warn",
    accept_unreachable: bool = False,
    checks: bool = True,
    blocking_checks: Collection[str] = (ROW_CONSERVATION,),
    evaluate: Callable[[Mapping[str, Any]], "QualityReport"] = quality_report,
) -> list[dg.AssetsDefinition]:
    """The assets (and asset checks) of one contact list; pass the list to ``Definitions``.

    ``name`` prefixes every asset key and names the group; ``output_dir`` (a folder or an
    fsspec URL) receives each run's output folder, with its ``report.html``.
    ``quality="warn"`` (the default) lets the pipeline publish its folder and leaves the verdict
    to the asset checks; ``"fail"`` makes the verification asset itself fail when the suite fails.
    ``checks=False`` leaves the checks out; ``evaluate`` replaces their pass/fail function.
    When most domains cannot be reached on port 25 (where the run ran, not the list), the
    verification asset fails and publishes nothing, unless ``accept_unreachable``: the default
    of the asset's run config ``accept_unreachable``, so one run can accept what a failed run
    kept without probing again.

    ``verdicts_resource_key`` names a :class:`~listhygiene_dagster.VerdictStoreResource`: the
    verdict store whose fresh verdicts the run reuses (None: ``clean``'s default,
    ``LISTHYGIENE_VERDICTS`` else the user's cache file). The run config ``fresh: true`` verifies
    everything again for one run. The verification's metadata shows reused, verified and
    changed, the rows of ``changed.parquet`` and its path.

    ``write_back_resource_key`` names a :class:`~listhygiene_dagster.WriteBackResource`: a
    warehouse table the result columns are upserted into once the run has published; the
    verification's metadata says how many rows.
    """
    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    if not name or "/" in name:
        raise ValueError(f"name must be a non-empty asset key part, not {name!r}")
    group = group_name or name
    contacts_key = dg.AssetKey([name, "contacts"])
    verification_key = dg.AssetKey([name, "verification"])

    @dg.asset(
        key=contacts_key,
        group_name=group,
        partitions_def=partitions_def,
        io_manager_key=io_manager_key,
        required_resource_keys={source_resource_key},
        kinds={"pandas", "parquet"},
        description=f"The contact list {name!r} as read from its source, one row per record.",
    )
    def contacts(context: dg.AssetExecutionContext) -> dg.Output[Any]:
        source = getattr(context.resources, source_resource_key)
        key = context.partition_key if context.has_partition_key else None
        try:
            frame = source.read(key)
        except ValueError as exc:  # SourceError is a ValueError and names the input
            raise dg.Failure(description=str(exc)) from exc
        return dg.Output(
            frame,
            metadata={
                "dagster/row_count": dg.MetadataValue.int(len(frame)),
                "dagster/column_schema": column_schema(frame),
                "source": dg.MetadataValue.text(source.describe(key)),
                "columns": dg.MetadataValue.md(", ".join(f"`{c}`" for c in frame.columns)),
            },
        )

    @dg.asset(
        key=verification_key,
        group_name=group,
        partitions_def=partitions_def,
        io_manager_key=results_io_manager_key,
        ins={"contacts": dg.AssetIn(key=contacts_key)},
        required_resource_keys={
            source_resource_key,
            backend_resource_key,
            *([verdicts_resource_key] if verdicts_resource_key else []),
            *([write_back_resource_key] if write_back_resource_key else []),
        },
        config_schema={
            "accept_unreachable": dg.Field(
                bool,
                default_value=accept_unreachable,
                description="Publish although most domains could not be reached on port 25.",
            ),
            "fresh": dg.Field(
                bool,
                default_value=False,
                description="Reuse no stored verdict this run: verify everything again.",
            ),
        },
        kinds={"python"},
        description=(
            f"listhygiene.clean() over {name!r}: its output folder, summary and HTML report."
        ),
    )
    def verification(context: dg.AssetExecutionContext, contacts: Any) -> dg.Output[Any]:
        source = getattr(context.resources, source_resource_key)
        backend = getattr(context.resources, backend_resource_key)
        key = context.partition_key if context.has_partition_key else None
        out = output_folder(output_dir, name, key)
        config = context.op_execution_context.op_config
        store = getattr(context.resources, verdicts_resource_key) if verdicts_resource_key else None
        verdicts = store.clean_options(fresh=bool(config["fresh"])) if store is not None else {}
        if store is None and config["fresh"]:
            verdicts = {"fresh": True}
        frame = contacts.copy()
        frame[ROW_COLUMN] = range(1, len(frame) + 1)
        context.log.info(f"verifying {len(frame):,} rows with the {backend.describe()} into {out}")
        result = _clean(
            context,
            frame,
            out,
            source=source,
            backend=backend,
            quality=quality,
            accept_unreachable=bool(config["accept_unreachable"]),
            verdicts=verdicts,
        )
        value = {"out": result.out, "input_rows": len(frame), "summary": result.summary}
        metadata = verification_metadata(value, report=result.report)
        if write_back_resource_key:
            from listhygiene.errors import ListHygieneError

            target = getattr(context.resources, write_back_resource_key)
            try:
                written = target.write(result)
            except ListHygieneError as exc:
                raise dg.Failure(description=str(exc)) from exc
            context.log.info(f"wrote back {written.written:,} rows into {target.describe()}")
            value["write_back"] = written.as_dict()
            metadata["written back"] = dg.MetadataValue.int(written.written)
            metadata["written back to"] = dg.MetadataValue.text(target.describe())
        return dg.Output(value, metadata=metadata)

    outs = {
        status: dg.AssetOut(
            key=dg.AssetKey([name, status]),
            io_manager_key=io_manager_key,
            kinds={"pandas", "parquet"},
            description=f"The rows of {name!r} whose address is {status}.",
        )
        for status in STATUSES
    }

    @dg.multi_asset(
        name=f"{name}_statuses",
        outs=outs,
        group_name=group,
        partitions_def=partitions_def,
        ins={"verification": dg.AssetIn(key=verification_key)},
    )
    def statuses(context: dg.AssetExecutionContext, verification: dict[str, Any]) -> Any:
        from listhygiene.pipeline import CleanResult

        result = CleanResult(verification["out"], dict(verification["summary"]))
        for status in STATUSES:
            frame = result.frame(status)
            yield dg.Output(
                frame,
                output_name=status,
                metadata=status_metadata(status, frame, verification, report=result.report),
            )

    assets: list[dg.AssetsDefinition] = [contacts, verification, statuses]
    if checks:
        assets.append(
            build_quality_checks(
                asset_key=verification_key,
                partitions_def=partitions_def,
                blocking=blocking_checks,
                evaluate=evaluate,
            )
        )
    return assets


def output_folder(output_dir: str, name: str, partition_key: str | None) -> str:
    """``<output_dir>/<name>/<partition key or "all">``, a partition key made a safe name."""
    part = "all" if partition_key is None else _safe(partition_key)
    if "://" in output_dir:
        return f"{output_dir.rstrip('/')}/{name}/{part}"
    return os.path.join(os.path.abspath(output_dir), name, part)


def _safe(key: str) -> str:
    text = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in key)
    return text if text.strip(".") else "_"


def _clean(
    context: dg.AssetExecutionContext,
    frame: "pd.DataFrame",
    out: str,
    *,
    source: Any,
    backend: Any,
    quality: str,
    accept_unreachable: bool,
    verdicts: Mapping[str, Any],
) -> Any:
    """``listhygiene.aclean`` with the library's errors turned into ``dg.Failure``.

    The run goes on a worker thread while the step's own thread waits: a run termination
    (Dagster raises it in that thread) cancels the run at once, which stops the local engine,
    then the remote jobs it recorded are cancelled (form B) or abandoned (form A); the run folder
    stays, so the next materialisation resumes it (docs/dagster.md, "Terminating a run").
    """
    from listhygiene import aclean
    from listhygiene.pipeline import CancellableRun
    from listhygiene_dagster.failures import failing_as_dagster

    running = CancellableRun()
    hint = "; accept_unreachable: true in the asset's config publishes them"
    with failing_as_dagster(out=out, unreachable_hint=hint):
        cleaning = aclean(
            frame,
            out,
            email_column=source.email_column,
            backend=backend.get_backend(),
            check_smtp=backend.check_smtp,
            quality=quality,
            accept_unreachable=accept_unreachable,
            progress=_progress(context),
            **verdicts,
        )
        try:
            return running.run_in_thread(cleaning)
        except BaseException:
            if running.cancelled:  # terminated: what became of the remote jobs
                _stop_remote_jobs(context, out, backend)
            raise


def _stop_remote_jobs(context: dg.AssetExecutionContext, out: str, backend: Any) -> None:
    """Cancel (form B) or abandon (form A) the jobs the terminated run recorded."""
    import asyncio

    from listhygiene.pipeline import cancel_jobs, recorded_jobs

    jobs = recorded_jobs(out)
    if jobs:
        fate = asyncio.run(cancel_jobs(out, jobs, backend.client_settings()))
        context.log.warning(f"run terminated; remote jobs: {fate}; {out} kept for a resume")
    else:
        context.log.warning(f"run terminated; {out} kept for a resume")


def _progress(context: dg.AssetExecutionContext) -> Callable[[str, int, int], None]:
    """Log each phase, and the verification every tenth of the way."""
    last_phase, last_step = "", -1

    def report(phase: str, done: int, total: int) -> None:
        nonlocal last_phase, last_step
        step = (10 * done // total) if total else 0
        if phase != last_phase or step > last_step:
            last_phase, last_step = phase, step
            size = f" {done:,}/{total:,}" if total else ""
            context.log.info(f"{phase}{size}")

    return report


# -- metadata a person reads in the UI --------------------------------------------------------


def statuses_table(counts: Mapping[str, int], *, highlight: str | None = None) -> str:
    """A markdown table of rows per status and their share; ``highlight`` in bold."""
    total = sum(counts.values())
    lines = ["| status | rows | share |", "|---|---:|---:|"]
    for status in STATUSES:
        count = int(counts.get(status, 0))
        share = f"{100 * count / total:.1f} %" if total else "-"
        label = f"**{status}**" if status == highlight else status
        lines.append(f"| {label} | {count:,} | {share} |")
    lines.append(f"| total | {total:,} | |")
    return "\n".join(lines)


def verification_metadata(value: Mapping[str, Any], *, report: str) -> dict[str, Any]:
    summary = value["summary"]
    metadata = _verdict_metadata(value["out"], summary)
    counts = summary["rows"]["by_status"]
    quality = summary["quality"]
    checks = "\n".join(
        f"- {'passed' if c['passed'] else '**failed**'} `{c['name']}`: {c['details']}"
        for c in quality["checks"]
    )
    addresses = summary["addresses"]
    return {
        "dagster/row_count": dg.MetadataValue.int(int(summary["rows"]["total"])),
        "statuses": dg.MetadataValue.md(statuses_table(counts)),
        "report": dg.MetadataValue.path(report),
        "output folder": dg.MetadataValue.path(value["out"]),
        "backend": dg.MetadataValue.text(str(summary["backend"]["name"])),
        "distinct addresses": dg.MetadataValue.int(int(addresses["distinct"])),
        "verified now": dg.MetadataValue.int(int(addresses["verified"])),
        "credits used": dg.MetadataValue.int(int(summary["credits"]["used"])),
        "pipeline quality": dg.MetadataValue.md(
            f"{'passed' if quality['passed'] else '**failed**'} ({quality['mode']})\n\n{checks}"
        ),
        **metadata,
    }


def _verdict_metadata(out: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Reused, verified and changed; with a store, its URL, the rows of ``changed.parquet``, its
    path and the transitions."""
    import pyarrow.parquet as pq

    from listhygiene.pipeline import CHANGED, OutputFolder

    counts = summary.get("verdicts") or {}
    metadata: dict[str, Any] = {
        f"verdicts {name}": dg.MetadataValue.int(int(counts.get(name, 0)))
        for name in ("reused", "verified", "changed")
    }
    store = summary.get("verdict_store")
    if store is None:  # the run had no store
        return metadata
    metadata["verdict store"] = dg.MetadataValue.text(str(store.get("store")))
    folder = OutputFolder(out)
    path = folder.final(CHANGED)
    try:
        rows = pq.ParquetFile(folder.fs.open_input_file(path)).metadata.num_rows
    except (OSError, FileNotFoundError):
        return metadata
    metadata["changed rows"] = dg.MetadataValue.int(int(rows))
    metadata["changed"] = dg.MetadataValue.path(f"{out.rstrip('/')}/{CHANGED}")
    transitions = store.get("transitions") or {}
    if transitions:
        lines = ["| from -> to | addresses |", "|---|---:|"]
        lines += [f"| {pair} | {n:,} |" for pair, n in transitions.items()]
        metadata["transitions"] = dg.MetadataValue.md("\n".join(lines))
    metadata["credits saved"] = dg.MetadataValue.int(int(store.get("credits_saved", 0)))
    return metadata


def status_metadata(
    status: str, frame: "pd.DataFrame", value: Mapping[str, Any], *, report: str
) -> dict[str, Any]:
    counts = value["summary"]["rows"]["by_status"]
    total = int(value["summary"]["rows"]["total"])
    share = f"{100 * len(frame) / total:.1f} %" if total else "-"
    return {
        "dagster/row_count": dg.MetadataValue.int(len(frame)),
        "dagster/column_schema": column_schema(frame),
        "share of the list": dg.MetadataValue.text(share),
        "statuses": dg.MetadataValue.md(statuses_table(counts, highlight=status)),
        "report": dg.MetadataValue.path(report),
        "preview": dg.MetadataValue.md(_preview(frame)),
    }


def column_schema(frame: "pd.DataFrame") -> dg.TableSchema:
    """The frame's columns and their types, as the UI's column schema (a status table: the
    input's own columns, then the result columns of docs/results.md)."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name=str(name), type=str(dtype)) for name, dtype in frame.dtypes.items()
        ]
    )


def _preview(frame: "pd.DataFrame", rows: int = 5) -> str:
    """The first rows of the result columns, as a markdown table."""
    columns: Sequence[str] = [c for c in _PREVIEW if c in frame.columns] or list(frame.columns)[:4]
    if not len(frame):
        return "_no rows_"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for record in frame[list(columns)].head(rows).itertuples(index=False):
        cells = ["" if v is None else str(v).replace("|", "\\|") for v in record]
        lines.append("| " + " | ".join(cells) + " |")
    if len(frame) > rows:
        lines.append(f"\n{len(frame) - rows:,} more rows")
    return "\n".join(lines)

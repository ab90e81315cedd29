"""A large list on several Dagster workers: split by domain, one op per chunk, merged into one
run's folder, the Dagster counterpart of the Airflow mapped-chunks DAG (docs/pipeline.md,
"Chunks").

:func:`build_chunked_clean_job` returns a job of three ops around the core's
:mod:`listhygiene.pipeline.chunks`: ``split`` writes the chunks (every domain in one chunk, so a
mail host sees no more SMTP sessions than one run opens; a giant domain across chunks when the
backend resource's ``shared_limits`` gives the steps one politeness budget) and yields one
dynamic output per chunk; ``verify_chunk`` cleans a chunk with the backend resource (a
multiprocess executor runs them in parallel); ``merge`` writes the folder one run writes and
runs the output checks once. Everything goes under ``<output_dir>/<name>/<run id>/``:
``chunks/``, ``chunk-<n>/``, ``merged/``.
"""

from pathlib import Path
from typing import Any

import dagster as dg

__all__ = ["build_chunked_clean_job"]


def build_chunked_clean_job(
    *,
    name: str,
    source: str,
    output_dir: str,
    chunks: int = 4,
    email_column: str | None = None,
    backend_resource_key: str = "verification_backend",
) -> dg.JobDefinition:
    """A job that cleans ``source`` in ``chunks`` chunks (both can be changed in the split op's
    run config) with the :class:`~listhygiene_dagster.VerificationBackendResource` under
    ``backend_resource_key``; its ``merge`` op returns the merged summary."""

    @dg.op(
        name=f"{name}_split",
        out=dg.DynamicOut(str),
        required_resource_keys={backend_resource_key},
        config_schema={
            "source": dg.Field(str, default_value=source),
            "chunks": dg.Field(int, default_value=chunks),
        },
    )
    def split(context: dg.OpExecutionContext) -> Any:
        from listhygiene.pipeline import split_by_domain

        folder = Path(output_dir) / name / context.run_id / "chunks"
        config = context.op_config
        backend = getattr(context.resources, backend_resource_key)
        # with a shared limit a giant domain is split across chunks (docs/deploy.md)
        shared = backend.engine_settings().shared_limits if backend.kind == "local" else "none"
        paths = split_by_domain(
            config["source"],
            folder,
            chunks=int(config["chunks"]),
            email_column=email_column,
            shared_limits=shared or "none",
        )
        context.log.info(f"{config['source']} split by domain into {len(paths)} chunks")
        for index, path in enumerate(paths):
            yield dg.DynamicOutput(path, mapping_key=f"chunk_{index}")

    @dg.op(name=f"{name}_verify_chunk", required_resource_keys={backend_resource_key})
    def verify_chunk(context: dg.OpExecutionContext, path: str) -> dict[str, Any]:
        import listhygiene

        backend = getattr(context.resources, backend_resource_key)
        key = context.get_mapping_key() or "chunk"
        out = Path(path).parent.parent / key.replace("_", "-")
        result = _failing_as_dagster(
            lambda: listhygiene.clean(
                path,
                out,
                backend=backend.get_backend(),
                check_smtp=backend.check_smtp,
                quality="warn",  # checked once, after the merge
            )
        )
        return dict(result.summary)

    @dg.op(name=f"{name}_merge")
    def merge(context: dg.OpExecutionContext, summaries: list[dict[str, Any]]) -> dict[str, Any]:
        from listhygiene.pipeline import SPLIT_MANIFEST, merge_chunks

        folder = Path(output_dir) / name / context.run_id
        summary = _failing_as_dagster(
            lambda: merge_chunks(
                summaries, folder / "merged", manifest=folder / "chunks" / SPLIT_MANIFEST
            )
        )
        context.add_output_metadata(
            {
                "output folder": dg.MetadataValue.path(str(folder / "merged")),
                "report": dg.MetadataValue.path(str(folder / "merged" / "report.html")),
                "dagster/row_count": dg.MetadataValue.int(int(summary["rows"]["total"])),
                "chunks": dg.MetadataValue.int(len(summaries)),
                "quality passed": dg.MetadataValue.bool(bool(summary["quality"]["passed"])),
            }
        )
        return dict(summary)

    @dg.job(name=name, description=f"Clean a list in chunks split by domain, then merge ({name}).")
    def chunked() -> None:
        merge(split().map(verify_chunk).collect())

    return chunked


def _failing_as_dagster(call: Any) -> Any:
    """Run ``call``; the library's errors become ``dg.Failure`` with what they carry."""
    from listhygiene_dagster.failures import failing_as_dagster

    with failing_as_dagster():
        return call()

"""Large lists on many workers: split a list into chunk files, verify each with a mapped
:class:`EmailVerificationOperator` (``.partial(...).expand(source=...)``), merge the outputs.

A thin layer over :mod:`listhygiene.pipeline.chunks`, which a Dagster job or a plain script uses
too: the split puts every domain in one chunk (so a mail host is probed by one worker only, and
sees no more SMTP sessions than one run would open), balanced by size; the merge writes the
folder one run writes (per-status Parquet in input order, ``summary.json``, ``report.html``) and
runs the output checks once, on the merged files. Each chunk carries the input's row number in
:data:`ROW_COLUMN`, which the merge drops.

No Airflow import here: these are plain functions, wrapped by ``@task`` in a DAG.
"""

import os
from collections.abc import Iterable, Mapping
from typing import Any

from listhygiene.pipeline import ROW_COLUMN, SPLIT_MANIFEST, merge_chunks, split_by_domain

__all__ = ["ROW_COLUMN", "SPLIT_MANIFEST", "merge_outputs", "split_list"]


def split_list(
    source: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    chunks: int,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    shared_limits: str | None = None,
) -> list[str]:
    """Write ``source`` as up to ``chunks`` Parquet files in ``folder``, every domain in one
    file; return their paths (:func:`listhygiene.pipeline.chunks.split_by_domain`).

    ``shared_limits``: the store the chunk tasks share (the connection's ``shared_limits``
    extra, :attr:`ListHygieneHook.shared_limits`); with one a giant domain is split across
    chunks. A chunk that would be empty is not written. Rerunning with the same input writes the
    same files, so a retried split task is harmless.
    """
    return split_by_domain(
        source,
        folder,
        chunks=chunks,
        email_column=email_column,
        table=table,
        query=query,
        shared_limits=shared_limits,
    )


def merge_outputs(
    summaries: Iterable[Mapping[str, Any]],
    out: str | os.PathLike[str],
    *,
    expected_rows: int | None = None,
    quality: str = "fail",
    accept_unreachable: bool = False,
    manifest: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Merge the chunk runs' outputs (the mapped operator's XComs) into ``out`` as one run's
    folder, check it once, and return its summary
    (:func:`listhygiene.pipeline.chunks.merge_chunks`).

    ``expected_rows`` is the input's row count (``split.json``'s ``rows``; with ``manifest``,
    the path of ``split.json``, the input's name and email column go into the summary too).
    With ``quality="fail"`` a failing check raises :class:`listhygiene.errors.QualityError` and
    nothing is published; when most domains of all chunks together could not be reached,
    :class:`listhygiene.errors.UnreachableError`, unless ``accept_unreachable``.
    """
    return merge_chunks(
        summaries,
        out,
        manifest=manifest,
        expected_rows=expected_rows,
        quality=quality,
        accept_unreachable=accept_unreachable,
    )

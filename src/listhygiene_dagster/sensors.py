"""A sensor that starts a run when a new export lands in a folder.

The cursor is the set of files already seen (name -> modification time, as JSON), so each export
starts one run, and an export written again under the same name starts another. A file is taken
once it has not changed for ``settle_seconds``, so that a file still being copied is not read
half-written. With :func:`~listhygiene_dagster.partitions.export_files` partitions, the sensor
adds one partition per new file and requests that partition; without partitions, it requests one
run of the whole list.
"""

import fnmatch
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

__all__ = ["build_export_sensor", "find_exports"]


def find_exports(folder: str, *, pattern: str = "*", settle_seconds: float = 0.0) -> dict[str, int]:
    """``{file name: mtime_ns}`` of the settled files of ``folder`` matching ``pattern`` (hidden
    files excluded); an empty dict when the folder does not exist yet."""
    now = time.time_ns()
    found: dict[str, int] = {}
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_file():
            continue
        if not fnmatch.fnmatch(entry.name, pattern):
            continue
        mtime = entry.stat().st_mtime_ns
        if now - mtime >= settle_seconds * 1e9:
            found[entry.name] = mtime
    return found


def build_export_sensor(
    *,
    name: str,
    folder: str,
    target: Any,
    partitions_def: dg.DynamicPartitionsDefinition | None = None,
    pattern: str = "*",
    settle_seconds: float = 10.0,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor named ``name`` that watches ``folder`` and materialises ``target`` (assets, an
    asset selection or a job) for each new export."""

    @dg.sensor(
        name=name,
        target=target,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Starts a run when a new export matching {pattern!r} lands in {folder}.",
    )
    def export_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        seen: Mapping[str, int] = json.loads(context.cursor) if context.cursor else {}
        current = find_exports(folder, pattern=pattern, settle_seconds=settle_seconds)
        new = {n: m for n, m in sorted(current.items()) if seen.get(n) != m}
        cursor = json.dumps({**seen, **current}, sort_keys=True)
        if not new:
            return dg.SkipReason(f"no new export in {folder}")
        requests: Sequence[Any] = []
        if partitions_def is not None:
            known = set(
                partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
            )
            added = [n for n in new if n not in known]
            if added:
                requests = [partitions_def.build_add_request(added)]
            runs = [
                dg.RunRequest(run_key=f"{n}@{m}", partition_key=n, tags={"listhygiene/export": n})
                for n, m in new.items()
            ]
        else:
            latest = max(new, key=lambda n: new[n])
            runs = [
                dg.RunRequest(
                    run_key=";".join(f"{n}@{m}" for n, m in new.items()),
                    tags={"listhygiene/export": latest},
                )
            ]
        context.log.info(f"new export(s) in {folder}: {', '.join(new)}")
        return dg.SensorResult(
            run_requests=runs, dynamic_partitions_requests=requests, cursor=cursor
        )

    return export_sensor

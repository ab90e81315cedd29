"""The run's working folder: what a killed run needs to resume without repeating paid work.

``<out>/.listhygiene/`` (or a cache folder for remote outputs, mirrored under
``<out>/.listhygiene-work/``: docs/object-storage.md) holds:

- ``manifest.json``: the input's fingerprint and the run's settings, the stage reached, the bad
  records, and every submitted job's :class:`JobRef` (written *before* waiting on the job);
- ``rows/part-NNNNN.parquet``: the input's rows as read, with their row number and cleaned
  address, so the join never re-reads the input (which may be a database or larger than memory);
  for an input that can be read again as it was (a local Parquet file, an in-memory table:
  ``Source.rereadable``), the row number and address alone, and the manifest's ``inputs`` says
  ``"source"``. LZ4, not zstd: the parts live for one run, and zstd's smaller files cost a
  third more time to write; and without dictionaries or string statistics, which cost more
  than half of the write and make every read of the parts slower (most cells of a contact
  list are distinct: docs/pipeline.md, "Speed");
- ``results/part-NNNNNN.parquet``: results as they arrive, each part written atomically; a
  killed run loses at most the results not yet flushed. Each part's metadata says whether any
  of its results has an ``email`` other than the address asked (:data:`OWN_EMAIL`), so that the
  join carries that column only when it must.

A run started again with the same output folder and the same input reuses all of it; a changed
input or changed settings start afresh.

Work state is never among the outputs (docs/pipeline.md, "Resume"): the folder is removed once
the run has published its outputs, and when the input turns out unreadable half-way. A run that
stops any other way (killed, a failed job, a failed quality check, port 25 unreachable) keeps it
for the rerun, including the remote jobs recorded by ``submit()`` for a later ``clean()``.
"""

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.backends import KEY, JobRef

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.pipeline.storage import Mirror

log = logging.getLogger(__name__)

__all__ = ["ADDRESS", "OWN_EMAIL", "ROW", "VERIFIED_AT", "WorkDir"]

#: Staged rows: the input row number (1-based) and the cleaned address (null when empty).
ROW = "_row"
ADDRESS = KEY
#: Result parts: when the result was obtained (seconds since the epoch).
VERIFIED_AT = "_verified_at"
#: A result part's metadata key: ``b"1"`` when some result's ``email`` differs from its address.
OWN_EMAIL = b"listhygiene.own_email"
_VERSION = 1
#: What is never mirrored: DuckDB's spill, files one stage makes and the next drops, and files
#: being written (``.tmp``).
_UNMIRRORED_DIRS = ("spill",)
_UNMIRRORED_FILES = ("manifest.json", "pending.parquet")


class WorkDir:
    """A run's working folder on the local disk, and its mirror in the output's bucket."""

    def __init__(self, path: Path, mirror: "Mirror | None" = None) -> None:
        self.path = path
        self.mirror = mirror
        self.manifest: dict[str, Any] = {}
        self._result_parts = 0

    @classmethod
    def for_output(cls, out: str) -> "WorkDir":
        """``<out>/.listhygiene`` for a local folder; for a URL, a per-output cache folder
        mirrored under ``<out>/.listhygiene-work/`` (docs/object-storage.md)."""
        if "://" not in out or out.startswith("file://"):
            local = Path(out.removeprefix("file://"))
            return cls(local / ".listhygiene")
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        digest = hashlib.sha256(out.encode()).hexdigest()[:16]
        return cls(cache / "listhygiene" / "runs" / digest, _mirror(out))

    def remove(self) -> None:
        """Remove the folder and everything in it, and its mirror (nothing to resume any
        more)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self.mirror is not None:
            self.mirror.remove()
        self.manifest = {}
        self._result_parts = 0

    # -- manifest --------------------------------------------------------------------------------

    def open(self, fingerprint: Mapping[str, Any]) -> bool:
        """Load the manifest; True when it belongs to this input and settings (a resume).

        With a mirror, the mirrored work state is the truth: the local one is resumed only
        when it is as new (the manifest's ``revision`` counts its saves), the mirrored one is
        fetched when it is newer (a run killed elsewhere), and without one the run starts
        afresh (it was published, or started afresh, from another machine)."""
        path = self.path / "manifest.json"
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError):
            previous = None
        if not _belongs(previous, fingerprint):
            previous = None
        if self.mirror is not None:
            remote = self.mirror.manifest()
            if not _belongs(remote, fingerprint):
                previous = None
            elif _revision(remote) > _revision(previous):
                log.info("resuming from the work state in %s", self.mirror.url)
                self.mirror.restore(self.path)
                previous = remote
            else:
                self.mirror.adopt(self.path)
        if previous is not None:
            self.manifest = previous
            self._result_parts = len(list(self._parts("results")))
            return True
        if self.path.exists():
            shutil.rmtree(self.path)
        if self.mirror is not None:
            self.mirror.remove()
        (self.path / "rows").mkdir(parents=True)
        (self.path / "results").mkdir()
        self.manifest = {
            "version": _VERSION,
            "fingerprint": dict(fingerprint),
            "stage": "new",
            "jobs": [],
            "created_at": time.time(),
        }
        self.save()
        return False

    def save(self) -> None:
        """Write the manifest; with a mirror, upload what changed, then the manifest."""
        self.manifest["revision"] = _revision(self.manifest) + 1
        tmp = self.path / "manifest.json.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=1, default=str))
        tmp.replace(self.path / "manifest.json")
        if self.mirror is not None:
            self.mirror.sync(self.path, self._mirrored())

    def _mirrored(self) -> list[str]:
        """The files of the folder the mirror keeps, relative to it."""
        names = []
        for path in sorted(self.path.rglob("*")):
            name = path.relative_to(self.path).as_posix()
            if (
                path.is_file()
                and path.suffix != ".tmp"
                and name not in _UNMIRRORED_FILES
                and not name.startswith("rows-")  # the writer's row numbers, one stage's
                and name.split("/", 1)[0] not in _UNMIRRORED_DIRS
            ):
                names.append(name)
        return names

    @property
    def stage(self) -> str:
        return str(self.manifest.get("stage", "new"))

    def set_stage(self, stage: str, **facts: Any) -> None:
        self.manifest["stage"] = stage
        self.manifest.update(facts)
        self.save()

    # -- jobs ------------------------------------------------------------------------------------

    def add_job(self, job: JobRef) -> None:
        self.manifest["jobs"].append({**job.as_dict(), "done": False})
        self.save()

    def finish_job(self, job: JobRef) -> None:
        for entry in self.manifest["jobs"]:
            if entry["job_id"] == job.job_id:
                entry["done"] = True
        self.save()

    def open_jobs(self) -> list[JobRef]:
        return [JobRef.from_dict(e) for e in self.manifest["jobs"] if not e["done"]]

    # -- staged rows -----------------------------------------------------------------------------

    def clear_rows(self) -> None:
        shutil.rmtree(self.path / "rows", ignore_errors=True)
        (self.path / "rows").mkdir()

    def write_rows(self, index: int, table: "pa.Table") -> None:
        _write_atomic(
            table,
            self.path / "rows" / f"part-{index:05d}.parquet",
            compression="lz4",
            use_dictionary=False,
            write_statistics=[ROW] if ROW in table.column_names else False,
        )

    def rows(self, columns: list[str] | None = None) -> Iterator["pa.Table"]:
        """The staged parts in order (``columns`` of them only, when given)."""
        import pyarrow.parquet as pq

        for part in self._parts("rows"):
            yield pq.read_table(part, columns=columns)

    @property
    def inputs_staged(self) -> bool:
        """Whether the staged parts hold the input's columns (else the source is read again)."""
        return bool(self.manifest.get("inputs", "staged") == "staged")

    # -- results ---------------------------------------------------------------------------------

    def write_results(self, table: "pa.Table") -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        stamped = table.append_column(
            VERIFIED_AT, pa.array(np.full(len(table), time.time(), dtype=np.float64))
        )
        own = "email" not in table.column_names or bool(
            len(table) and pc.any(pc.not_equal(table.column("email"), table.column(KEY))).as_py()
        )
        stamped = stamped.replace_schema_metadata(
            {**(stamped.schema.metadata or {}), OWN_EMAIL: b"1" if own else b"0"}
        )
        self._result_parts += 1
        name = f"results/part-{self._result_parts:06d}.parquet"
        _write_atomic(stamped, self.path / name)
        if self.mirror is not None:  # within a second: a killed run loses little more here
            self.mirror.queue(self.path, name)

    def results(self) -> "pa.Table | None":
        """Every result so far, the latest per address."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        parts = [pq.read_table(p) for p in self._parts("results")]
        if not parts:
            return None
        table = pa.concat_tables(parts, promote_options="default")
        if len(pc.unique(table.column(KEY))) == len(table):
            return table
        # a retried address appears twice: keep its latest result
        order = pc.sort_indices(table, [(KEY, "ascending"), (VERIFIED_AT, "descending")])
        table = table.take(order)
        keys = table.column(KEY).combine_chunks()
        first = pc.not_equal(keys, _shifted(keys))
        return table.filter(pc.fill_null(first, True))

    def _parts(self, kind: str) -> list[Path]:
        return sorted((self.path / kind).glob("part-*.parquet"))


def _mirror(out: str) -> "Mirror | None":
    """The mirror of a remote output's work state; None where fsspec cannot reach the URL
    (a scheme only pyarrow knows): the run then resumes on this machine only."""
    from listhygiene.pipeline.outputs import OutputError
    from listhygiene.pipeline.storage import Mirror, is_filesystem_url

    if not is_filesystem_url(out):
        return None
    try:
        return Mirror(out)
    except OutputError as exc:
        log.warning("the work state stays on this machine: %s", exc)
        return None


def _belongs(manifest: Mapping[str, Any] | None, fingerprint: Mapping[str, Any]) -> bool:
    return bool(
        manifest
        and manifest.get("version") == _VERSION
        and manifest.get("fingerprint") == dict(fingerprint)
    )


def _revision(manifest: Mapping[str, Any] | None) -> int:
    return int((manifest or {}).get("revision", 0))


def _shifted(array: "pa.Array") -> "pa.Array":
    import pyarrow as pa

    return pa.concat_arrays([pa.array([None], array.type), array.slice(0, len(array) - 1)])


def _write_atomic(table: "pa.Table", path: Path, compression: str = "zstd", **options: Any) -> None:
    import pyarrow.parquet as pq

    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, compression=compression, **options)
    tmp.replace(path)

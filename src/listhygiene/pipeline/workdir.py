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

Parts are written in a thread of their own, one at a time, while the caller goes on (pyarrow
encodes without the GIL, so the next batch is parsed or verified meanwhile on the other core:
docs/pipeline.md, "Speed"). Whatever reads the parts waits for the write in flight first
(:meth:`WorkDir.flush`), and every save of the manifest lands after the writes before it: the
manifest never names a job as done, nor a stage as reached, before the parts it stands for are
on disk.

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
import threading
import time
from collections.abc import Callable, Iterator, Mapping
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


class _OrderedWrites:
    """Writes done one after another, each in a thread of its own, while the caller goes on.

    A write that fails skips the writes after it (a manifest never lands without the parts
    before it) and is raised by :meth:`flush`, which runs the callers' follow-ups (``then``)
    in the caller's thread once every write is done.
    """

    def __init__(self) -> None:
        self._last: threading.Thread | None = None
        self._failed: list[BaseException] = []
        self._then: list[Callable[[], None]] = []

    def submit(self, write: Callable[[], None], then: Callable[[], None] | None = None) -> None:
        previous, failed = self._last, self._failed

        def run() -> None:
            if previous is not None:
                previous.join()
            if failed:
                return
            try:
                write()
            except BaseException as exc:  # raised in the caller's thread by flush()
                failed.append(exc)

        # not a daemon: the interpreter finishes the writes before it exits (a run that failed
        # still records what it saved); a killed one leaves a .tmp file, never a half part
        self._last = threading.Thread(target=run, name="listhygiene-stage", daemon=False)
        self._last.start()
        if then is not None:
            self._then.append(then)

    def flush(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last.join()
        then, self._then = self._then, []
        if self._failed:
            failed, self._failed = self._failed, []
            raise failed[0]
        for follow_up in then:
            follow_up()


class WorkDir:
    """A run's working folder on the local disk, and its mirror in the output's bucket."""

    def __init__(self, path: Path, mirror: "Mirror | None" = None) -> None:
        self.path = path
        self.mirror = mirror
        self.manifest: dict[str, Any] = {}
        self._result_parts = 0
        self._writes = _OrderedWrites()

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
        self.settle()
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

    def save(self, *, wait: bool = True) -> None:
        """Write the manifest, after the parts being written (what it says is done is on disk
        first); with a mirror, upload what changed, then the manifest.

        ``wait=False`` (a change that a crash may lose: the rerun does that step again, at no
        cost) writes it in the writers' thread after those parts, and returns at once."""
        self.manifest["revision"] = _revision(self.manifest) + 1
        text = json.dumps(self.manifest, indent=1, default=str)
        if not wait and self.mirror is None:
            self._writes.submit(lambda: self._write_manifest(text))
            return
        self.flush()
        self._write_manifest(text)
        if self.mirror is not None:
            self.mirror.sync(self.path, self._mirrored())

    def _write_manifest(self, text: str) -> None:
        tmp = self.path / "manifest.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.path / "manifest.json")

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

    def add_job(self, job: JobRef, *, wait: bool = True) -> None:
        """Record a submitted job; ``wait=False`` for a job that lives in this process (no
        one would be asked for it again after a crash)."""
        self.manifest["jobs"].append({**job.as_dict(), "done": False})
        self.save(wait=wait)

    def finish_job(self, job: JobRef) -> None:
        """Record that every result of ``job`` is saved: written after its result parts, while
        the run goes on (a crash before that collects the job again, which costs nothing)."""
        for entry in self.manifest["jobs"]:
            if entry["job_id"] == job.job_id:
                entry["done"] = True
        self.save(wait=False)

    def open_jobs(self) -> list[JobRef]:
        return [JobRef.from_dict(e) for e in self.manifest["jobs"] if not e["done"]]

    # -- staged rows -----------------------------------------------------------------------------

    def clear_rows(self) -> None:
        self.flush()
        shutil.rmtree(self.path / "rows", ignore_errors=True)
        (self.path / "rows").mkdir()

    def write_rows(self, index: int, table: "pa.Table") -> None:
        path = self.path / "rows" / f"part-{index:05d}.parquet"
        statistics = [ROW] if ROW in table.column_names else False
        self._write_part(
            lambda: _write_atomic(
                table, path, compression="lz4", use_dictionary=False, write_statistics=statistics
            )
        )

    def rows(self, columns: list[str] | None = None) -> Iterator["pa.Table"]:
        """The staged parts in order (``columns`` of them only, when given)."""
        import pyarrow.parquet as pq

        for part in self._parts("rows"):  # waits for the part being written
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
        mirror = self.mirror
        # queued for upload once written (at the next part, or flush): a killed run loses
        # little more there
        self._write_part(
            lambda: _write_atomic(stamped, self.path / name),
            then=(lambda: mirror.queue(self.path, name)) if mirror is not None else None,
        )

    def flush(self) -> None:
        """Wait for the writes in flight; raise the first error, if one failed."""
        self._writes.flush()

    def settle(self) -> None:
        """Wait for the writes in flight, whatever they gave: when the folder goes, or a run
        ends (a failed run's state is all on disk when it returns; a write that failed is
        logged, and the rerun does its step again)."""
        try:
            self.flush()
        except Exception as exc:
            log.warning("the work folder %s was not brought up to date: %s", self.path, exc)

    def _write_part(
        self, write: Callable[[], None], then: Callable[[], None] | None = None
    ) -> None:
        """``write`` a part in the writers' thread once the writes before it are done; one
        part at most is in flight, so memory holds one part more than the caller's."""
        self.flush()
        self._writes.submit(write, then)

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
        self.flush()
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

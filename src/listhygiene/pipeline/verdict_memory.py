"""A run's use of the verdict store: reuse what is fresh, keep what comes, say what changed.

PRODUCT.md, "Verdict store"; docs/pipeline.md "Verdict store". Before anything is submitted, the
run's addresses without a result are looked up in the store in bulk; the fresh verdicts become
the run's results (credits 0: this run paid nothing for them) and only the rest are verified.
Every result the backend returns is written to the store as it arrives, on a writer thread of
its own while the run verifies the next job (one write in flight; a failed write fails the run
at the next write or at the report), so a killed run loses at most the write in flight. The
stored status of each address verified again is kept in the work folder (``previous/``), so
that the run, resumed or not, lists the rows whose address changed. After the run's last save the
same thread brings the store's column copy up to date (``verdicts/column_copy.py``), while the
run writes its outputs.

Feedback (PRODUCT.md, "Feedback"; docs/feedback.md): every result goes into the work folder
with what the store's events teach (``verdicts/feedback.py``), the store keeping the verdict as
verified; when the store holds events, the outputs gain the evidence columns.
"""

import logging
import os
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from listhygiene.pipeline.layout import CHANGED
from listhygiene.results import EVIDENCE_FIELDS, KEY

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.pipeline.workdir import WorkDir
    from listhygiene.verdicts import Freshness, VerdictStore

__all__ = ["CHANGED", "VERDICTS_VARIABLE", "RunVerdicts", "open_verdicts"]

log = logging.getLogger(__name__)

VERDICTS_VARIABLE = "LISTHYGIENE_VERDICTS"
_PREVIOUS = "previous"
_MANIFEST = "verdicts"
_FEEDBACK = "feedback"
#: Results kept in the store per write (one transaction): a local job's. Each write rewrites
#: the store's index pages its keys fall on, so fewer, bigger writes cost less (a third less
#: CPU than 50,000 at 700,000 verdicts); the store turns 5,000 rows at a time into Python
#: rows, and holds the write's keys and Arrow columns, ~40 MB at this size
#: (docs/pipeline.md, "Verdict store speed").
SAVE_BATCH = 200_000


def open_verdicts(
    verdicts: "str | VerdictStore | Literal[False] | None", max_age: Any, *, fresh: bool
) -> "RunVerdicts | None":
    """The run's verdict memory: ``verdicts`` is a store, a SQLAlchemy URL, ``"none"`` (or
    False) for none, or None for ``LISTHYGIENE_VERDICTS`` else the default store."""
    from listhygiene.verdicts.freshness import Freshness

    freshness = Freshness.of(max_age)  # a bad max age fails before the store is opened
    if verdicts is False:
        return None
    url = verdicts if verdicts is not None else os.environ.get(VERDICTS_VARIABLE)
    if isinstance(url, str) and url.strip().lower() == "none":
        return None  # and the store's module (SQLAlchemy) is not imported
    from listhygiene.verdicts import VerdictStore

    if isinstance(url, VerdictStore):
        return RunVerdicts(url, freshness, fresh=fresh, owned=False)
    return RunVerdicts(VerdictStore(url or None), freshness, fresh=fresh, owned=True)


class RunVerdicts:
    """The verdict store as one run uses it."""

    def __init__(
        self, store: "VerdictStore", freshness: "Freshness", *, fresh: bool, owned: bool
    ) -> None:
        self.store = store
        self.freshness = freshness
        self.fresh = fresh
        self._owned = owned
        self._writer: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        #: The addresses this run looked up (:meth:`prepare`): after its saves, a store without
        #: a column copy gets one if it is about this size.
        self._expected: int | None = None
        from listhygiene.verdicts.feedback import Feedback

        self.feedback = Feedback(store, engaged_max_age=freshness.limit("valid"))

    def close(self) -> None:
        """Wait for the write in flight, then close the store if the run opened it. A write
        that fails here is logged, not raised: the run has already ended (a successful one
        waited in :meth:`report`), and its own error, if any, is the one to see."""
        try:
            self.flush()
        except Exception as exc:  # see the docstring
            log.error("keeping the last verdicts in %s failed: %s", self.store.shown, exc)
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            if self._owned:
                self.store.close()

    def flush(self) -> None:
        """Wait for the write in flight; its error, if it failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def reuse(
        self, work: "WorkDir", batches: Iterable["pa.Array"], *, total: int, check_smtp: bool
    ) -> int:
        """Take the fresh stored verdicts of the addresses of ``batches`` (distinct, non-empty;
        ``total`` of them) as results; how many were taken (the work folder's pending addresses
        say what is left). Each batch's keys are hashed in a child process while the one before
        is looked up (``verdicts/hashing.py``). With ``fresh`` nothing is reused, but the stored
        statuses are still kept for ``changed``."""
        taken = 0
        for addresses, keys in self.store.keyed_batches(batches, total=total):
            taken += self._reuse(work, addresses, keys, check_smtp=check_smtp)
        return taken

    def _reuse(
        self, work: "WorkDir", missing: "pa.Array", keys: bytes | None, *, check_smtp: bool
    ) -> int:
        import pyarrow as pa
        import pyarrow.compute as pc

        from listhygiene.results import arrow_schema

        if not len(missing):
            return 0
        stored = self.store.fetch(missing, keys=keys)
        if self.fresh:
            reusable = pa.array([False] * stored.num_rows, pa.bool_())
        else:
            reusable = self.freshness.reusable(stored, check_smtp=check_smtp, now=time.time())
        reused = stored.filter(reusable)
        counts = work.manifest.setdefault(_MANIFEST, {"reused": 0})
        counts["reused"] = int(counts["reused"]) + reused.num_rows
        saved = pc.sum(reused.column("credits_used")).as_py() or 0
        counts["credits_saved"] = int(counts.get("credits_saved", 0)) + int(saved)
        spent = pc.sum(reused.column("response_time")).as_py() or 0
        counts["seconds_saved"] = float(counts.get("seconds_saved", 0.0)) + spent / 1000
        if reused.num_rows:
            columns = [KEY, *arrow_schema(internal=True).names]
            results = reused.select(columns)
            free = pa.array([0] * reused.num_rows, pa.int64())
            results = results.set_column(
                results.schema.get_field_index("credits_used"), "credits_used", free
            )
            work.write_results(
                self.with_evidence(work, results, checked_at=reused.column("checked_at"))
            )
        previous = stored.filter(pc.invert(reusable)).select([KEY, "status", "checked_at"])
        self._keep_previous(work, previous)
        # the reused results' part is written while the next addresses are looked up; the
        # caller waits for it (``work.flush()``) before asking what is left to verify
        work.save(wait=False)
        return int(reused.num_rows)

    # -- feedback --------------------------------------------------------------------------------

    def with_evidence(
        self, work: "WorkDir", results: "pa.Table", *, checked_at: Any = None
    ) -> "pa.Table":
        """``results`` with what the store's feedback events teach (``checked_at``: when each
        was verified, default now), counted in the work folder's manifest for the summary."""
        applied, taught = self.feedback.apply(results, key=KEY, checked_at=checked_at)
        if self.feedback.active:
            counts = work.manifest.setdefault(_FEEDBACK, {})
            for name, value in taught.as_dict().items():
                counts[name] = int(counts.get(name, 0)) + value
        return applied

    def output_columns(self, extra: tuple[str, ...]) -> tuple[str, ...]:
        """The columns written after form A's: the evidence columns when the store holds
        feedback events, then ``extra``."""
        return (*EVIDENCE_FIELDS, *extra) if self.feedback.active else extra

    def feedback_summary(self, work: "WorkDir") -> dict[str, int] | None:
        """The summary's ``feedback``: the store's events, and what they did to this run's
        addresses (None when the store holds none)."""
        if not self.feedback.active:
            return None
        from listhygiene.verdicts.evidence import EVIDENCE_COUNTS
        from listhygiene.verdicts.feedback import event_counts

        counts = work.manifest.get(_FEEDBACK, {})
        return {
            "events": sum(event_counts(self.store).values()),
            **{name: int(counts.get(name, 0)) for name in EVIDENCE_COUNTS},
        }

    def prepare(self, expected: int) -> None:
        """Before looking ``expected`` addresses up: the store's column copy made or brought up
        to date, when that is cheaper than looking them up without it."""
        self._expected = expected
        self.store.refresh_copy(expected=expected)

    def looked_up(self) -> None:
        """The run's lookups are done: the store's column copy is unmapped, so that its pages
        (up to ~135 MB for a big store) are not held through verifying, writing and the
        checks."""
        self.store.release_copy()

    def refresh_copy(self) -> None:
        """Once the outputs are written: bring the store's column copy up to date, or make it
        for a store about the run's size (its first run), on the writer thread (after the last
        save) while the checks run; :meth:`close` waits for it, and its pages are let go of
        after. A copy that cannot be made is logged, never fatal: the store answers without
        it."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="verdict-store")
        self._writer.submit(self._refresh_copy, self._expected)

    def _refresh_copy(self, expected: int | None) -> None:
        try:
            self.store.refresh_copy(expected=expected)
        except Exception as exc:  # see the docstring
            log.warning("the column copy of %s is not up to date: %s", self.store.shown, exc)
        finally:
            self.store.release_copy()

    def save(self, results: "pa.Table", *, backend: str) -> None:
        """Keep results as they arrive: waits for the write before (and raises its error),
        then hands these to the writer thread and returns, so that the store's write overlaps
        the next job's verification (docs/pipeline.md, "Verdict store speed")."""
        self.flush()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="verdict-store")
        self._pending = self._writer.submit(self._write, results, backend)

    def _write(self, results: "pa.Table", backend: str) -> None:
        for start in range(0, results.num_rows, SAVE_BATCH):
            self.store.save(results.slice(start, SAVE_BATCH), backend=backend)

    def _keep_previous(self, work: "WorkDir", previous: "pa.Table") -> None:
        """One more part of ``previous/``; where a resumed run's parts disagree, the earliest
        stands (:meth:`WorkTables.joined <listhygiene.pipeline.worktables.WorkTables.joined>`)."""
        import pyarrow.parquet as pq

        folder = self.previous_folder(work)
        folder.mkdir(exist_ok=True)
        index = len(list(folder.glob("part-*.parquet"))) + 1
        path = folder / f"part-{index:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(previous, tmp)
        tmp.replace(path)

    @staticmethod
    def previous_folder(work: "WorkDir") -> Path:
        """Where the stored verdicts of the addresses verified again are kept."""
        return Path(work.path) / _PREVIOUS

    def report(self, work: "WorkDir", transitions: Mapping[str, int]) -> dict[str, Any]:
        """The summary's ``verdict_store``: the store, what reuse saved, the transitions
        (``previous->now`` counts of the addresses whose status changed). Waits for the write
        in flight first: a run whose verdicts could not be kept fails before it publishes."""
        self.flush()
        counts = work.manifest.get(_MANIFEST, {})
        return {
            "store": self.store.shown,
            "fresh": self.fresh,
            "max_age_days": {s: round(v / 86400, 3) for s, v in self.freshness.max_age.items()},
            "credits_saved": int(counts.get("credits_saved", 0)),
            "seconds_saved": round(float(counts.get("seconds_saved", 0.0)), 3),
            "transitions": dict(transitions),
        }

    def counts(self, work: "WorkDir", distinct: int, changed: int) -> dict[str, int]:
        """The summary's ``verdicts``: reused + verified = the run's distinct addresses."""
        reused = int(work.manifest.get(_MANIFEST, {}).get("reused", 0))
        return {
            "reused": reused,
            "verified": distinct - reused,
            "changed": changed,
        }

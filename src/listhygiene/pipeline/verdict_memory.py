"""A run's use of the verdict store: reuse what is fresh, keep what comes, say what changed.

PRODUCT.md, "Verdict store"; docs/pipeline.md "Verdict store". Before anything is submitted, the
run's addresses without a result are looked up in the store in bulk; the fresh verdicts become
the run's results (credits 0: this run paid nothing for them) and only the rest are verified.
Every result the backend returns is written to the store as it arrives, so a killed run loses
none. The stored status of each address verified again is kept in the work folder
(``previous.parquet``), so that the run, resumed or not, lists the rows whose address changed.
"""

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.backends import KEY
from listhygiene.statuses import Status

if TYPE_CHECKING:
    import pyarrow as pa

    from listhygiene.pipeline.workdir import WorkDir
    from listhygiene.verdicts import Freshness, VerdictStore

__all__ = ["CHANGED", "VERDICTS_VARIABLE", "RunVerdicts", "open_verdicts"]

VERDICTS_VARIABLE = "LISTHYGIENE_VERDICTS"
#: The output listing the rows whose address changed status since its stored verdict.
CHANGED = "changed.parquet"
_PREVIOUS = "previous.parquet"
_MANIFEST = "verdicts"


def open_verdicts(
    verdicts: "str | VerdictStore | None", max_age: Any, *, fresh: bool
) -> "RunVerdicts | None":
    """The run's verdict memory: ``verdicts`` is a store, a SQLAlchemy URL, ``"none"`` (or
    False) for none, or None for ``LISTHYGIENE_VERDICTS`` else the default store."""
    from listhygiene.verdicts import Freshness, VerdictStore

    freshness = Freshness.of(max_age)  # a bad max age fails before the store is opened
    if verdicts is False:
        return None
    if isinstance(verdicts, VerdictStore):
        return RunVerdicts(verdicts, freshness, fresh=fresh, owned=False)
    url = verdicts if verdicts is not None else os.environ.get(VERDICTS_VARIABLE)
    if url is not None and str(url).strip().lower() == "none":
        return None
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

    def close(self) -> None:
        if self._owned:
            self.store.close()

    def reuse(self, work: "WorkDir", missing: "pa.Array", *, check_smtp: bool) -> "pa.Array":
        """Take the fresh stored verdicts of ``missing`` as results; what is left to verify.
        With ``fresh`` nothing is reused, but the stored statuses are still kept for ``changed``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from listhygiene.results import arrow_schema

        if not len(missing):
            return missing
        stored = self.store.fetch(missing)
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
            work.write_results(results)
        previous = stored.filter(pc.invert(reusable)).select([KEY, "status", "checked_at"])
        self._keep_previous(work, previous)
        work.save()
        if not reused.num_rows:
            return missing
        return pc.filter(missing, pc.invert(pc.is_in(missing, value_set=reused.column(KEY))))

    def save(self, results: "pa.Table", *, backend: str) -> None:
        """Keep results as they arrive (blocking: the caller runs it on a thread)."""
        self.store.save(results, backend=backend)

    def _keep_previous(self, work: "WorkDir", previous: "pa.Table") -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        path = Path(work.path) / _PREVIOUS
        if path.exists():  # a resumed run: what the first attempt found stands
            known = pq.read_table(path)
            new = pc.invert(pc.is_in(previous.column(KEY), value_set=known.column(KEY)))
            previous = pa.concat_tables([known, previous.filter(new)])
        tmp = path.with_suffix(".tmp")
        pq.write_table(previous, tmp)
        tmp.replace(path)

    def changed(self, work: "WorkDir", results: "pa.Table | None") -> "pa.Table | None":
        """``_address``, ``previous_status``, ``previous_checked_at`` of the addresses verified
        again whose status changed (an ``unknown`` now is no change: it says nothing new)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        path = Path(work.path) / _PREVIOUS
        if results is None or not path.exists():
            return None
        previous = pq.read_table(path)
        if not previous.num_rows:
            return None
        keys = results.column(KEY).combine_chunks()
        at = pc.index_in(previous.column(KEY), value_set=keys)
        found = pc.is_valid(at)
        previous, at = previous.filter(found), pc.drop_null(at)
        now = pc.take(results.column("status"), at)
        differs = pc.and_(
            pc.not_equal(now, previous.column("status")),
            pc.not_equal(now, pa.scalar(Status.UNKNOWN.value)),
        )
        changed = previous.filter(differs)
        when = pc.cast(
            pc.round(pc.multiply(changed.column("checked_at"), 1_000_000)).cast(pa.int64()),
            pa.timestamp("us", tz="UTC"),
        )
        return pa.table(
            {
                KEY: changed.column(KEY),
                "previous_status": changed.column("status"),
                "previous_checked_at": when,
                "status": pc.filter(now, differs),
            }
        )

    def report(self, work: "WorkDir", changed: "pa.Table | None") -> dict[str, Any]:
        """The summary's ``verdict_store``: the store, what reuse saved, the transitions."""
        from collections import Counter

        counts = work.manifest.get(_MANIFEST, {})
        transitions: Counter[str] = Counter()
        if changed is not None:
            pairs = zip(
                changed.column("previous_status").to_pylist(),
                changed.column("status").to_pylist(),
                strict=True,
            )
            transitions.update(f"{before}->{after}" for before, after in pairs)
        return {
            "store": self.store.shown,
            "fresh": self.fresh,
            "max_age_days": {s: round(v / 86400, 3) for s, v in self.freshness.max_age.items()},
            "credits_saved": int(counts.get("credits_saved", 0)),
            "seconds_saved": round(float(counts.get("seconds_saved", 0.0)), 3),
            "transitions": dict(transitions.most_common()),
        }

    def counts(self, work: "WorkDir", distinct: int, changed: "pa.Table | None") -> dict[str, int]:
        """The summary's ``verdicts``: reused + verified = the run's distinct addresses."""
        reused = int(work.manifest.get(_MANIFEST, {}).get("reused", 0))
        return {
            "reused": reused,
            "verified": distinct - reused,
            "changed": 0 if changed is None else changed.num_rows,
        }

"""What a run produced: :class:`CleanResult`, its summary and a DataFrame per status."""

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.layout import REPORT, STATUSES, status_file
from listhygiene.pipeline.outputs import OutputFolder

if TYPE_CHECKING:
    import pandas as pd

    from listhygiene.pipeline.writeback import WriteBack

__all__ = ["STATUSES", "CleanResult"]


@dataclasses.dataclass
class CleanResult:
    """What a run produced: the summary, and a DataFrame per status on demand."""

    out: str
    summary: dict[str, Any]
    _frames: dict[str, "pd.DataFrame"] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def files(self) -> dict[str, str]:
        return {s: f"{self.out.rstrip('/')}/{status_file(s)}" for s in STATUSES}

    @property
    def report(self) -> str:
        return f"{self.out.rstrip('/')}/{REPORT}"

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.summary["rows"]["by_status"])

    @property
    def quality(self) -> dict[str, Any]:
        """The data-quality checks: ``passed``, ``mode`` and each check's result."""
        return dict(self.summary["quality"])

    @property
    def passed(self) -> bool:
        return bool(self.summary["quality"]["passed"])

    def frame(self, status: str) -> "pd.DataFrame":
        """The rows of one status as a DataFrame (read on first use)."""
        if status not in STATUSES:
            raise KeyError(f"{status!r} is not a status; one of {', '.join(STATUSES)}")
        if status not in self._frames:
            folder = OutputFolder(self.out)
            import pyarrow.parquet as pq

            table = pq.read_table(folder.final(status_file(status)), filesystem=folder.fs)
            self._frames[status] = table.to_pandas()
        return self._frames[status]

    @property
    def frames(self) -> dict[str, "pd.DataFrame"]:
        return {s: self.frame(s) for s in STATUSES}

    def __getitem__(self, status: str) -> "pd.DataFrame":
        return self.frame(status)

    def write_back(self, url: str, table: str, *, key: str | None = None) -> "WriteBack":
        """Upsert this run's result columns into ``table`` at the SQLAlchemy ``url``, keyed by
        the input column ``key`` or the verified address (pipeline/writeback.py)."""
        from listhygiene.pipeline.writeback import write_back

        return write_back(self.out, url, table, key=key)

    def _repr_html_(self) -> str:
        """In a notebook: the counts with a bar per status (the report's colours), whether the
        checks passed, and where the files and the report are (docs/pipeline.md)."""
        import html
        from pathlib import Path

        from listhygiene.pipeline.report import colour

        counts = self.counts
        widest = max(counts.values(), default=0) or 1
        rows = "".join(
            f'<tr data-status="{s}"><td>{s}</td>'
            f'<td style="text-align:right">{counts.get(s, 0):,}</td>'
            f'<td><div style="background:{colour(s)};height:.8em;'
            f'width:{round(200 * counts.get(s, 0) / widest)}px"></div></td></tr>'
            for s in STATUSES
        )
        checks = "passed" if self.passed else "failed"
        report = html.escape(self.report)
        if "://" not in self.out:
            report = f'<a href="{html.escape(Path(self.report).resolve().as_uri())}">{report}</a>'
        return (
            '<div class="listhygiene-result">'
            f"<p><strong>{self.summary['rows']['total']:,} rows</strong> cleaned; "
            f"quality checks <strong>{checks}</strong></p>"
            f"<table><thead><tr><th>status</th><th>rows</th><th></th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            f"<p>Files in <code>{html.escape(self.out)}</code>; report: {report}</p></div>"
        )

    def __repr__(self) -> str:
        counts = ", ".join(f"{s}={n}" for s, n in self.counts.items() if n)
        return f"<CleanResult {self.out}: {self.summary['rows']['total']} rows ({counts})>"

    # -- a temporary output folder (clean() without one): it lives as long as the result --------

    def own_folder(self) -> None:
        """Remove :attr:`out` when this result is closed or garbage-collected (or at exit):
        the frames are read from its files on demand, so it must outlive nothing but them."""
        self._finalizer = weakref.finalize(self, _remove_tree, self.out)

    def close(self) -> None:
        """Remove a temporary output folder now; frames already read stay usable."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    def __enter__(self) -> "CleanResult":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)

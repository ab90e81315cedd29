"""The last step of a run and of a chunk merge alike: refuse a failing output, or publish it.

One step for both, so that a merged folder is published exactly as a run's is: the report and
``summary.json`` written, then every file moved into place with the summary last
(:func:`~listhygiene.pipeline.layout.published_files`; docs/pipeline.md, "Outputs").
"""

import json
from typing import TYPE_CHECKING, Any

from listhygiene.errors import QualityError
from listhygiene.pipeline.layout import REPORT, SUMMARY, published_files

if TYPE_CHECKING:
    from listhygiene.pipeline.outputs import OutputFolder
    from listhygiene.pipeline.quality import QualityReport

__all__ = ["prepare_report", "publish"]


def prepare_report() -> None:
    """Import the report's renderer and compile its template (~0.1 s): a run calls it while
    its checks run, so that publishing after them is only the writing (docs/pipeline.md,
    "Small lists")."""
    from listhygiene.pipeline.report import prepare

    prepare()


def publish(
    folder: "OutputFolder",
    summary: dict[str, Any],
    report: "QualityReport",
    *,
    quality_mode: str,
    changed: bool,
    checks: str = "data-quality checks",
) -> None:
    """Publish the staged outputs of ``folder`` with ``summary``; with ``quality_mode="fail"``
    a failing check raises :class:`~listhygiene.errors.QualityError` (named by ``checks``) and
    nothing is published. ``changed``: whether the verdict store's changed-rows file is staged."""
    if not report.passed and quality_mode == "fail":
        details = "; ".join(f"{c.name}: {c.details}" for c in report.failed())
        raise QualityError(f"{checks} failed, nothing was published: {details}", summary["quality"])
    from listhygiene.pipeline.report import render_report  # jinja2: only when publishing

    folder.write_text(REPORT, render_report(summary))
    folder.write_text(SUMMARY, json.dumps(summary, indent=2, ensure_ascii=False))
    folder.publish(published_files(changed=changed))

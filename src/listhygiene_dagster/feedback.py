"""The feedback asset (docs/feedback.md): an email service's events loaded into the verdict
store on a schedule, so that the next materialisation of the cleaning assets applies them (a
hard bounce newer than an address's verdict makes it invalid; a click or reply makes an address
of a catch-all domain valid).

A thin layer over :func:`listhygiene.pipeline.add_feedback`: events from files (paths, as
configured or given in the run's config) or from a table (a SQLAlchemy URL with ``table`` or
``query``, generic shape). Each event is kept once, so rematerialising adds nothing twice.
"""

from typing import Any

from pydantic import Field

import dagster as dg
from listhygiene_dagster.failures import failing_as_dagster

__all__ = ["FeedbackConfig", "build_feedback_asset"]


class FeedbackConfig(dg.Config):
    """What a run loads; unset fields take the asset's defaults."""

    files: list[str] | None = Field(default=None, description="Event exports to read.")
    format: str | None = Field(
        default=None, description="auto, sendgrid, mailgun, ses, postmark or generic."
    )


def build_feedback_asset(
    *,
    name: str = "feedback_events",
    files: list[str] | None = None,
    format: str = "auto",
    sql_url: str | None = None,
    table: str | None = None,
    query: str | None = None,
    verdicts_resource_key: str | None = "verdict_store",
    group_name: str | None = None,
) -> dg.AssetsDefinition:
    """The asset ``name``: ``files`` (or the run config's) and the events of ``sql_url``'s
    ``table`` or ``query`` added to the verdict store of ``verdicts_resource_key`` (a
    :class:`~listhygiene_dagster.VerdictStoreResource`; None: ``LISTHYGIENE_VERDICTS``, else
    the default store). Its metadata: events added, already there, bad rows."""
    if not files and sql_url is None:
        raise ValueError("give files or sql_url (with table or query)")

    @dg.asset(
        name=name,
        group_name=group_name,
        required_resource_keys={verdicts_resource_key} if verdicts_resource_key else set(),
        kinds={"listhygiene"},
        description="Bounces, clicks and replies from the email service, in the verdict store.",
    )
    def feedback_asset(
        context: dg.AssetExecutionContext, config: FeedbackConfig
    ) -> dg.MaterializeResult[Any]:
        from listhygiene.pipeline import add_feedback

        store = (
            getattr(context.resources, verdicts_resource_key).url if verdicts_resource_key else None
        )
        paths = config.files if config.files is not None else list(files or [])
        shape = config.format or format
        results: list[Any] = []
        with failing_as_dagster():
            if paths:
                results.append(add_feedback(paths, format=shape, verdicts=store))
            if sql_url is not None:
                results.append(add_feedback([sql_url], verdicts=store, table=table, query=query))
        for result in results:
            for line in result.lines():
                context.log.info("%s", line)
        return dg.MaterializeResult(
            metadata={
                "added": sum(r.added for r in results),
                "duplicates": sum(r.duplicates for r in results),
                "bad_rows": sum(r.bad for r in results),
                "files": dg.MetadataValue.json([f.as_dict() for r in results for f in r.files]),
            }
        )

    return feedback_asset

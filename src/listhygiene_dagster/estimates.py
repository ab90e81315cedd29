"""An op that estimates a contact list's run, verifying nothing: :func:`listhygiene.estimate`
on the same resources as the asset factory's (docs/dagster.md, "Estimating a run").

Its output is ``Estimate.as_dict()`` (rows, distinct addresses, invalid syntax, verdicts the
store would reuse, addresses left to verify, a remote backend's credits and balance, a time
estimate); the same figures go into the output's metadata. Put it in a job of its own, or
before the materialisation, to know what a run will cost before paying.
"""

from typing import TYPE_CHECKING, Any

import dagster as dg
from listhygiene_dagster.failures import failing_as_dagster

if TYPE_CHECKING:
    from listhygiene.pipeline import Estimate

__all__ = ["build_estimate_op"]


def build_estimate_op(
    *,
    name: str = "estimate_contacts",
    source_resource_key: str = "contact_source",
    backend_resource_key: str = "verification_backend",
    verdicts_resource_key: str | None = None,
) -> dg.OpDefinition:
    """The op ``name``: the contact list of ``source_resource_key`` (a
    :class:`~listhygiene_dagster.ContactSourceResource`), verified by the backend of
    ``backend_resource_key`` (its ``check_smtp`` too), with the verdict store of
    ``verdicts_resource_key`` (None: ``clean``'s default). Library errors fail it as
    ``dg.Failure``, as they fail the assets."""

    @dg.op(
        name=name,
        required_resource_keys={
            source_resource_key,
            backend_resource_key,
            *([verdicts_resource_key] if verdicts_resource_key else []),
        },
        out=dg.Out(dict, description="What cleaning the list would do (Estimate.as_dict())."),
        tags={"kind": "listhygiene"},
    )
    def estimate_op(context: dg.OpExecutionContext) -> dg.Output[dict[str, Any]]:
        from listhygiene.pipeline import estimate

        source = getattr(context.resources, source_resource_key)
        backend = getattr(context.resources, backend_resource_key)
        key = context.partition_key if context.has_partition_key else None
        options: dict[str, Any] = {"check_smtp": backend.check_smtp}
        if verdicts_resource_key:
            options.update(getattr(context.resources, verdicts_resource_key).clean_options())
        if backend.kind == "local":  # its settings pace the estimate; no engine is started
            options.update(backend="local", settings=backend.engine_settings())
        with failing_as_dagster():
            if backend.kind != "local":
                options["backend"] = backend.get_backend()
            found = estimate(
                source.location(key),
                table=source.table,
                query=source.query,
                email_column=source.email_column,
                **options,
            )
        context.log.info(
            "%s: %d rows, %d distinct, %d reused, %d left to verify; about %.0f s",
            source.describe(key),
            found.rows,
            found.distinct,
            found.reused,
            found.to_verify,
            found.time.seconds,
        )
        return dg.Output(found.as_dict(), metadata=_metadata(found, backend.describe()))

    return estimate_op


def _metadata(found: "Estimate", backend: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "backend": dg.MetadataValue.text(backend),
        **{
            label: dg.MetadataValue.int(int(getattr(found, field)))
            for label, field in (
                ("rows", "rows"),
                ("distinct addresses", "distinct"),
                ("invalid syntax", "invalid_syntax"),
                ("reused verdicts", "reused"),
                ("left to verify", "to_verify"),
            )
        },
        "estimated seconds": dg.MetadataValue.float(round(found.time.seconds, 1)),
        "estimate": dg.MetadataValue.json(found.as_dict()),
    }
    if found.credits is not None:
        metadata["credits needed"] = dg.MetadataValue.int(found.credits.needed)
        metadata["credits balance"] = dg.MetadataValue.int(found.credits.balance)
    return metadata

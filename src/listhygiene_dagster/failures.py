"""The library's errors as Dagster failures, one mapping for every op and asset of the
integration (docs/dagster.md): what each error carries goes into the failure's metadata, and a
run that could not reach port 25 is not retried (a retry would meet the same network)."""

import contextlib
from collections.abc import Iterator

import dagster as dg

__all__ = ["failing_as_dagster"]


@contextlib.contextmanager
def failing_as_dagster(*, out: str | None = None, unreachable_hint: str = "") -> Iterator[None]:
    """Inside, :class:`~listhygiene.errors.UnreachableError` (with its health),
    :class:`~listhygiene.errors.QualityError` (with the checks), any other
    :class:`~listhygiene.errors.ListHygieneError` and settings that do not validate
    (``ValueError``) become ``dg.Failure``; ``out``, the output folder, goes into the last
    one's metadata, and ``unreachable_hint`` after the unreachable message."""
    from listhygiene.errors import ListHygieneError, QualityError, UnreachableError

    try:
        yield
    except UnreachableError as exc:
        raise dg.Failure(
            description=f"{exc}{unreachable_hint}",
            metadata={"health": dg.MetadataValue.json(dict(exc.health))},
            allow_retries=False,
        ) from exc
    except QualityError as exc:
        raise dg.Failure(
            description=str(exc), metadata={"quality": dg.MetadataValue.json(dict(exc.quality))}
        ) from exc
    except (ListHygieneError, ValueError) as exc:
        metadata = {"output folder": dg.MetadataValue.path(out)} if out else {}
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}", metadata=metadata) from exc

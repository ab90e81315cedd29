"""The pipeline's public entry points: :func:`clean`, :func:`aclean`, :func:`submit`,
:func:`asubmit` (docs/pipeline.md). They check their options and hand the work to
:class:`~listhygiene.pipeline.runner.Run`; :func:`estimate` says what a run would do, verifying
nothing (:mod:`listhygiene.pipeline.estimates`).

Their options are keyword-only and spelt out, each function's own, so that ``help()`` and editors
show them; engine settings come as keyword arguments too (:class:`EngineOptions`). A name that is
neither raises ``TypeError`` naming it and the closest valid name: a misspelt ``check_smpt``
must not run SMTP quietly.
"""

import difflib
import functools
import inspect
import os
from typing import TYPE_CHECKING, Any, Unpack

from listhygiene.engine import EngineOptions, EngineSettings
from listhygiene.pipeline.advice import parse_extra_columns
from listhygiene.pipeline.backends import Backend, JobRef
from listhygiene.pipeline.result import CleanResult, _remove_tree
from listhygiene.pipeline.runner import Progress, Run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from listhygiene.pipeline.estimates import Estimate
    from listhygiene.verdicts import VerdictStore

__all__ = ["aclean", "asubmit", "clean", "estimate", "submit"]


def clean(
    source: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    quality: str = "fail",
    retry_unknown_after: float | None = None,
    accept_unreachable: bool = False,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    progress: "Progress | bool | None" = None,
    extra_columns: "str | Sequence[str] | None" = None,
    **engine_overrides: Unpack[EngineOptions],
) -> CleanResult:
    """Clean an address table; see :func:`aclean` for the options. Blocking, for scripts and
    notebooks (where an event loop may already run: the work then runs on a worker thread)."""
    from listhygiene.engine.sync import _run

    _check_engine_options("clean", engine_overrides)
    return _run(
        aclean(
            source,
            out,
            email_column=email_column,
            table=table,
            query=query,
            encoding=encoding,
            backend=backend,
            check_smtp=check_smtp,
            settings=settings,
            quality=quality,
            retry_unknown_after=retry_unknown_after,
            accept_unreachable=accept_unreachable,
            verdicts=verdicts,
            max_age=max_age,
            fresh=fresh,
            progress=progress,
            extra_columns=extra_columns,
            **engine_overrides,
        )
    )


async def aclean(
    source: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    quality: str = "fail",
    retry_unknown_after: float | None = None,
    accept_unreachable: bool = False,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    progress: "Progress | bool | None" = None,
    extra_columns: "str | Sequence[str] | None" = None,
    **engine_overrides: Unpack[EngineOptions],
) -> CleanResult:
    """Clean ``source`` (a file path, a SQLAlchemy URL with ``table`` or ``query``, a pandas
    DataFrame or an Arrow table) into ``out`` (a folder or filesystem URL; when None, a
    temporary folder that lives as long as the result: see :meth:`CleanResult.close`).

    ``check_smtp`` defaults to the engine settings' (``LISTHYGIENE_CHECK_SMTP``, on by default).
    ``quality="warn"`` publishes the outputs even when a data-quality check fails (the summary
    says so); ``retry_unknown_after`` (seconds) verifies again, after that delay, the addresses
    that ended unknown for a temporary reason (greylisting, rate limits, time-outs).

    When most domains cannot be reached on port 25 (the run's health problem) the run raises
    :class:`UnreachableError` and publishes nothing, unless ``accept_unreachable`` is true.

    ``verdicts``: the verdict store whose fresh verdicts are reused and which keeps every new one
    (a :class:`~listhygiene.verdicts.VerdictStore`, a SQLAlchemy URL, or ``"none"``; by default
    ``LISTHYGIENE_VERDICTS``, else ``verdicts.sqlite`` in the user's cache directory);
    ``max_age`` how old a reused verdict may be (``"30d"``, ``"valid=14d,risky=1d"``, seconds, or
    a mapping of status to seconds); ``fresh`` verifies everything again (and updates the store).

    ``extra_columns`` (``["suggestion", "mx_provider"]`` or ``"+suggestion,+mx_provider"``) adds
    those columns after the result columns; the summary counts both either way
    (docs/results.md, "Extra columns").

    ``progress``: a callback ``(phase, done, total)``, or ``True`` for progress bars (a widget in
    a notebook, a bar on a terminal, log lines elsewhere: :mod:`listhygiene.progress`).

    Any other keyword is an engine setting over ``settings`` (:class:`EngineOptions`:
    ``shared_limits="redis://..."``, ``smtp_timeout=30``, ...); an unknown one is a
    ``TypeError`` naming the closest valid name.
    """
    _check_engine_options("aclean", engine_overrides)
    if quality not in ("fail", "warn"):
        raise ValueError("quality must be 'fail' or 'warn'")
    bars = None
    if progress is True:
        from listhygiene.progress import ProgressBars

        progress = bars = ProgressBars()
    elif progress is False:
        progress = None
    temporary = out is None
    if out is None:  # a folder of the result's own, removed with it (docs/pipeline.md)
        import tempfile

        out = tempfile.mkdtemp(prefix="listhygiene-")
    run = _make_run(
        source,
        out,
        {
            "email_column": email_column,
            "table": table,
            "query": query,
            "encoding": encoding,
            "backend": backend,
            "check_smtp": check_smtp,
            "settings": settings,
            "quality": quality,
            "retry_unknown_after": retry_unknown_after,
            "accept_unreachable": accept_unreachable,
            "verdicts": verdicts,
            "max_age": max_age,
            "fresh": fresh,
            "progress": progress,
            "extra_columns": extra_columns,
            **engine_overrides,
        },
    )
    try:
        result = await run.execute()
    except BaseException:
        if temporary:
            _remove_tree(os.fspath(out))
        raise
    finally:
        if bars is not None:
            bars.close()
    if temporary:
        result.own_folder()
    return result


def submit(
    source: Any,
    out: str | os.PathLike[str],
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    quality: str = "fail",
    retry_unknown_after: float | None = None,
    accept_unreachable: bool = False,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    progress: "Progress | bool | None" = None,
    extra_columns: "str | Sequence[str] | None" = None,
    **engine_overrides: Unpack[EngineOptions],
) -> list[JobRef]:
    """Blocking :func:`asubmit`."""
    from listhygiene.engine.sync import _run

    _check_engine_options("submit", engine_overrides)
    return _run(
        asubmit(
            source,
            out,
            email_column=email_column,
            table=table,
            query=query,
            encoding=encoding,
            backend=backend,
            check_smtp=check_smtp,
            settings=settings,
            quality=quality,
            retry_unknown_after=retry_unknown_after,
            accept_unreachable=accept_unreachable,
            verdicts=verdicts,
            max_age=max_age,
            fresh=fresh,
            progress=progress,
            extra_columns=extra_columns,
            **engine_overrides,
        )
    )


async def asubmit(
    source: Any,
    out: str | os.PathLike[str],
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    quality: str = "fail",
    retry_unknown_after: float | None = None,
    accept_unreachable: bool = False,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    progress: "Progress | bool | None" = None,
    extra_columns: "str | Sequence[str] | None" = None,
    **engine_overrides: Unpack[EngineOptions],
) -> list[JobRef]:
    """Read ``source`` and submit its addresses to a resumable (remote) backend, without waiting:
    the jobs the run waits on, recorded in ``out``'s work folder. :func:`aclean` with the same
    arguments later reads their results instead of submitting again (an orchestrator defers in
    between: Airflow's deferrable operator, a Dagster sensor); it takes :func:`aclean`'s options,
    so that the same ones serve both calls.

    Jobs already recorded and not yet read are returned as they are, and nothing more is
    submitted. A backend whose jobs live in this process (the local engine) submits nothing:
    the list is empty, and :func:`aclean` does all the work.
    """
    _check_engine_options("asubmit", engine_overrides)
    run = _make_run(
        source,
        out,
        {
            "email_column": email_column,
            "table": table,
            "query": query,
            "encoding": encoding,
            "backend": backend,
            "check_smtp": check_smtp,
            "settings": settings,
            "quality": quality,
            "retry_unknown_after": retry_unknown_after,
            "accept_unreachable": accept_unreachable,
            "verdicts": verdicts,
            "max_age": max_age,
            "fresh": fresh,
            "progress": progress if callable(progress) else None,
            "extra_columns": extra_columns,
            **engine_overrides,
        },
    )
    return await run.submit_only()


def estimate(
    source: Any,
    *,
    email_column: str | None = None,
    table: str | None = None,
    query: str | None = None,
    encoding: str | None = None,
    backend: str | Backend = "local",
    check_smtp: bool | None = None,
    settings: EngineSettings | None = None,
    verdicts: "str | VerdictStore | None" = None,
    max_age: "str | float | Mapping[str, float] | None" = None,
    fresh: bool = False,
    **engine_overrides: Unpack[EngineOptions],
) -> "Estimate":
    """What cleaning ``source`` would do, verifying nothing (``listhygiene clean --estimate``;
    docs/pipeline.md, "Estimating a run"): its rows, distinct addresses, those invalid by syntax,
    those the verdict store would reuse, those left to verify, the credits a remote ``backend``
    would ask for and its key's balance, and an estimate of the time from the engine's
    politeness budgets. :func:`clean`'s options, which mean the same here; no output folder.

    Nothing is looked up in DNS nor probed: the one request that leaves the machine is a
    remote backend's balance. Errors are :func:`clean`'s: an unreadable input raises
    :class:`~listhygiene.pipeline.sources.SourceError`, a backend that refuses
    :class:`~listhygiene.BackendError`.
    """
    from listhygiene.engine.sync import _run
    from listhygiene.pipeline.estimates import estimate_input

    _check_engine_options("estimate", engine_overrides)
    return _run(
        estimate_input(
            source,
            email_column=email_column,
            table=table,
            query=query,
            encoding=encoding,
            backend=backend,
            check_smtp=check_smtp,
            settings=settings,
            engine_overrides=dict(engine_overrides),
            verdicts=verdicts,
            max_age=max_age,
            fresh=fresh,
        )
    )


def _check_engine_options(function: str, given: "Mapping[str, Any]") -> None:
    """``TypeError`` for a keyword that is no engine setting, as Python says it for a function's
    own parameters, with the closest valid name."""
    settings = set(EngineSettings.model_fields)
    for name in given:
        if name in settings and name != "check_smtp":
            continue
        own = sorted(_options())
        close = difflib.get_close_matches(name, [*own, *sorted(settings)], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}{hint}")


@functools.cache
def _options() -> frozenset[str]:
    """The options of the entry points (:func:`aclean`'s keyword-only parameters): what is not
    one of them is an engine setting."""
    parameters = inspect.signature(aclean).parameters.values()
    return frozenset(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _make_run(source: Any, out: str | os.PathLike[str], options: dict[str, Any]) -> Run:
    engine_overrides = {k: v for k, v in options.items() if k not in _options()}
    return Run(
        source=source,
        out=_absolute(out),
        email_column=options.get("email_column"),
        table=options.get("table"),
        query=options.get("query"),
        encoding=options.get("encoding"),
        backend=options.get("backend", "local"),
        check_smtp=options.get("check_smtp"),
        settings=options.get("settings"),
        engine_overrides=engine_overrides,
        quality_mode=options.get("quality", "fail"),
        retry_unknown_after=options.get("retry_unknown_after"),
        accept_unreachable=bool(options.get("accept_unreachable", False)),
        verdicts_option=options.get("verdicts"),
        max_age=options.get("max_age"),
        fresh=bool(options.get("fresh", False)),
        progress=options.get("progress") or (lambda phase, done, total: None),
        extra_columns=parse_extra_columns(options.get("extra_columns")),
    )


def _absolute(out: str | os.PathLike[str]) -> str:
    """A local folder as an absolute path (the result stays usable after a chdir); URLs as
    given."""
    text = os.fspath(out)
    return text if "://" in text else os.path.abspath(text)

"""The public surface of ``listhygiene`` (issue 27): what a caller imports and the options the
entry points take are pinned here, so that a change to either is a decision, not an accident;
an unknown option is a ``TypeError`` naming the closest valid name, never silently ignored."""

import inspect
import typing
from pathlib import Path

import pytest

import listhygiene
from listhygiene.engine import EngineOptions, EngineSettings

PUBLIC = [
    "AuthenticationError",
    "BackendError",
    "CleanResult",
    "ConfigurationError",
    "DomainReputation",
    "Engine",
    "EngineOptions",
    "EngineSettings",
    "Estimate",
    "FormBStatus",
    "InputError",
    "InsufficientCreditsError",
    "ListHygieneError",
    "PipelineError",
    "QualityError",
    "RateLimitError",
    "Reason",
    "ServiceError",
    "Status",
    "StorageError",
    "UnreachableError",
    "VerificationResult",
    "__version__",
    "aclean",
    "arrow_schema",
    "asubmit",
    "clean",
    "estimate",
    "submit",
    "verify",
    "verify_many",
]

#: What ``clean()`` and its three siblings take besides ``source`` and ``out``, in order.
OPTIONS = [
    "email_column",
    "table",
    "query",
    "encoding",
    "backend",
    "check_smtp",
    "settings",
    "quality",
    "retry_unknown_after",
    "accept_unreachable",
    "verdicts",
    "max_age",
    "fresh",
    "progress",
    "extra_columns",
]
ENTRY_POINTS = [listhygiene.clean, listhygiene.aclean, listhygiene.submit, listhygiene.asubmit]


def test_the_public_names_are_pinned() -> None:
    assert sorted(listhygiene.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(listhygiene, name) is not None, name


def test_the_errors_a_caller_catches_are_one_tree() -> None:
    for name in PUBLIC:
        thing = getattr(listhygiene, name)
        if isinstance(thing, type) and issubclass(thing, Exception):
            assert issubclass(thing, listhygiene.ListHygieneError), name
    assert issubclass(listhygiene.InputError, ValueError)


@pytest.mark.parametrize("function", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_the_entry_points_spell_out_their_options(function: typing.Any) -> None:
    """Keyword-only, with their defaults, as ``help()`` and editors show them; engine settings
    as typed keyword arguments (``**engine_overrides: Unpack[EngineOptions]``)."""
    parameters = inspect.signature(function).parameters
    names = list(parameters)
    assert names[:2] == ["source", "out"]
    assert names[2:-1] == OPTIONS
    assert all(parameters[n].kind is inspect.Parameter.KEYWORD_ONLY for n in OPTIONS)
    last = parameters[names[-1]]
    assert last.kind is inspect.Parameter.VAR_KEYWORD
    assert typing.get_args(last.annotation) == (EngineOptions,)
    assert parameters["quality"].default == "fail"
    assert parameters["backend"].default == "local"


#: What ``estimate()`` takes besides ``source``: ``clean()``'s options that change what a run
#: reads, verifies and reuses (no output folder, nothing of the run's own).
ESTIMATE_OPTIONS = [
    n
    for n in OPTIONS
    if n
    not in ("quality", "retry_unknown_after", "accept_unreachable", "progress", "extra_columns")
]


def test_estimate_spells_out_clean_s_options_that_apply() -> None:
    parameters = inspect.signature(listhygiene.estimate).parameters
    names = list(parameters)
    assert names[0] == "source"
    assert names[1:-1] == ESTIMATE_OPTIONS
    assert all(parameters[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ESTIMATE_OPTIONS)
    assert typing.get_args(parameters[names[-1]].annotation) == (EngineOptions,)
    clean = inspect.signature(listhygiene.clean).parameters
    assert all(parameters[n].default == clean[n].default for n in ESTIMATE_OPTIONS)


def test_the_engine_options_are_the_engine_settings() -> None:
    """Every engine setting is a keyword of ``clean()`` with its type, but ``check_smtp``, an
    option of its own."""
    hints = typing.get_type_hints(EngineOptions)
    fields = {n: f.annotation for n, f in EngineSettings.model_fields.items() if n != "check_smtp"}
    assert hints == fields


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("check_smpt", "'check_smtp'"),
        ("emial_column", "'email_column'"),
        ("shared_limit", "'shared_limits'"),
        ("smtp_timout", "'smtp_timeout'"),
    ],
)
def test_a_misspelt_option_is_a_type_error_naming_the_closest(
    tmp_path: Path, given: str, hint: str
) -> None:
    source = tmp_path / "contacts.csv"
    source.write_text("email\nann@example.test\n")
    for function in (listhygiene.clean, listhygiene.submit):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{given}'") as raised:
            function(source, tmp_path / "out", **{given: False})
        assert f"did you mean {hint}?" in str(raised.value)
    assert not (tmp_path / "out").exists()  # refused before anything ran


async def test_the_async_entry_points_refuse_a_misspelt_option_too(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="did you mean 'check_smtp'"):
        await listhygiene.aclean(tmp_path / "x.csv", tmp_path / "out", check_smpt=False)
    with pytest.raises(TypeError, match="asubmit\\(\\) got an unexpected keyword argument 'zzz'"):
        await listhygiene.asubmit(tmp_path / "x.csv", tmp_path / "out", zzz=1)


def test_an_engine_setting_is_taken_as_a_keyword(tmp_path: Path) -> None:
    """The documented ``clean(shared_limits=...)`` (PRODUCT.md, "Fleet") and its kind: a bad
    value is the setting's own error, not an unknown keyword."""
    source = tmp_path / "contacts.csv"
    source.write_text("email\nann@example.test\n")
    with pytest.raises(ValueError, match="--shared-limits 'memcached://x'"):
        listhygiene.clean(source, tmp_path / "out", check_smtp=False, shared_limits="memcached://x")


def test_the_pipeline_facade_gives_every_name_it_lists() -> None:
    # The interfaces import the pipeline from its façade only (.importlinter, "facade"); a name
    # listed there and not given would fail them at import, some only on first use.
    import listhygiene.pipeline as pipeline

    missing = [name for name in pipeline.__all__ if not hasattr(pipeline, name)]
    assert missing == []
    assert (
        pipeline.open_source
        is __import__("listhygiene.pipeline.sources", fromlist=["open_source"]).open_source
    )
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        pipeline.nothing_here  # noqa: B018

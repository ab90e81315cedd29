"""The shared error model: every code of both forms, its status, its body, and back again."""

import pytest

from listhygiene import errors
from listhygiene.errors import (
    FORM_A_ERRORS,
    FORM_B_ERRORS,
    AuthenticationError,
    InsufficientCreditsError,
    RateLimitError,
    error_from_response,
)

# spec/form-a.md "Errors" and PRODUCT.md; spec/form-b.md "Errors" and PRODUCT.md (500, 503, 404)
FORM_A = {
    "4000": 400,
    "4010": 401,
    "4020": 402,
    "4030": 403,
    "4040": 404,
    "4130": 413,
    "4290": 429,
    "1000": 500,
}
FORM_B = {
    "INVALID_API_KEY": 401,
    "RATE_LIMIT_EXCEEDED": 429,
    "INSUFFICIENT_CREDITS": 403,
    "INVALID_EMAIL": 400,
    "INVALID_REQUEST": 400,
    "JOB_NOT_FOUND": 404,
    "TIMEOUT": 504,
    "INTERNAL_ERROR": 500,
    "SERVICE_UNAVAILABLE": 503,
    "NOT_FOUND": 404,
}


def test_every_code_of_both_forms_has_its_class_and_status() -> None:
    assert {code: cls.status for code, cls in FORM_A_ERRORS.items()} == FORM_A
    assert {code: cls.status for code, cls in FORM_B_ERRORS.items()} == FORM_B


@pytest.mark.parametrize("code", sorted(FORM_A))
def test_form_a_envelope_round_trip(code: str) -> None:
    error = FORM_A_ERRORS[code]("Short message", details="what exactly went wrong")
    body = error.body()
    assert body == {
        "success": False,
        "code": code,
        "message": error.title,
        "error": {"code": code, "message": "what exactly went wrong"},
    }
    again = error_from_response("a", FORM_A[code], body)
    assert type(again) is type(error)
    assert again.details == "what exactly went wrong"


@pytest.mark.parametrize("code", sorted(FORM_B))
def test_form_b_body_round_trip(code: str) -> None:
    error = FORM_B_ERRORS[code]("Something", details="more")
    assert error.body() == {"error": {"code": code, "message": "Something", "details": "more"}}
    again = error_from_response("b", FORM_B[code], error.body())
    assert type(again) is type(error)
    assert (again.message, again.details) == ("Something", "more")


def test_errors_are_caught_by_meaning_across_forms() -> None:
    assert issubclass(FORM_A_ERRORS["4020"], InsufficientCreditsError)
    assert issubclass(FORM_B_ERRORS["INSUFFICIENT_CREDITS"], InsufficientCreditsError)
    assert issubclass(FORM_A_ERRORS["4010"], AuthenticationError)
    assert issubclass(FORM_B_ERRORS["INVALID_API_KEY"], AuthenticationError)


def test_retry_after_from_the_body_or_the_header() -> None:
    limited = error_from_response(
        "b", 429, {"error": {"code": "RATE_LIMIT_EXCEEDED", "message": "x", "retry_after": 3600}}
    )
    assert isinstance(limited, RateLimitError)
    assert limited.retry_after == 3600
    assert "retry_after" in FORM_B_ERRORS["RATE_LIMIT_EXCEEDED"]("x", retry_after=5).body()["error"]
    from_header = error_from_response(
        "a", 429, FORM_A_ERRORS["4290"]().body(), headers={"Retry-After": "12"}
    )
    assert from_header.retry_after == 12


def test_unknown_codes_still_get_their_meaning() -> None:
    odd = error_from_response("a", 402, {"success": False, "code": "4021", "message": "New"})
    assert isinstance(odd, InsufficientCreditsError)
    assert isinstance(odd, errors.FormAError)
    assert odd.code == "4021"
    garbage = error_from_response("b", 502, "<html>bad gateway</html>")
    assert isinstance(garbage, errors.ServerError)
    assert garbage.status == 502


def test_the_public_surface_lists_every_class() -> None:
    for name in errors.__all__:
        assert hasattr(errors, name), name


# -- the one exception tree (errors.py's docstring, issue 16) -------------------------------------


def test_every_error_of_the_library_derives_from_one_root() -> None:
    from listhygiene.clients import ClientError, ClientTimeoutError
    from listhygiene.pipeline.backends import InsufficientCredits, JobFailed
    from listhygiene.pipeline.outputs import OutputError
    from listhygiene.pipeline.sources import SourceError
    from listhygiene.service.store.jobs import BalanceShort, LostClaim

    for cls in (
        SourceError,
        OutputError,
        BalanceShort,
        LostClaim,
        errors.PipelineError,
        errors.ConfigurationError,
        InsufficientCredits,
        JobFailed,
        ClientError,
        ClientTimeoutError,
        *FORM_A_ERRORS.values(),
        *FORM_B_ERRORS.values(),
    ):
        assert issubclass(cls, errors.ListHygieneError), cls


def test_the_errors_keep_the_builtins_they_derived_from() -> None:
    # Code written against the earlier classes catches what it caught before.
    from listhygiene.clients import ClientTimeoutError
    from listhygiene.pipeline.outputs import OutputError
    from listhygiene.pipeline.run import BackendError, PipelineError, QualityError
    from listhygiene.pipeline.sources import SourceError

    assert issubclass(SourceError, ValueError)
    assert issubclass(OutputError, OSError)
    assert issubclass(PipelineError, RuntimeError)
    assert issubclass(BackendError, PipelineError)
    assert issubclass(QualityError, PipelineError)
    assert issubclass(ClientTimeoutError, TimeoutError)


def test_service_and_client_errors_are_backend_errors() -> None:
    from listhygiene.clients import ClientConnectionError
    from listhygiene.pipeline.backends import InsufficientCredits

    for cls in (
        errors.FormBInsufficientCredits,
        errors.FormAInternalError,
        ClientConnectionError,
        InsufficientCredits,
    ):
        assert issubclass(cls, errors.BackendError), cls
    unknown = error_from_response("b", 418, {"error": {"code": "TEAPOT"}})
    assert isinstance(unknown, errors.BackendError)


def test_the_pipeline_names_are_the_core_classes() -> None:
    from listhygiene.pipeline import run

    assert run.PipelineError is errors.PipelineError
    assert run.BackendError is errors.BackendError
    assert run.QualityError is errors.QualityError
    assert run.UnreachableError is errors.UnreachableError


def test_each_category_has_the_exit_code_of_product_md() -> None:
    # PRODUCT.md "Exit codes": 2 usage, 3 input, 4 backend, 5 quality, 6 unreachable, 1 the rest.
    from listhygiene.clients import ClientConnectionError
    from listhygiene.pipeline.backends import InsufficientCredits, JobFailed
    from listhygiene.pipeline.outputs import OutputError
    from listhygiene.pipeline.sources import SourceError

    cases = [
        (errors.ConfigurationError("no base URL"), 2),
        (SourceError("contacts.csv: no email column"), 3),
        (InsufficientCredits(10, 5, "the key"), 4),
        (JobFailed("job 1 failed"), 4),
        (errors.FormBInvalidApiKey(), 4),
        (ClientConnectionError("refused"), 4),
        (errors.QualityError("a check failed", {}), 5),
        (errors.UnreachableError("port 25 blocked", {}), 6),
        (OutputError("out/ is read-only"), 1),
        (errors.PipelineError("no result for 3 addresses"), 1),
    ]
    assert [errors.exit_code(exc) for exc, _ in cases] == [code for _, code in cases]
    assert errors.exit_code(KeyError("a bug")) is None


@pytest.mark.parametrize(
    ("exc", "form", "expected"),
    [
        (errors.FormBJobNotFound(), "b", errors.FormBJobNotFound),
        (errors.FormBInsufficientCredits(), "a", errors.FormAInsufficientCredits),
        (errors.FormAInsufficientCredits(), "b", errors.FormBInsufficientCredits),
        (errors.FormARateLimited(retry_after=7), "b", errors.FormBRateLimitExceeded),
        (errors.FormBTimeout(), "a", errors.FormAInternalError),
        (errors.InputError("no email column"), "a", errors.FormABadRequest),
        (errors.InputError("no email column"), "b", errors.FormBInvalidRequest),
        (errors.ConfigurationError("bad"), "b", errors.FormBInvalidRequest),
        (errors.PipelineError("secret internals"), "b", errors.FormBInternalError),
        (KeyError("a bug"), "a", errors.FormAInternalError),
    ],
)
def test_http_error_maps_every_error_to_its_forms_answer(
    exc: Exception, form: str, expected: type
) -> None:
    answer = errors.http_error(exc, form)
    assert type(answer) is expected
    assert answer.form == form
    if expected in (errors.FormAInternalError, errors.FormBInternalError):
        assert "internals" not in str(answer.body())


def test_http_error_keeps_the_retry_after_and_the_message() -> None:
    answer = errors.http_error(errors.FormARateLimited(retry_after=7), "b")
    assert answer.body()["error"]["retry_after"] == 7
    from listhygiene.pipeline.backends import InsufficientCredits

    credits = errors.http_error(InsufficientCredits(10, 5, "the key"), "b")
    assert type(credits) is errors.FormBInsufficientCredits
    assert "needs up to 10 credits" in credits.body()["error"]["details"]


def test_one_name_one_error() -> None:
    """No two error classes of the package share a name (the service store's balance error
    was a second ``InsufficientCredits``): a name in a log or a traceback says which it is."""
    import importlib
    import pkgutil

    import listhygiene

    seen: dict[str, str] = {}
    for info in pkgutil.walk_packages(listhygiene.__path__, "listhygiene."):
        if ".sandbox" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, thing in vars(module).items():
            if (
                isinstance(thing, type)
                and issubclass(thing, BaseException)
                and thing.__module__ == info.name
                and not name.startswith("_")
            ):
                assert seen.setdefault(name, info.name) == info.name, (name, seen[name], info.name)


def test_first_line_is_what_an_error_says_on_one_line() -> None:
    class Wrapped(Exception):
        orig = ValueError("duplicate key value\nDETAIL: Key (id)=(1) already exists.")

    assert errors.first_line(ValueError("bad\nsecond line")) == "bad"
    assert errors.first_line(Wrapped("(psycopg.errors.UniqueViolation) ...")) == (
        "duplicate key value"
    )
    assert errors.first_line(KeyError()) == "KeyError"
    assert errors.first_line(RuntimeError("  \n  indented first\n")) == "indented first"


@pytest.mark.parametrize("form", ["a", "b"])
def test_form_error_is_the_forms_class_of_a_meaning(form: str) -> None:
    """The service's answers for the framework's errors come from the one mapping."""
    base = errors.FormAError if form == "a" else errors.FormBError
    for meaning in (errors.BadRequestError, errors.NotFoundError, errors.ServerError):
        answer = errors.form_error(form, meaning, details="x")
        assert isinstance(answer, base)
        assert isinstance(answer, meaning)
    # a meaning the form has no code for (form A has no time-out): its internal error
    fallback = errors.form_error(form, errors.ServiceTimeoutError, details="x")
    assert isinstance(fallback, errors.ServiceTimeoutError if form == "b" else errors.ServerError)

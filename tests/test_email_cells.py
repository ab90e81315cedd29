"""Email cells read as a person would: whitespace, case, mailto:, display names, placeholders."""

import pyarrow as pa
import pytest

from listhygiene.email_cells import PLACEHOLDERS, clean_cells

EXAMPLES = [
    # whitespace of every kind, and case
    ("jane@example.com", "jane@example.com"),
    ("  Jane@Example.COM  ", "jane@example.com"),
    ("\u00a0jane@example.com\u00a0", "jane@example.com"),
    ("\tjane@example.com\t\r\n", "jane@example.com"),
    ("\u200bjane@example.com\u200b", "jane@example.com"),
    ("\ufeffjane@example.com", "jane@example.com"),
    ("\u2003\u202fjane@example.com\u3000", "jane@example.com"),
    # mailto:
    ("mailto:jane@example.com", "jane@example.com"),
    ("MailTo:Jane@Example.com", "jane@example.com"),
    ("mailto: jane@example.com", "jane@example.com"),
    ("mailto:jane@example.com?subject=Hello%20there&body=x", "jane@example.com"),
    ("mailto:jane@example.com?subject=Hi, there", "jane@example.com"),
    # display names
    ("Jane Doe <jane@example.com>", "jane@example.com"),
    ('"Doe, Jane" <Jane@Example.com>', "jane@example.com"),
    ("Doe, Jane <jane@example.com>", "jane@example.com"),
    ("O'Brien, Pat <pat@example.com>", "pat@example.com"),
    ('"jane@example.com" <jane@example.com>', "jane@example.com"),
    ("<jane@example.com>", "jane@example.com"),
    ("< jane@example.com >", "jane@example.com"),
    ("Jane <mailto:jane@example.com>", "jane@example.com"),
    # several addresses: the first one
    ("a@example.com; b@example.com", "a@example.com"),
    ("a@example.com,b@example.com", "a@example.com"),
    ("a@example.com, Bob <b@example.com>", "a@example.com"),
    ("Jane <j@example.com>, Bob <b@example.com>", "j@example.com"),
    ('"Doe, Jane" <j@example.com>; Bob <b@example.com>', "j@example.com"),
    ("; a@example.com", "a@example.com"),
    ("a@example.com;", "a@example.com"),
    ('"a,b"@example.com, c@example.com', '"a,b"@example.com'),
    # quotes around a whole address
    ('"jane@example.com"', "jane@example.com"),
    ("'jane@example.com'", "jane@example.com"),
    ('"john smith"@example.com', '"john smith"@example.com'),
    # empty and placeholders: null
    ("", None),
    ("   ", None),
    ("\u00a0\u200b", None),
    ("N/A", None),
    ("n/a", None),
    ("#N/A", None),
    ("None", None),
    ("NULL", None),
    ("-", None),
    (" -- ", None),
    ("?", None),
    ("unknown", None),
    ("No Email", None),
    ("noemail", None),
    ("TBD", None),
    ("0", None),
    ("...", None),
    ("***", None),
    (None, None),
    # not addresses: left to the engine, trimmed and lower-cased
    ("not an address", "not an address"),
    ("Foo, Bar", "foo, bar"),
    ("jane@", "jane@"),
    ("jane at example dot com", "jane at example dot com"),
    ("j@ne@example.com", "j@ne@example.com"),
]


def test_examples() -> None:
    values = pa.array([given for given, _ in EXAMPLES], pa.string())
    cleaned = clean_cells(values)
    assert isinstance(cleaned, pa.Array)
    assert cleaned.type == pa.string()
    assert len(cleaned) == len(values)
    for (given, expected), got in zip(EXAMPLES, cleaned.to_pylist(), strict=True):
        assert got == expected, given


@pytest.mark.parametrize("placeholder", sorted(PLACEHOLDERS))
def test_every_placeholder_in_any_case_is_null(placeholder: str) -> None:
    cells = pa.array([placeholder, placeholder.upper(), f"  {placeholder.title()} "])
    assert clean_cells(cells).to_pylist() == [None, None, None]


def test_placeholders_are_lower_case() -> None:
    assert all(p == p.lower() and p == p.strip() for p in PLACEHOLDERS)
    assert {"n/a", "na", "none", "null", "nil", "-", "--", "#n/a", "?", "unknown"} <= PLACEHOLDERS
    assert {"no email", "noemail", "tbd", "0"} <= PLACEHOLDERS


def test_nulls_and_positions_are_kept() -> None:
    cells = pa.array([None, " A@X.COM ", None, "n/a", "b@y.com", None])
    assert clean_cells(cells).to_pylist() == [None, "a@x.com", None, None, "b@y.com", None]


def test_chunked_input_gives_one_array() -> None:
    cells = pa.chunked_array([["A@x.com", None], [], ["mailto:b@y.com"]])
    cleaned = clean_cells(cells)
    assert isinstance(cleaned, pa.Array)
    assert cleaned.to_pylist() == ["a@x.com", None, "b@y.com"]


def test_empty_input() -> None:
    assert len(clean_cells(pa.array([], pa.string()))) == 0
    assert len(clean_cells(pa.chunked_array([], pa.string()))) == 0


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (pa.array([1, None, 0], pa.int64()), ["1", None, None]),
        (pa.array([None, None], pa.null()), [None, None]),
        (pa.array(["A@X.com", None], pa.large_string()), ["a@x.com", None]),
        (pa.array(["A@X.com", "A@X.com"]).dictionary_encode(), ["a@x.com", "a@x.com"]),
    ],
)
def test_other_types_are_read_as_text(cells: pa.Array, expected: list[str | None]) -> None:
    assert clean_cells(cells).to_pylist() == expected


def test_a_nested_column_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be read as text"):
        clean_cells(pa.array([{"a": 1}]))


def test_large_column_is_cleaned_whole() -> None:
    cells = pa.array([" X@Y.com "] * 100_000 + [None])
    cleaned = clean_cells(cells)
    assert len(cleaned) == 100_001
    assert cleaned.null_count == 1
    assert cleaned[0].as_py() == "x@y.com"

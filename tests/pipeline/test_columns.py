"""The email column is found by header first, by content where headers say little."""

import pyarrow as pa
import pytest

from listhygiene.pipeline.sources import SourceError
from listhygiene.pipeline.sources.columns import find_email_column


def find(columns: dict[str, list[object]], requested: str | None = None) -> str:
    table = pa.table(columns)
    return find_email_column(table.schema, table, requested, source_name="people.csv")


ADDRESSES = ["ann@example.com", "bob@example.org", "cid@example.net"]
NAMES = ["Ann", "Bob", "Cid"]


def test_requested_exact_name() -> None:
    assert find({"Email": ADDRESSES, "contact": ADDRESSES}, "contact") == "contact"


def test_requested_name_in_another_case() -> None:
    assert find({"Email": ADDRESSES, "Contact": ADDRESSES}, "CONTACT") == "Contact"


def test_requested_name_missing_lists_the_columns() -> None:
    with pytest.raises(SourceError) as caught:
        find({"Email": ADDRESSES, "name": NAMES}, "mail")
    message = str(caught.value)
    assert "people.csv" in message
    assert "'mail'" in message
    assert "Email, name" in message


def test_requested_name_matching_several_in_other_cases() -> None:
    with pytest.raises(SourceError, match="EMAIL, email"):
        find({"EMAIL": ADDRESSES, "email": ADDRESSES}, "Email")


def test_requested_exact_name_wins_over_case_variants() -> None:
    assert find({"EMAIL": ADDRESSES, "email": ADDRESSES}, "email") == "email"


@pytest.mark.parametrize(
    "header",
    [
        "Email",
        "email",
        "E-Mail",
        "e_mail",
        "EMAIL ADDRESS",
        "Email Address",
        "email.address",
        "Email:",
        "Mail",
        "courriel",
        "Correo",
        "E-Mail-Adresse",
        "emailaddr",
    ],
)
def test_plain_headers(header: str) -> None:
    assert find({"name": NAMES, header: ADDRESSES}) == header


@pytest.mark.parametrize(
    "qualified",
    [
        "Personal Email",
        "work_email",
        "Additional email addresses",
        "email 2",
        "Email2",
        "Secondary E-mail",
    ],
)
def test_plain_header_beats_a_qualified_one(qualified: str) -> None:
    assert find({qualified: ADDRESSES, "Email": ADDRESSES}) == "Email"
    assert find({"Email": ADDRESSES, qualified: ADDRESSES}) == "Email"


def test_a_single_qualified_header_is_taken() -> None:
    assert find({"name": NAMES, "Work Email": ADDRESSES}) == "Work Email"


def test_two_qualified_headers_are_ambiguous_and_the_error_says_what_to_do() -> None:
    with pytest.raises(SourceError) as caught:
        find({"work_email": ADDRESSES, "personal_email": ADDRESSES, "name": NAMES})
    message = str(caught.value)
    assert "people.csv" in message
    assert "work_email" in message
    assert "personal_email" in message
    assert "--email-column" in message


def test_a_qualified_header_without_addresses_loses_to_one_with() -> None:
    columns = {"work_email": ADDRESSES, "personal_email": [None, "", "n/a"]}
    assert find(columns) == "work_email"


def test_a_header_candidate_that_is_not_about_addresses_loses() -> None:
    columns = {"email_opt_in": ["yes", "no", "yes"], "contact_email": ADDRESSES}
    assert find(columns) == "contact_email"


def test_a_plain_header_without_addresses_loses_to_a_qualified_one_with() -> None:
    columns = {"Email": [None, None, None], "Personal Email": ADDRESSES}
    assert find(columns) == "Personal Email"


def test_content_decides_between_plain_headers() -> None:
    columns = {"Mail": ["x", "y", "ann@example.com"], "Email": ADDRESSES}
    assert find(columns) == "Email"


def test_plain_headers_with_equal_content_take_the_first() -> None:
    assert find({"Mail": ADDRESSES, "Email": ADDRESSES}) == "Mail"


def test_content_finds_the_column_when_headers_say_nothing() -> None:
    columns = {"name": NAMES, "contact": ADDRESSES, "city": ["Paris", "Lyon", "Nice"]}
    assert find(columns) == "contact"


def test_content_reads_cells_as_a_person_would() -> None:
    columns = {
        "name": NAMES,
        "who": ["Ann <ANN@example.com>", " mailto:bob@example.org", "n/a"],
    }
    assert find(columns) == "who"


def test_content_prefers_the_column_with_most_addresses() -> None:
    columns = {
        "a": ["ann@example.com", "bob", "cid"],
        "b": ["ann@example.com", "bob@example.org", "cid"],
    }
    assert find(columns) == "b"


def test_content_needs_mostly_addresses() -> None:
    columns = {"notes": ["call ann@example.com", "x", "y"], "name": NAMES}
    with pytest.raises(SourceError, match="no email column found"):
        find(columns)


def test_content_tie_without_headers_is_ambiguous() -> None:
    with pytest.raises(SourceError, match=r"\(first, second\).*--email-column"):
        find({"first": ADDRESSES, "second": ADDRESSES})


def test_no_candidate_at_all() -> None:
    with pytest.raises(SourceError) as caught:
        find({"a": NAMES, "b": [1, 2, 3], "c": ["x", "y", "z"]})
    assert str(caught.value) == (
        "no email column found in people.csv (columns: a, b, c); name it with --email-column"
    )


def test_a_header_without_rows_is_found_by_name() -> None:
    schema = pa.schema([("name", pa.string()), ("E-mail", pa.string())])
    assert find_email_column(schema, schema.empty_table()) == "E-mail"


def test_qualified_headers_without_rows_are_ambiguous() -> None:
    schema = pa.schema([("work email", pa.string()), ("home email", pa.string())])
    with pytest.raises(SourceError, match="--email-column"):
        find_email_column(schema, schema.empty_table())


def test_a_plain_header_of_placeholders_only_is_still_the_column() -> None:
    assert find({"name": NAMES, "Email": ["n/a", "", None]}) == "Email"


def test_columns_of_other_types_are_not_a_problem() -> None:
    columns = {
        "id": [1, 2, 3],
        "tags": [["a"], ["b"], []],
        "address": ADDRESSES,
    }
    assert find(columns) == "address"


def test_a_wide_sample_is_read_in_one_pass_not_a_pass_per_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # issue 28: 10,000 columns took 66 s here, a cleaning of each column and a scan of the
    # column names per column; every column's cells now go through one cleaning
    from listhygiene.pipeline.sources import columns

    calls: list[int] = []
    real = columns.clean_cells

    def counted(values: pa.Array | pa.ChunkedArray) -> pa.Array:
        calls.append(len(values))
        return real(values)

    monkeypatch.setattr(columns, "clean_cells", counted)
    names = [f"c{i}" for i in range(3000)]
    data: dict[str, pa.Array] = {n: pa.array([str(i), None, "x"]) for i, n in enumerate(names)}
    data["c1500"] = pa.array(["ann@x.test", "bob@y.test", None])
    data["c2999"] = pa.array(["ann@x.test", "no", "nope"])  # 1 of 3: not mostly addresses
    data["nested"] = pa.array([[1], [2], [3]])
    sample = pa.table(data)
    assert find_email_column(sample.schema, sample) == "c1500"
    assert calls == [3 * 3000]  # the 3,000 text columns' cells, once; the nested one is not text

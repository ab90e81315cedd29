"""Each check's verdict in words, from the GX outcomes and the row ledger.

Every check has its table: for each part of the check (an expectation), the sentence that says
what a failure found, quoting the row numbers and values GX sampled before "and N more". An
expectation that could not run says why; a check without failures says what passed.
"""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.quality.ledger import _RowLedger
from listhygiene.pipeline.quality.results import CHECKS, CheckResult
from listhygiene.pipeline.quality.suite import _Outcome, _unexpected

if TYPE_CHECKING:
    import pandas as pd


def _listing(values: Iterable[str], total: int) -> str:
    shown = list(values)
    more = total - len(shown)
    text = ", ".join(shown)
    return f"{text} and {more:,} more" if more > 0 else text


def _plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def _indexed(outcome: _Outcome) -> list[dict[str, Any]]:
    """The sampled offending rows, each a dict of the index column and the checked columns."""
    items = outcome.result.get("partial_unexpected_index_list") or []
    return [dict(item) for item in items if isinstance(item, Mapping)]


def _row_number(value: Any) -> str:
    try:
        return f"{int(value)}"
    except (TypeError, ValueError):
        return "?"


def _value(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    if isinstance(value, str):
        return repr(str(value))
    return str(value.item() if hasattr(value, "item") else value)


def _verdict(name: str, failures: list[str], passed_details: str) -> CheckResult:
    return CheckResult(
        name=name,
        description=CHECKS[name],
        passed=not failures,
        details="; ".join(failures) if failures else passed_details,
    )


def _failures(outcomes: list[_Outcome], describe: Mapping[str, Any]) -> list[str]:
    """A sentence per failed expectation, in the order of ``describe``."""
    by_part = {outcome.part: outcome for outcome in outcomes}
    failures = []
    for part, sentence in describe.items():
        outcome = by_part.get(part)
        if outcome is None or outcome.success:
            continue
        if outcome.error:
            failures.append(f"{outcome.expectation} could not run: {outcome.error}")
        else:
            failures.append(sentence(outcome))
    return failures


def _rows_check(outcomes: list[_Outcome], ledger: _RowLedger) -> CheckResult:
    """Row conservation: the ledger's exact counts across batches, GX's nulls and ranges."""
    expected, written = ledger.expected, ledger.written
    failures = []
    if written != expected:
        failures.append(f"{expected:,} rows expected, {written:,} written")
    shared = ledger.shared()
    if shared:
        repeats = [f"row {n} written {count} times" for n, count in ledger.sample.items()]
        failures.append(
            f"{_plural(shared, 'row shares', 'rows share')} a row number "
            f"({_listing(repeats, len(repeats))})"
        )

    def not_null(outcome: _Outcome) -> str:
        return f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no row number"

    def out_of_range(outcome: _Outcome) -> str:
        values = [_value(v) for v in outcome.result.get("partial_unexpected_list") or []]
        return (
            f"{_plural(_unexpected(outcome), 'row number is', 'row numbers are')} outside "
            f"1 to {expected:,}: {_listing(values, _unexpected(outcome))}"
        )

    failures += _failures(outcomes, {"not_null": not_null, "range": out_of_range})
    if failures:
        count, absent = ledger.missing()
        if count:
            numbers = [f"{n}" for n in absent]
            failures.append(
                f"row {numbers[0]} is missing"
                if count == 1
                else f"rows {_listing(numbers, count)} are missing"
            )
    return _verdict(
        "rows_in_exactly_one_output",
        failures,
        f"{expected:,} rows expected, {written:,} written, each input row exactly once",
    )


def _status_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no status "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    def in_set(outcome: _Outcome) -> str:
        values = [
            f"{_value(item['value'])} in {_plural(item['count'], 'row', 'rows')}"
            for item in outcome.result.get("partial_unexpected_counts") or []
        ]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} a status outside the "
            f"seven: {_listing(values, len(values))}"
        )

    def own_file(outcome: _Outcome) -> str:
        rows = [
            f"row {_row_number(item.get('_row'))} ({_value(item.get('status'))}) in "
            f"{item.get('_file')}.parquet"
            for item in _indexed(outcome)
        ]
        return (
            f"{_plural(_unexpected(outcome), 'row is', 'rows are')} in the file of another "
            f"status: {_listing(rows, _unexpected(outcome))}"
        )

    failures = _failures(outcomes, {"not_null": not_null, "in_set": in_set, "own_file": own_file})
    return _verdict(
        "status_allowed",
        failures,
        f"all {total:,} rows have one of the seven statuses and are in that status's file",
    )


def _score_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} no score "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    def out_of_range(outcome: _Outcome) -> str:
        rows = [
            f"{_value(item.get('score'))} (row {_row_number(item.get('_row'))})"
            for item in _indexed(outcome)
        ]
        return (
            f"{_plural(_unexpected(outcome), 'score is', 'scores are')} outside 0 to 1: "
            f"{_listing(rows, _unexpected(outcome))}"
        )

    failures = _failures(outcomes, {"not_null": not_null, "range": out_of_range})
    return _verdict("score_in_range", failures, f"all {total:,} scores are between 0 and 1")


def _email_check(outcomes: list[_Outcome], total: int) -> CheckResult:
    def exists(outcome: _Outcome) -> str:
        return "the output has no email column"

    def not_null(outcome: _Outcome) -> str:
        rows = [f"row {_row_number(item.get('_row'))}" for item in _indexed(outcome)]
        return (
            f"{_plural(_unexpected(outcome), 'row has', 'rows have')} a null email "
            f"({_listing(rows, _unexpected(outcome))})"
        )

    failures = _failures(outcomes, {"exists": exists, "not_null": not_null})
    return _verdict("email_present", failures, f"all {total:,} rows have an email (or '')")


def _counts_check(outcomes: list[_Outcome], counts: "pd.DataFrame") -> CheckResult:
    def names(outcome: _Outcome) -> list[str]:
        return [f"{item.get('status')}" for item in _indexed(outcome)]

    def known_file(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"{_listing(files, _unexpected(outcome))} counted, but no status has that name"

    def file_written(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"no row count for {_listing(files, _unexpected(outcome))} (file not written?)"

    def summary_has(outcome: _Outcome) -> str:
        files = [f"{name}.parquet" for name in names(outcome)]
        return f"the summary has no count for {_listing(files, _unexpected(outcome))}"

    def equal(outcome: _Outcome) -> str:
        pairs = [
            f"{item.get('status')}.parquet holds {_count(item.get('file_rows'))}, the summary "
            f"says {_count(item.get('summary_rows'))}"
            for item in _indexed(outcome)
        ]
        return _listing(pairs, _unexpected(outcome))

    failures = _failures(
        outcomes,
        {
            "known_file": known_file,
            "file_written": file_written,
            "summary_has": summary_has,
            "equal": equal,
        },
    )
    written = counts["file_rows"].dropna()
    return _verdict(
        "file_counts_match_summary",
        failures,
        f"{len(written)} files, {int(written.sum()):,} rows in all, each as the summary says",
    )


def _count(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "nothing"

"""The checks as Great Expectations expectations, and their results added up over the batches.

They are GX expectations so that a failure reads like any GX result (unexpected counts and
samples) and a user can rerun the same expectations in their own GX setup. One ephemeral GX
context runs the row expectations on each batch, and the batches' results are added up (counts
summed, the first samples kept); the per-file counts against the summary are one more, tiny, GX
validation.

GX takes seconds to import (docs/pipeline.md, "Speed"), so it is imported only when checks run
(:func:`_import_gx`), never when this module is imported; without the ``quality`` extra
(:func:`gx_missing`) the checks are skipped.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from listhygiene.pipeline.layout import STATUSES
from listhygiene.pipeline.quality.results import SAMPLE

if TYPE_CHECKING:
    import pandas as pd


def gx_missing() -> str | None:
    """Why the checks cannot run here (the ``quality`` extra is not installed), or None."""
    from listhygiene.extras import missing_extra

    if missing_extra("quality") is None:
        return None
    return (
        "great-expectations is not installed, so no data-quality check ran: "
        "pip install 'listhygiene[quality]'"
    )


def _import_gx() -> tuple[Any, Any]:
    # GX logs its housekeeping (temporary docs folders) at INFO; a CLI run should not show it
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    import great_expectations.expectations as gxe

    return gx, gxe


class _Suite:
    """One ephemeral GX context holding the row suite (run once per batch) and the counts
    suite; it writes nothing and draws no progress bars on stderr."""

    def __init__(self, gx: Any, gxe: Any, expected_rows: int) -> None:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.gx, self.gxe, self.expected_rows = gx, gxe, expected_rows
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(
            globally=False, metric_calculations=False
        )
        self.source = self.context.data_sources.add_pandas("listhygiene_output")
        self.definitions: dict[str, Any] = {}

    def rows(self, frame: "pd.DataFrame") -> list["_Outcome"]:
        has_email = "email" in frame.columns
        name = "rows" if has_email else "rows_without_email"
        if name not in self.definitions:
            expectations = _row_expectations(self.gxe, self.expected_rows, has_email=has_email)
            self.definitions[name] = self._define(name, expectations)
        return self._run(name, frame, "_row")

    def counts(self, frame: "pd.DataFrame") -> list["_Outcome"]:
        self.definitions["file_counts"] = self._define("file_counts", _count_expectations(self.gxe))
        return self._run("file_counts", frame, "status")

    def _define(self, name: str, expectations: list[Any]) -> Any:
        gx, context = self.gx, self.context
        batch = self.source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        # Suite and definition must belong to the context, or run() refuses them as "not fresh".
        return context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )

    def _run(self, name: str, frame: "pd.DataFrame", index_column: str) -> list["_Outcome"]:
        result = self.definitions[name].run(
            batch_parameters={"dataframe": frame},
            result_format={
                "result_format": "SUMMARY",
                "partial_unexpected_count": SAMPLE,
                "unexpected_index_column_names": [index_column],
            },
        )
        return [
            _Outcome(
                check=item.expectation_config.meta["check"],
                part=item.expectation_config.meta["part"],
                expectation=_describe_expectation(item.expectation_config),
                success=bool(item.success),
                result=dict(item.result or {}),
                error=_error_message(item.exception_info),
            )
            for item in result.results
        ]


def _row_expectations(gxe: Any, expected_rows: int, *, has_email: bool) -> list[Any]:
    """The expectations each batch is held to; row conservation across batches is the
    :class:`~listhygiene.pipeline.quality.ledger._RowLedger`'s."""

    def tag(check: str, part: str) -> dict[str, str]:
        return {"check": check, "part": part}

    one_output = "rows_in_exactly_one_output"
    status = "status_allowed"
    score = "score_in_range"
    email = "email_present"
    expectations = [
        gxe.ExpectColumnValuesToNotBeNull(column="_row", meta=tag(one_output, "not_null")),
        gxe.ExpectColumnValuesToBeBetween(
            column="_row",
            min_value=1,
            max_value=max(expected_rows, 1),  # GX refuses min > max; the count catches 0
            meta=tag(one_output, "range"),
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="status", meta=tag(status, "not_null")),
        gxe.ExpectColumnValuesToBeInSet(
            column="status", value_set=list(STATUSES), meta=tag(status, "in_set")
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="status", column_B="_file", meta=tag(status, "own_file")
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="score", meta=tag(score, "not_null")),
        gxe.ExpectColumnValuesToBeBetween(
            column="score", min_value=0.0, max_value=1.0, meta=tag(score, "range")
        ),
        gxe.ExpectColumnToExist(column="email", meta=tag(email, "exists")),
    ]
    if has_email:
        expectations.append(
            gxe.ExpectColumnValuesToNotBeNull(column="email", meta=tag(email, "not_null"))
        )
    return expectations


def _count_expectations(gxe: Any) -> list[Any]:
    def tag(part: str) -> dict[str, str]:
        return {"check": "file_counts_match_summary", "part": part}

    return [
        gxe.ExpectColumnValuesToBeInSet(
            column="status", value_set=list(STATUSES), meta=tag("known_file")
        ),
        gxe.ExpectColumnValuesToNotBeNull(column="file_rows", meta=tag("file_written")),
        gxe.ExpectColumnValuesToNotBeNull(column="summary_rows", meta=tag("summary_has")),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="file_rows",
            column_B="summary_rows",
            ignore_row_if="either_value_is_missing",
            meta=tag("equal"),
        ),
    ]


@dataclass(frozen=True)
class _Outcome:
    """One expectation's result, reduced to what the details need."""

    check: str
    part: str
    expectation: str
    success: bool
    result: dict[str, Any]
    error: str | None


def _unexpected(outcome: _Outcome) -> int:
    return int(outcome.result.get("unexpected_count") or 0)


def _combine(total: _Outcome | None, batch: _Outcome) -> _Outcome:
    """One expectation's results over the batches so far: counts added, first samples kept."""
    if total is None:
        return batch
    old, new = total.result, batch.result
    tallies: dict[str, dict[str, Any]] = {}
    for item in (
        *old.get("partial_unexpected_counts", ()),
        *new.get("partial_unexpected_counts", ()),
    ):
        key = repr(item.get("value"))
        if key in tallies:
            tallies[key] = {**tallies[key], "count": tallies[key]["count"] + item["count"]}
        else:
            tallies[key] = dict(item)
    ranked = sorted(tallies.values(), key=lambda item: -item["count"])  # stable: first seen first
    result = {
        **new,
        "unexpected_count": _unexpected(total) + _unexpected(batch),
        "partial_unexpected_list": [
            *old.get("partial_unexpected_list", ()),
            *new.get("partial_unexpected_list", ()),
        ][:SAMPLE],
        "partial_unexpected_index_list": [
            *old.get("partial_unexpected_index_list", ()),
            *new.get("partial_unexpected_index_list", ()),
        ][:SAMPLE],
        "partial_unexpected_counts": ranked[:SAMPLE],
    }
    return _Outcome(
        check=total.check,
        part=total.part,
        expectation=total.expectation,
        success=total.success and batch.success,
        result=result,
        error=total.error or batch.error,
    )


def _describe_expectation(config: Any) -> str:
    """``expect_column_values_to_be_between(score)``: which expectation, on which columns."""
    kwargs = config.kwargs or {}
    columns = [str(kwargs[key]) for key in ("column", "column_A", "column_B") if key in kwargs]
    return f"{config.type}({', '.join(columns)})"


def _error_message(info: Any) -> str | None:
    """GX reports an expectation that could not run either flat or keyed by metric."""
    if not isinstance(info, Mapping):
        return None
    if "raised_exception" in info:
        return str(info.get("exception_message")) if info.get("raised_exception") else None
    for nested in info.values():
        message = _error_message(nested)
        if message:
            return message
    return None

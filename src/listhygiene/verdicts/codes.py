"""The compact form of a verdict in the store, and its translation to and from the pipeline's
Arrow result columns, vectorised.

Statuses, reasons and DNS and mailbox outcomes are small integers, and the five flags one
bitmask: a lookup of a million verdicts then creates a few Python objects per row instead of
twenty (reading, not the database, is what a big lookup costs). The code tables only ever grow
at their end: a code once written keeps its meaning (a test pins them against the enums).
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DNS", "FLAGS", "MAILBOX", "REASONS", "STATUSES", "decode", "encode", "encode_one"]

STATUSES: tuple[str, ...] = (
    "valid",
    "invalid",
    "unknown",
    "risky",
    "disposable",
    "catchall",
    "role",
)
REASONS: tuple[str, ...] = (
    "invalid_syntax",
    "no_mail_server",
    "disposable_domain",
    "mailbox_not_found",
    "mailbox_disabled",
    "dns_error",
    "smtp_unreachable",
    "smtp_timeout",
    "greylisted",
    "rate_limited",
    "blocked",
    "smtputf8_unsupported",
    "catch_all",
    "mailbox_full",
    "role_account",
    "bounced",
)
DNS: tuple[str, ...] = (
    "mx",
    "implicit_mx",
    "null_mx",
    "nxdomain",
    "no_mail_server",
    "error",
    "not_checked",
)
MAILBOX: tuple[str, ...] = (
    "accepted",
    "not_found",
    "disabled",
    "full",
    "undetermined",
    "not_checked",
)
#: Result column -> its bit in ``flags``.
FLAGS: dict[str, int] = {
    "is_deliverable": 1,
    "is_disposable": 2,
    "is_catchall": 4,
    "is_role": 8,
    "is_free": 16,
    "smtp_check": 32,
}
#: Result column -> the code table of its values (the store column has the same name).
CODED: dict[str, tuple[str, ...]] = {
    "status": STATUSES,
    "reason": REASONS,
    "dns": DNS,
    "mailbox": MAILBOX,
    "undetermined_reason": REASONS,
}
#: Result columns kept as they are.
PLAIN = ("score", "response_time", "credits_used")


def encode(results: "pa.Table") -> dict[str, "pa.Array"]:
    """The store's columns (``CODED`` names, ``flags`` and ``PLAIN``) of result rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns: dict[str, pa.Array] = {}
    for name, table in CODED.items():
        columns[name] = pc.index_in(results.column(name), value_set=pa.array(table, pa.string()))
    flags = pa.array([0] * results.num_rows, pa.int64())
    for name, bit in FLAGS.items():
        flags = pc.add(flags, pc.if_else(results.column(name), bit, 0))
    columns["flags"] = flags
    for name in PLAIN:
        columns[name] = results.column(name)
    return columns


def encode_one(name: str, value: str) -> int:
    """The code of one value (for a query: ``status = ...``)."""
    return CODED[name].index(value)


def decode(
    columns: Mapping[str, "pa.Array | Sequence[object]"], schema: "pa.Schema"
) -> dict[str, "pa.Array"]:
    """Result columns (typed as ``schema`` says) from the store's columns as fetched (Arrow
    arrays or Python lists)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, pa.Array] = {}
    for name, table in CODED.items():
        codes = pa.array(columns[name], pa.int64())
        out[name] = pc.take(pa.array(table, pa.string()), codes)
    flags = pa.array(columns["flags"], pa.int64())
    for name, bit in FLAGS.items():
        out[name] = pc.not_equal(pc.bit_wise_and(flags, bit), 0)
    for name in PLAIN:
        out[name] = pa.array(columns[name], schema.field(name).type)
    return out

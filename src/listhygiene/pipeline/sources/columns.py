"""Which column holds the addresses: by its header first, by its content where headers say little.

PRODUCT.md ("Pipeline rows"): a header that names the address plainly (``Email``, ``E-Mail``,
``Email Address``, ``courriel``) wins over a qualified one (``Personal Email``, ``work_email``,
``Additional email addresses``, ``email 2``); content decides among columns of the same rank and
finds the column of a table whose headers say nothing; and when only ambiguous candidates remain
(``work_email`` and ``personal_email``), the user names the column and the error says so.

Headers are compared after lower-casing and removing everything but letters and digits, so
``E-Mail``, ``e_mail``, ``EMAIL ADDRESS`` and ``Email:`` are all plain. Content is the share of a
column's non-empty sample cells that look like an address once read by
:func:`~listhygiene.email_cells.clean_cells`.

The decision, in order:

1. ``requested``: the exact name, else the one name equal to it ignoring case, else an error
   listing the columns;
2. plain header candidates with at least one address in the sample: the one with the most
   address-like content (the first on a tie);
3. qualified candidates with an address in the sample: the single one, or an error naming them
   all when there are several;
4. any column whose non-empty cells are mostly (at least half) addresses, the best of them; an
   error when two tie;
5. with no address in the sample at all (an empty table, a column of placeholders): the first
   plain candidate, else the single qualified one, else an error.

Only a column whose cells can be read as text can hold addresses: a nested column (a list,
struct or map, from Parquet, a DataFrame or an Arrow table) is never chosen, and naming one, or
a table without any other, is a :class:`SourceError` saying so.
"""

import re

import pyarrow as pa
import pyarrow.compute as pc

from listhygiene.email_cells import as_text, clean_cells
from listhygiene.pipeline.sources.base import SourceError

__all__ = ["find_email_column"]

#: Headers that name the address plainly (letters and digits only, lower-case).
PLAIN_HEADERS: frozenset[str] = frozenset(
    {
        "adresseemail",
        "adressemail",
        "adressecourriel",
        "correo",
        "correoelectronico",
        "courriel",
        "email",
        "emailaddr",
        "emailaddress",
        "emailaddresses",
        "emailadres",
        "emailadress",
        "emailadresse",
        "emailid",
        "emails",
        "epost",
        "epostadresse",
        "eposta",
        "mail",
        "mailaddress",
        "mailadresse",
    }
)
#: A header containing one of these, and not plain, is a qualified candidate.
_HINTS = ("mail", "courriel", "correo", "epost")
#: What an address looks like after cleaning, for judging content.
_ADDRESS = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
#: A column is "mostly addresses" from this share of its non-empty cells.
_MOSTLY = 0.5
#: Columns listed in an error message, at most.
_LISTED = 30

_PLAIN, _QUALIFIED, _OTHER = 0, 1, 2


def find_email_column(
    schema: pa.Schema,
    sample: pa.Table,
    requested: str | None = None,
    *,
    source_name: str = "the input",
) -> str:
    """The name of the column holding the addresses; :class:`SourceError` when it is unclear."""
    names: list[str] = [str(n) for n in schema.names]
    if requested is not None:
        return _textual(schema, _requested(names, requested, source_name), source_name)
    nested = [n for n in names if not _readable(schema.field(n).type)]
    if nested and len(nested) == len(names):
        _explain_nested(schema, nested, source_name)
        raise SourceError(
            f"{source_name} has no column of text that could hold addresses (columns: "
            f"{_listing([f'{n} {schema.field(n).type}' for n in nested])}); nested values "
            "(lists, structs, maps) are not read as addresses"
        )
    names = [n for n in names if n not in nested]
    ranks = {name: header_rank(name) for name in names}
    shares = _address_shares(sample, names)
    plain = [n for n in names if ranks[n] == _PLAIN]
    qualified = [n for n in names if ranks[n] == _QUALIFIED]

    with_addresses = [n for n in plain if shares[n][0] > 0]
    if with_addresses:
        return max(with_addresses, key=lambda n: shares[n][1])  # max keeps the first on a tie
    with_addresses = [n for n in qualified if shares[n][0] > 0]
    if len(with_addresses) == 1:
        return with_addresses[0]
    if with_addresses:
        raise _ambiguous(with_addresses, source_name)

    mostly = [n for n in names if shares[n][0] > 0 and shares[n][1] >= _MOSTLY]
    if mostly:
        best = max(shares[n][1] for n in mostly)
        tied = [n for n in mostly if shares[n][1] == best]
        if len(tied) > 1:
            raise _ambiguous(tied, source_name)
        return tied[0]

    if plain:
        return plain[0]
    if len(qualified) == 1:
        return qualified[0]
    if qualified:
        raise _ambiguous(qualified, source_name)
    _explain_nested(schema, nested, source_name)
    raise SourceError(
        f"no email column found in {source_name} (columns: {_listing(names)}); "
        "name it with --email-column"
    )


def header_rank(name: str) -> int:
    """0 for a plain address header, 1 for a qualified one, 2 for any other header."""
    key = re.sub(r"[\W_]+", "", name.lower())
    if key in PLAIN_HEADERS:
        return _PLAIN
    if any(hint in key for hint in _HINTS):
        return _QUALIFIED
    return _OTHER


def _requested(names: list[str], requested: str, source_name: str) -> str:
    if requested in names:
        return requested
    folded = [n for n in names if n.casefold() == requested.casefold()]
    if len(folded) == 1:
        return folded[0]
    if folded:
        raise SourceError(
            f"{source_name} has several columns named {requested!r} in different case "
            f"({_listing(folded)}); give the exact name"
        )
    raise SourceError(f"{source_name} has no column {requested!r} (columns: {_listing(names)})")


def _readable(type_: pa.DataType) -> bool:
    """Whether cells of this type can be read as text (what :func:`clean_cells` does)."""
    if pa.types.is_string(type_) or pa.types.is_null(type_):
        return True
    try:
        pc.cast(pa.array([], type_), pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _textual(schema: pa.Schema, name: str, source_name: str) -> str:
    type_ = schema.field(name).type
    if not _readable(type_):
        raise SourceError(
            f"{source_name}: column {name!r} holds {type_} values, not text, so it cannot hold "
            "addresses; name a column of text with --email-column"
        )
    return name


def _explain_nested(schema: pa.Schema, nested: list[str], source_name: str) -> None:
    """An address header on a nested column: the error says why that column is not used."""
    for name in nested:
        if header_rank(name) != _OTHER:
            _textual(schema, name, source_name)


def _address_shares(sample: pa.Table, names: list[str]) -> dict[str, tuple[int, float]]:
    """How many sample cells of each column look like addresses, and their share of its
    non-empty ones. Every column's cells are read in one pass (one :func:`clean_cells`, one
    regular expression), not a pass per column: a table of 10,000 columns costs its cells, not
    10,000 times a column's overhead (issue 28)."""
    shares = dict.fromkeys(names, (0, 0.0))
    rows = sample.num_rows
    if not rows:
        return shares
    where = {name: index for index, name in enumerate(sample.column_names)}
    read: list[str] = []
    texts: list[pa.Array] = []
    for name in names:
        if name not in where:
            continue
        try:
            texts.append(as_text(sample.column(where[name])))
        except ValueError:  # a nested type: not text, not addresses
            continue
        read.append(name)
    if not read:
        return shares
    import numpy as np

    cells = clean_cells(pa.chunked_array(texts, pa.string()))
    filled = np.asarray(pc.is_valid(cells)).reshape(len(read), rows).sum(axis=1)
    looks = pc.fill_null(pc.match_substring_regex(cells, _ADDRESS), False)
    matches = np.asarray(looks).reshape(len(read), rows).sum(axis=1)
    for name, count, full in zip(read, matches.tolist(), filled.tolist(), strict=True):
        if full:
            shares[name] = (count, count / full)
    return shares


def _ambiguous(candidates: list[str], source_name: str) -> SourceError:
    return SourceError(
        f"{source_name} has several possible email columns ({_listing(candidates)}); "
        "name the one to use with --email-column"
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    if len(names) > _LISTED:
        shown += f", ... and {len(names) - _LISTED} more"
    return shown

"""Email cells read as a person would, before verification, vectorised.

PRODUCT.md ("Pipeline rows"): surrounding whitespace (NBSP and tabs too), case, a ``mailto:``
prefix and a display name do not change the address; an empty cell or a placeholder (``N/A``,
``none``, ``-``, ``#N/A``, ...) is no address at all. :func:`clean_cells` applies those readings
to a whole column with ``pyarrow.compute`` (RE2 regular expressions), never a Python loop per row,
because a million-row table is cleaned in a fraction of a second that way.

The rules, in order:

1. the value is cast to text; invisible characters at either end are trimmed (whitespace, NBSP
   and every other Unicode space, zero-width spaces and joiners, byte-order marks);
2. everything is lower-cased;
3. a display name form keeps what is inside the angle brackets: ``Jane Doe <jane@x.com>``,
   ``"Doe, Jane" <jane@x.com>``, ``<jane@x.com>``;
4. a list keeps its first address: ``a@x.com; b@y.com`` and ``a@x.com, b@y.com`` give
   ``a@x.com`` (separators inside double quotes do not count, and text without an ``@`` before
   the separator, such as ``foo, bar``, is not a list);
5. a ``mailto:`` prefix goes, with any ``?subject=...`` query after the address;
6. an address wrapped whole in quotes loses them (``"jane@x.com"``);
7. an empty cell, a placeholder of :data:`PLACEHOLDERS` or a cell of punctuation only
   (``---``, ``?``, ``...``) becomes null.

Anything else stays as it is (trimmed, lower-cased): whether it is an address is the engine's
judgement, not this module's.
"""

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["PLACEHOLDERS", "as_text", "clean_cells", "trim_invisible"]

#: Cell values that mean "no address" (compared after trimming and lower-casing).
PLACEHOLDERS: frozenset[str] = frozenset(
    {
        "-",
        "--",
        "---",
        ".",
        "..",
        "...",
        "?",
        "??",
        "???",
        "#n/a",
        "#na",
        "#name?",
        "#null!",
        "#ref!",
        "#value!",
        "0",
        "blank",
        "empty",
        "missing",
        "n.a.",
        "n/a",
        "n\\a",
        "na",
        "nan",
        "nil",
        "no email",
        "no e-mail",
        "no mail",
        "no-email",
        "no_email",
        "noemail",
        "nomail",
        "none",
        "none provided",
        "not available",
        "not given",
        "not provided",
        "null",
        "tba",
        "tbc",
        "tbd",
        "undefined",
        "unknown",
        "x",
        "xx",
        "xxx",
    }
)

#: Invisible characters trimmed at either end: ASCII whitespace and NEL, every Unicode space
#: separator (NBSP among them), line and paragraph separators, the Mongolian vowel separator,
#: zero-width space / non-joiner / joiner, word joiner and the byte-order mark.
_INVISIBLE = (
    "\t\n\v\f\r \x85\xa0\u1680\u180e"
    + "".join(chr(c) for c in range(0x2000, 0x200E))
    + "\u2028\u2029\u202f\u205f\u2060\u3000\ufeff"
)
_INVISIBLE_CLASS = r"\s\p{Z}\x{85}\x{180E}\x{200B}-\x{200D}\x{2060}\x{FEFF}"

#: ``Name <address>``: no ``@`` before the first ``<`` outside quotes, an ``@`` inside.
_DISPLAY_NAME = r"""(?s)^(?:"[^"]*"|'[^']*'|[^@<"])*<[\s]*([^<>@]*@[^<>]*?)[\s]*>.*$"""
_LEADING_SEPARATORS = rf"(?s)^[,;{_INVISIBLE_CLASS}]+(.*@.*)$"
#: Everything before the first ``,`` or ``;`` outside double quotes, when it holds an ``@``.
_FIRST_OF_LIST = r"""(?s)^((?:"[^"]*"|[^",;])*@(?:"[^"]*"|[^",;])*)[,;].*$"""
_MAILTO = r"(?s)^mailto:[\s]*([^?]*)(?:\?.*)?$"
_QUOTED = r"""^(?:"([^"]*@[^"]*)"|'([^']*@[^']*)')$"""
_PUNCTUATION_ONLY = rf"^[\p{{P}}\p{{S}}{_INVISIBLE_CLASS}]+$"

#: A cell no rule changes: an address of letters, digits and ``. _ + -`` (no ``<``, ``,``,
#: ``;``, ``:`` or quotes; neither empty, a placeholder nor punctuation only).
_PLAIN = r"^[a-z0-9._+\-]*[a-z0-9][a-z0-9._+\-]*@[a-z0-9.\-]+$"

_PLACEHOLDER_SET = pa.array(sorted(PLACEHOLDERS), pa.string())
_NULL = pa.scalar(None, pa.string())


def clean_cells(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The address each cell holds, as a string array of the same length; null where none.

    Null cells stay null. A cell holding several addresses keeps the first: one row is one
    address to verify, and the row is kept whole in the output, so nothing is lost. Each
    rewriting is applied only to the cells that hold its tell-tale character (``<``, ``,``,
    ``mailto:``, ...), which keeps a million plain addresses well under a second.
    """
    text = _trim(pc.utf8_lower(as_text(values)))
    # most cells are plain addresses, which no rule changes: the rules read the others only
    other = pc.invert(pc.fill_null(pc.match_substring_regex(text, _PLAIN), True))
    if not pc.any(other).as_py():
        return text
    return pc.replace_with_mask(text, other, _read(text.filter(other)))


def _read(text: pa.Array) -> pa.Array:
    """Rules 3 to 7 on trimmed, lower-cased cells."""
    text = _rewrite(text, pc.match_substring(text, "<"), _DISPLAY_NAME, r"\1")
    separated = pc.or_(pc.match_substring(text, ","), pc.match_substring(text, ";"))
    text = _rewrite(text, separated, _LEADING_SEPARATORS, r"\1")
    text = _rewrite(text, separated, _FIRST_OF_LIST, r"\1")
    text = _rewrite(text, pc.starts_with(text, "mailto:"), _MAILTO, r"\1")
    quoted = pc.or_(pc.starts_with(text, '"'), pc.starts_with(text, "'"))
    text = _rewrite(text, quoted, _QUOTED, r"\1\2")
    blank = pc.or_(
        pc.or_(pc.equal(text, ""), pc.is_in(text, value_set=_PLACEHOLDER_SET)),
        pc.match_substring_regex(text, _PUNCTUATION_ONLY),
    )
    return pc.if_else(blank, _NULL, text)


def trim_invisible(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Text with invisible characters (whitespace, NBSP, zero-width spaces, BOMs) trimmed."""
    return _trim(as_text(values))


def _trim(values: pa.Array) -> pa.Array:
    return pc.utf8_trim(values, characters=_INVISIBLE)


def _rewrite(text: pa.Array, where: pa.Array, pattern: str, replacement: str) -> pa.Array:
    """``pattern`` replaced, then the result trimmed, in the cells marked by ``where`` only."""
    where = pc.fill_null(where, False)
    if not pc.any(where).as_py():
        return text
    rewritten = _trim(pc.replace_substring_regex(text.filter(where), pattern, replacement))
    return pc.replace_with_mask(text, where, rewritten)


def as_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Cells as one string array; :class:`ValueError` for cells that cannot be text (nested)."""
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:  # no copy (a table of 10,000 columns asks 10,000 times)
            values = values.chunk(0)
        elif values.num_chunks:
            values = values.combine_chunks()
        else:
            values = pa.array([], type=values.type)
    if pa.types.is_string(values.type):
        return values
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), pa.string())
    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"cells of type {values.type} cannot be read as text: {exc}") from None

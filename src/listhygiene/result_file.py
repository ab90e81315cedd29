"""Form A's result file: its columns and the escaping of its cells, shared by the service that
writes it and the pipeline backend that reads it back (PRODUCT.md, "Decisions")."""

__all__ = ["FORMULA_STARTS", "RESULT_COLUMNS", "escape_formula", "unescape_formula"]

#: The result columns that follow the uploaded row's own.
RESULT_COLUMNS = (
    "status",
    "score",
    "reason",
    "is_deliverable",
    "is_disposable",
    "is_catchall",
    "is_role",
    "is_free",
    "smtp_check",
)
#: A cell starting with one of these is a formula to a spreadsheet. PRODUCT.md names the first
#: four; tab and carriage return are OWASP's other two.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def escape_formula(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would run it as a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def unescape_formula(text: str) -> str:
    """The cell as it was before :func:`escape_formula`."""
    if text.startswith("'") and text[1:].startswith(FORMULA_STARTS):
        return text[1:]
    return text

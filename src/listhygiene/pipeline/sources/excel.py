"""XLSX and XLS workbooks: the rows under the header of the first sheet, every cell as text.

PRODUCT.md fixes the rows ("For XLSX and XLS the rows are those under the header of the first
sheet"). Cells become the text a person reads: an integer-valued number without ``.0`` (phone
numbers and ids are stored as floats), dates in ISO 8601 (a date alone when the time is
midnight), booleans ``TRUE``/``FALSE``, an error cell its text (``#N/A``), an empty cell null.
Rows entirely empty are not rows, and empty rows above the header are skipped.

The header fixes the columns, widened by any sample row that reaches further; a later row
reaching past them keeps its extra cells joined with ``,`` into the last column and is reported
as a bad record, as a CSV record with too many fields would be.

An XLSX is a zip of XML, streamed from its first worksheet's XML by
:mod:`~listhygiene.pipeline.sources.xlsx_sheet` (the text openpyxl gave, several times faster);
XLS is read by xlrd. An XLSX is refused before any part is parsed when it would inflate past
1 GiB, or more than 100 times its compressed size (a zip bomb), and a part with a document type
declaration (a DTD: entity expansion) is refused when met. A file that is not a workbook (random
bytes, a truncated zip, a CSV renamed, XML that is not well-formed) is a :class:`SourceError`
saying so.

Those are the bounds of :data:`CLI_LIMITS`, for files a user reads on their own machine. A reader
given other :class:`WorkbookLimits` (the service's uploads) also bounds each zip member's
inflated size, the shared-strings part's size and string count (every shared string is held
in memory while the sheet is read), the characters of one cell, and the cells and characters
read in one pass over the sheet; past any of them it raises :class:`WorkbookTooLarge` (a
:class:`SourceError`; the zip-bomb guard's refusals stay plain :class:`SourceError`: a file not
to be read at all).
"""

import itertools
import zipfile
from abc import abstractmethod
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from listhygiene.pipeline.sources.base import (
    BadRecord,
    Source,
    SourceError,
    SourceInfo,
    bad_record,
    unique_names,
)
from listhygiene.pipeline.sources.batches import (
    as_text,
    rebatch,
    rebatched_ahead,
    string_schema,
)
from listhygiene.pipeline.sources.xlsx_sheet import (
    Package,
    SheetRows,
    TooManyStrings,
    XlsxError,
    XlsxRefused,
    open_package,
)

__all__ = ["CLI_LIMITS", "WorkbookLimits", "WorkbookTooLarge", "XlsSource", "XlsxSource"]

#: Uncompressed size an XLSX may reach.
MAX_INFLATED = 1 << 30
#: Uncompressed-to-compressed ratio an XLSX may reach (checked past _RATIO_FLOOR bytes).
MAX_RATIO = 100
_RATIO_FLOOR = 1 << 20
_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class WorkbookLimits:
    """What reading one workbook may cost; None is no bound."""

    #: Uncompressed size of the whole XLSX zip.
    max_inflated: int = MAX_INFLATED
    #: Uncompressed-to-compressed ratio (checked past 1 MiB inflated).
    max_ratio: int = MAX_RATIO
    #: Uncompressed size of any one zip member (the sheet's XML, styles, ...).
    max_member_inflated: int | None = None
    #: Uncompressed size of the shared-strings part, and its number of strings.
    max_shared_strings_bytes: int | None = None
    max_shared_strings: int | None = None
    #: Characters of one cell (Excel's own limit is 32,767).
    max_cell_chars: int | None = None
    #: Cells, and characters of all cells, in one pass over the sheet.
    max_cells: int | None = None
    max_text_chars: int | None = None


#: The pipeline's own bounds (``listhygiene clean``): the zip-bomb guard only.
CLI_LIMITS = WorkbookLimits()


class WorkbookTooLarge(SourceError):
    """A workbook past one of its reader's :class:`WorkbookLimits`."""


class _Workbook(Source):
    """The first sheet of a workbook, read a chunk of rows at a time by :meth:`_chunks`."""

    _kind: str

    def __init__(self, path: Path, limits: WorkbookLimits = CLI_LIMITS) -> None:
        self._path = path
        self._limits = limits
        self.info = SourceInfo(kind=self._kind, name=str(path))
        chunks = self._chunks()
        try:
            rows = itertools.chain.from_iterable(chunks)
            header = next(rows, None)
            if header is None:
                raise SourceError(f"{path} is empty (its first sheet has no cells)")
            sample = list(itertools.islice(rows, _SAMPLE_ROWS))
        finally:
            chunks.close()
        width = max([len(header), *(len(row) for row in sample)])
        self._schema = string_schema(unique_names(_padded(header, width)))
        self._sample = self._table([_padded(row, width) for row in sample])

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def sample(self, rows: int = 1000) -> pa.Table:
        if rows <= self._sample.num_rows or self._sample.num_rows < _SAMPLE_ROWS:
            return self._sample.slice(0, rows)
        pieces = self._read(rows, [])
        try:
            batch = next(iter(rebatch(pieces, rows, self._schema)))
        finally:
            pieces.close()
        return pa.Table.from_batches([batch])

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        self.info.bad_records.clear()
        yield from rebatched_ahead(self._read(rows, self.info.bad_records), rows, self._schema)

    def _read(self, rows: int, bad: list[BadRecord]) -> Generator[pa.Table, None, None]:
        width = len(self._schema)
        values: list[list[str | None]] = []
        emitted = 0
        header = True
        chunks = self._chunks()
        try:
            for chunk in chunks:
                if header and chunk:
                    chunk, header = chunk[1:], False
                if not chunk or max(map(len, chunk)) <= width:
                    values.extend(chunk)
                else:
                    for row in chunk:
                        if len(row) > width:
                            problem = f"expected {width} fields, found {len(row)}"
                            at = emitted + len(values) + 1
                            bad.append(bad_record(at, problem, _joined(row)))
                            row = [*row[: width - 1], _joined(row[width - 1 :])]
                        values.append(row)
                if len(values) >= rows:
                    emitted += len(values)
                    yield self._table(values)
                    values = []
        finally:
            chunks.close()
        yield self._table(values)

    def _table(self, rows: list[list[str | None]]) -> pa.Table:
        """Rows no wider than the schema as a table, a row's missing cells null."""
        columns: list[tuple[str | None, ...]] = list(itertools.zip_longest(*rows))
        columns += [(None,) * len(rows)] * (len(self._schema) - len(columns))
        return pa.Table.from_arrays(
            [pa.array(c, pa.string()) for c in columns], schema=self._schema
        )

    def _chunks(self) -> Generator[list[list[str | None]], None, None]:
        """Non-empty rows of the first sheet as text, trailing empty cells dropped, a list of
        them at a time, within the limits on cells."""
        limits = self._limits
        if (
            limits.max_cell_chars is None
            and limits.max_cells is None
            and (limits.max_text_chars is None)
        ):
            yield from self._sheet_chunks()
            return
        longest = limits.max_cell_chars or 0
        cells = chars = 0
        chunks = self._sheet_chunks()
        try:
            for chunk in chunks:
                for row in chunk:
                    cells += len(row)
                    sizes = [0 if cell is None else len(cell) for cell in row]
                    chars += sum(sizes)
                    if longest and max(sizes, default=0) > longest:
                        raise self._too_large(f"a cell longer than {longest:,} characters")
                    if limits.max_cells is not None and cells > limits.max_cells:
                        raise self._too_large(f"more than {limits.max_cells:,} cells")
                    if limits.max_text_chars is not None and chars > limits.max_text_chars:
                        raise self._too_large(f"more than {limits.max_text_chars:,} characters")
                yield chunk
        finally:
            chunks.close()

    def _too_large(self, what: str) -> WorkbookTooLarge:
        return WorkbookTooLarge(f"{self._path} is refused: it has {what}")

    @abstractmethod
    def _sheet_chunks(self) -> Generator[list[list[str | None]], None, None]:
        """Non-empty rows of the first sheet as text, trailing empty cells dropped, a list of
        them at a time."""


class XlsxSource(_Workbook):
    """An Office Open XML workbook, its first worksheet streamed from its XML
    (:mod:`~listhygiene.pipeline.sources.xlsx_sheet`)."""

    _kind = "xlsx"

    def __init__(self, path: Path, limits: WorkbookLimits = CLI_LIMITS) -> None:
        _check_zip(path, limits)
        self._package: Package | None = None  # kept from the header's read for the rows'
        super().__init__(path, limits)

    def batches(self, rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        try:
            yield from super().batches(rows)
        finally:
            self._package = None  # the shared strings are not held past the read

    def _sheet_chunks(self) -> Generator[list[list[str | None]], None, None]:
        try:
            archive = zipfile.ZipFile(self._path)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise self._invalid(exc) from None
        with archive:
            try:
                if self._package is None:
                    self._package = open_package(archive, self._limits.max_shared_strings)
                if self._package.sheet is None:
                    raise SourceError(f"{self._path} is empty (it has no worksheet)")
                yield from SheetRows(archive, self._package).chunks()
            except TooManyStrings as exc:
                raise WorkbookTooLarge(
                    f"{self._path} is refused: its shared strings are more than {exc.args[0]:,}"
                ) from None
            except XlsxRefused as exc:
                raise SourceError(f"{self._path} is refused: {exc}") from None
            except XlsxError as exc:
                raise self._invalid(exc) from None

    def _invalid(self, exc: Exception) -> SourceError:
        return SourceError(f"{self._path} is not a valid XLSX file: {_reason(exc)}")


class XlsSource(_Workbook):
    """A legacy Excel 97-2003 workbook, read with xlrd."""

    _kind = "xls"

    def _sheet_chunks(self) -> Generator[list[list[str | None]], None, None]:
        rows = self._sheet_rows()
        try:
            while chunk := list(itertools.islice(rows, 4096)):
                yield chunk
        finally:
            rows.close()

    def _sheet_rows(self) -> Generator[list[str | None], None, None]:
        import xlrd

        try:
            book = xlrd.open_workbook(self._path, on_demand=True)
            sheet = book.sheet_by_index(0)
        except Exception as exc:  # xlrd raises many kinds on a corrupt file
            raise SourceError(f"{self._path} is not a valid XLS file: {_reason(exc)}") from None
        try:
            for index in range(sheet.nrows):
                row = _text_row(_xls_value(cell, book.datemode) for cell in sheet.row(index))
                if row:
                    yield row
        finally:
            book.release_resources()


def _check_zip(path: Path, limits: WorkbookLimits = CLI_LIMITS) -> None:
    """Refuse what is not a zip, and a zip that would inflate too far."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise SourceError(f"{path} is not a valid XLSX file: {_reason(exc)}") from None
    inflated = sum(member.file_size for member in members)
    compressed = sum(member.compress_size for member in members)
    if inflated > limits.max_inflated:
        raise SourceError(
            f"{path} is refused: it would inflate to {inflated:,} bytes "
            f"(more than {limits.max_inflated:,}); it may be a zip bomb"
        )
    if inflated > _RATIO_FLOOR and inflated > limits.max_ratio * max(compressed, 1):
        raise SourceError(
            f"{path} is refused: it would inflate {inflated // max(compressed, 1)} times "
            f"(more than {limits.max_ratio}); it may be a zip bomb"
        )
    # Python's zipfile reads no more of a member than its declared size: these bounds hold.
    for member in members:
        strings = member.filename.lower().endswith("sharedstrings.xml")
        bound = limits.max_shared_strings_bytes if strings else None
        bound = bound if bound is not None else limits.max_member_inflated
        if bound is not None and member.file_size > bound:
            raise WorkbookTooLarge(
                f"{path} is refused: its part {member.filename} would inflate to "
                f"{member.file_size:,} bytes (more than {bound:,})"
            )


def _text_row(values: Iterable[Any]) -> list[str | None]:
    """Cells as text; trailing empty cells dropped, so an empty row is ``[]``."""
    row = [None if v is None or v == "" else as_text(v) for v in values]
    while row and row[-1] is None:
        row.pop()
    return row


def _joined(cells: list[str | None]) -> str:
    return ",".join("" if cell is None else cell for cell in cells)


def _padded(row: list[str | None], width: int) -> list[str | None]:
    return row + [None] * (width - len(row))


def _xls_value(cell: Any, datemode: int) -> Any:
    import xlrd

    if cell.ctype in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
        return None
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            return xlrd.xldate.xldate_as_datetime(cell.value, datemode)
        except (xlrd.xldate.XLDateError, ValueError, OverflowError):
            return cell.value
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return bool(cell.value)
    if cell.ctype == xlrd.XL_CELL_ERROR:
        return xlrd.error_text_from_code.get(cell.value, "#ERROR")
    return cell.value


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

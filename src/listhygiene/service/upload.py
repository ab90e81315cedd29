"""Form A uploads: the multipart body read as it streams, within the spec's limits, into rows.

The 20 MiB limit is enforced on the bytes as they arrive, never after buffering the body: a
``Content-Length`` over the limit is refused before anything is read, and a body without one is
cut off as soon as it passes it. The multipart parser (Starlette's, on python-multipart) spools
the file part to a temporary file, so an upload costs at most about 1 MiB of memory.

The file is then read with the pipeline's own readers (``listhygiene.pipeline.sources``: CSV with
encoding and delimiter sniffing, TXT, XLSX with its zip-bomb guard, XLS), the email column found
by the pipeline's rules, and the cells cleaned as the pipeline cleans them: by :func:`parse_file`,
which the service runs in a child process (:mod:`.parse_process`) and which writes the rows to an
Arrow IPC file that :class:`StoredRows` reads back a batch at a time. What one upload may cost is
bounded while reading: :data:`MAX_ROWS` rows, :data:`MAX_CELLS` cells, :data:`MAX_TEXT_CHARS`
characters of cells, and for workbooks :data:`UPLOAD_LIMITS` (each zip member's and the shared
strings' inflated size, the number of shared strings, 32,767 characters a cell); past any of them
413 ``4130`` naming the upload and the limit.
"""

import bisect
import shutil
import tempfile
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO, overload

import pyarrow as pa
import pyarrow.compute as pc
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request

from listhygiene.email_cells import clean_cells
from listhygiene.errors import FormABadRequest, FormAFileTooLarge
from listhygiene.pipeline import Source, SourceError, open_source
from listhygiene.pipeline.sources.columns import find_email_column
from listhygiene.pipeline.sources.excel import (
    WorkbookLimits,
    WorkbookTooLarge,
    XlsSource,
    XlsxSource,
)
from listhygiene.service.store.jobs import UploadedRow

__all__ = [
    "EXTENSIONS",
    "MAX_CELLS",
    "MAX_FILE_BYTES",
    "MAX_ROWS",
    "MAX_TEXT_CHARS",
    "UPLOAD_LIMITS",
    "ParsedFile",
    "ReceivedFile",
    "StoredRows",
    "parse_file",
    "receive_file",
]

#: 20 MB, read as PRODUCT.md says: 20 * 1024 * 1024 bytes.
MAX_FILE_BYTES = 20 * 1024 * 1024
#: Data rows per uploaded file at most (spec/form-a.md, Limits).
MAX_ROWS = 100_000
#: Cells (rows x columns) and characters of cells per upload, whatever its format: what the
#: service holds of an upload is bounded by these, not by how far a workbook inflates.
MAX_CELLS = 5_000_000
MAX_TEXT_CHARS = 32 << 20
#: What reading one uploaded workbook may cost (the pipeline's CLI keeps its own, looser bounds:
#: ``sources.excel.CLI_LIMITS``). A reader holds every shared string in memory, hence their bounds.
UPLOAD_LIMITS = WorkbookLimits(
    max_inflated=512 << 20,
    max_ratio=100,
    max_member_inflated=256 << 20,
    max_shared_strings_bytes=64 << 20,
    max_shared_strings=1_000_000,
    max_cell_chars=32_767,  # Excel's own limit
    max_cells=MAX_CELLS,
    max_text_chars=MAX_TEXT_CHARS,
)
#: The file formats of ``POST /verify/file``, by extension (spec/form-a.md, rule 1).
EXTENSIONS = {".csv": "csv", ".xlsx": "xlsx", ".xls": "xls", ".txt": "txt"}
#: What the body may carry beyond the file: multipart framing and the small ``email_column``.
_FRAMING = 64 * 1024
_BATCH_ROWS = 5_000  # create_file_job's slices


@dataclass(frozen=True)
class ReceivedFile:
    """An upload on disk (the caller removes ``directory``)."""

    directory: Path
    path: Path
    file_name: str
    size: int
    kind: str
    email_column: str | None


@dataclass(frozen=True)
class ParsedFile:
    columns: list[str]
    email_column: str
    rows: Sequence[UploadedRow]


def _too_large(what: str) -> FormAFileTooLarge:
    return FormAFileTooLarge(details=what)


async def _limited(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    """The body's chunks, refused (413) as soon as more than ``limit`` bytes have arrived."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise _too_large(f"The upload exceeds {MAX_FILE_BYTES} bytes (20 MB)")
        yield chunk


async def receive_file(request: Request) -> ReceivedFile:
    """Read the multipart body of ``POST /verify/file`` into a temporary file.

    400 ``4000`` for a body that is not multipart, without a ``file`` part, with an empty file or
    an unsupported extension; 413 ``4130`` over 20 MiB.
    """
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise FormABadRequest(details="Send the file as multipart/form-data in a 'file' field")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_FILE_BYTES + _FRAMING:
        raise _too_large(f"The upload is {declared} bytes; at most {MAX_FILE_BYTES} are accepted")
    parser = MultiPartParser(
        request.headers, _limited(request, MAX_FILE_BYTES + _FRAMING), max_files=1, max_fields=8
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise FormABadRequest(details=f"Malformed multipart body: {exc.message}") from None
    except ClientDisconnect:
        raise FormABadRequest(details="The upload was interrupted") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise FormABadRequest(details="No file: send it in a multipart field named 'file'")
        column = form.get("email_column")
        if column is not None and not isinstance(column, str):
            raise FormABadRequest(details="email_column must be a text field")
        file_name = PurePath((upload.filename or "").replace("\\", "/")).name
        kind = EXTENSIONS.get(PurePath(file_name).suffix.lower())
        if kind is None:
            raise FormABadRequest(
                details=f"Unsupported file type {file_name!r}: send .csv, .xlsx, .xls or .txt"
            )
        size = upload.size or 0
        if size > MAX_FILE_BYTES:
            raise _too_large(f"The file is {size} bytes; at most {MAX_FILE_BYTES} are accepted")
        if size == 0:
            raise FormABadRequest(details=f"{file_name} is empty")
        directory = Path(tempfile.mkdtemp(prefix="listhygiene-upload-"))
        path = directory / f"upload.{kind}"
        try:
            await upload.seek(0)
            with path.open("wb") as out:
                await _copy(upload, out)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return ReceivedFile(directory, path, file_name, size, kind, (column or "").strip() or None)
    finally:
        await form.close()


async def _copy(upload: UploadFile, out: BinaryIO) -> None:
    while chunk := await upload.read(1024 * 1024):
        out.write(chunk)


def parse_file(received: ReceivedFile, out: Path) -> ParsedFile:
    """Read the upload into the Arrow IPC file ``out`` (blocking; the service runs it in a child
    process, :mod:`.parse_process`): the file's cells in their columns' order, then the address
    read from each row's email cell. The returned rows read ``out`` a batch at a time.

    400 ``4000`` when the file cannot be read, has no data rows, or has no email column that can
    be told apart; 413 ``4130`` past :data:`MAX_ROWS` rows or any of :data:`UPLOAD_LIMITS`.
    """
    name = received.file_name
    if received.kind in ("csv", "txt") and _binary(received.path):
        raise FormABadRequest(details=f"{name} is not a text file")
    rows = cells = chars = 0
    try:
        source = _open(received)
        columns = list(source.schema.names)
        column = find_email_column(
            source.schema, source.sample(), received.email_column, source_name=name
        )
        at = columns.index(column)
        schema = pa.schema(
            [pa.field(f"c{i}", t) for i, t in enumerate(source.schema.types)]
            + [pa.field("address", pa.string())]
        )
        with pa.ipc.new_file(str(out), schema) as writer:
            for batch in source.batches(_BATCH_ROWS):
                rows += batch.num_rows
                cells += batch.num_rows * batch.num_columns
                chars += _characters(batch)
                if rows > MAX_ROWS:
                    raise _too_large(f"{name} has more than {MAX_ROWS} data rows")
                if cells > MAX_CELLS:
                    raise _too_large(f"{name} has more than {MAX_CELLS:,} cells")
                if chars > MAX_TEXT_CHARS:
                    raise _too_large(f"{name} has more than {MAX_TEXT_CHARS:,} characters of cells")
                if batch.num_rows:
                    addresses = clean_cells(batch.column(at))
                    writer.write_batch(
                        pa.RecordBatch.from_arrays([*batch.columns, addresses], schema=schema)
                    )
    except WorkbookTooLarge as exc:
        raise _too_large(_as_service_message(str(exc), received)) from None
    except SourceError as exc:
        raise FormABadRequest(details=_as_service_message(str(exc), received)) from None
    except MemoryError:
        raise  # pyarrow's too: the parse process answers it 413
    except (pa.ArrowException, UnicodeError, ValueError, OSError) as exc:
        raise FormABadRequest(details=f"{name} cannot be read as {received.kind}: {exc}") from None
    if not rows:
        raise FormABadRequest(details=f"{name} has no data rows")
    return ParsedFile(columns, column, StoredRows(out, at))


def _open(received: ReceivedFile) -> Source:
    if received.kind == "xlsx":
        return XlsxSource(received.path, UPLOAD_LIMITS)
    if received.kind == "xls":
        return XlsSource(received.path, UPLOAD_LIMITS)
    return open_source(received.path, kind=received.kind)


def _characters(batch: pa.RecordBatch) -> int:
    total = 0
    for array in batch.columns:
        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            total += pc.sum(pc.utf8_length(array)).as_py() or 0
    return total


class StoredRows(Sequence[UploadedRow]):
    """The rows of a parsed upload, read from its Arrow IPC file a batch at a time: the service
    never holds more than a batch of an upload's rows (``create_file_job`` takes them by slices
    of a batch's size)."""

    def __init__(self, path: Path, at: int) -> None:
        self._path = path
        self._at = at
        with pa.ipc.open_file(str(path)) as reader:
            sizes = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        self._starts: list[int] = [sum(sizes[:i]) for i in range(len(sizes) + 1)]

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, index: int) -> UploadedRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[UploadedRow]: ...
    def __getitem__(self, index: int | slice) -> UploadedRow | list[UploadedRow]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return list(self._range(start, stop))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return next(self._range(index, index + 1))

    def __iter__(self) -> Iterator[UploadedRow]:
        return self._range(0, len(self))

    def _range(self, start: int, stop: int) -> Iterator[UploadedRow]:
        if start >= stop:
            return
        first = bisect.bisect_right(self._starts, start) - 1
        with pa.ipc.open_file(str(self._path)) as reader:
            for number in range(first, reader.num_record_batches):
                offset = self._starts[number]
                if offset >= stop:
                    return
                batch = reader.get_batch(number)
                low, high = max(start - offset, 0), min(stop - offset, batch.num_rows)
                yield from _rows(batch.slice(low, high - low), self._at)


def _binary(path: Path) -> bool:
    """Whether a text upload is binary: NUL bytes in its first 8 KiB, and no UTF-16 or UTF-32
    byte-order mark to explain them."""
    with path.open("rb") as file:
        head = file.read(8192)
    unicode_bom = head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff"))
    return b"\x00" in head and not unicode_bom


def _rows(batch: pa.RecordBatch, at: int) -> list[UploadedRow]:
    cells = [batch.column(i).to_pylist() for i in range(batch.num_columns - 1)]
    emails = cells[at]
    addresses = batch.column(batch.num_columns - 1).to_pylist()
    return [
        UploadedRow(
            email="" if emails[i] is None else str(emails[i]),
            address=addresses[i],
            cells=[column[i] for column in cells],
        )
        for i in range(batch.num_rows)
    ]


def _as_service_message(message: str, received: ReceivedFile) -> str:
    """A reader's message in the service's words: the uploaded name, not the temporary path;
    the ``email_column`` field, not the command line's option."""
    return (
        message.replace(str(received.path), received.file_name)
        .replace("--email-column", "the email_column field")
        .replace("pass the kind explicitly", "send .csv, .xlsx, .xls or .txt")
    )

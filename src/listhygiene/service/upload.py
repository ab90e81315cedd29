"""Form A uploads: the multipart body read as it streams, within the spec's limits, into rows.

The 20 MiB limit is enforced on the bytes as they arrive, never after buffering the body: a
``Content-Length`` over the limit is refused before anything is read, and a body without one is
cut off as soon as it passes it. The multipart parser (Starlette's, on python-multipart) spools
the file part to a temporary file, so an upload costs at most about 1 MiB of memory.

The file is then read with the pipeline's own readers (``listhygiene.pipeline.sources``: CSV with
encoding and delimiter sniffing, TXT, XLSX with its zip-bomb guard, XLS), the email column found
by the pipeline's rules, and the cells cleaned as the pipeline cleans them. The 100,000-row limit
is checked batch by batch while reading, so an oversized file is refused without reading it all.
"""

import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO

import pyarrow as pa
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request

from listhygiene.errors import FormABadRequest, FormAFileTooLarge
from listhygiene.pipeline.columns import find_email_column
from listhygiene.pipeline.prepare import clean_cells
from listhygiene.pipeline.sources import SourceError, open_source
from listhygiene.service.store.jobs import UploadedRow

__all__ = [
    "EXTENSIONS",
    "MAX_FILE_BYTES",
    "MAX_ROWS",
    "ParsedFile",
    "ReceivedFile",
    "parse_file",
    "receive_file",
]

#: 20 MB, read as PRODUCT.md says: 20 * 1024 * 1024 bytes.
MAX_FILE_BYTES = 20 * 1024 * 1024
#: Data rows per uploaded file at most (spec/form-a.md, Limits).
MAX_ROWS = 100_000
#: The file formats of ``POST /verify/file``, by extension (spec/form-a.md, rule 1).
EXTENSIONS = {".csv": "csv", ".xlsx": "xlsx", ".xls": "xls", ".txt": "txt"}
#: What the body may carry beyond the file: multipart framing and the small ``email_column``.
_FRAMING = 64 * 1024
_BATCH_ROWS = 10_000


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
    rows: list[UploadedRow]


def _too_large(what: str) -> FormAFileTooLarge:
    return FormAFileTooLarge(details=what)


async def _limited(request: Request, limit: int) -> AsyncIterator[bytes]:
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


def parse_file(received: ReceivedFile) -> ParsedFile:
    """The file's rows, its columns and the email column (blocking: run it in a thread).

    400 ``4000`` when the file cannot be read, has no data rows, or has no email column that can
    be told apart; 413 ``4130`` past :data:`MAX_ROWS` rows.
    """
    name = received.file_name
    if received.kind in ("csv", "txt") and _binary(received.path):
        raise FormABadRequest(details=f"{name} is not a text file")
    try:
        source = open_source(received.path, kind=received.kind)
        columns = list(source.schema.names)
        column = find_email_column(
            source.schema, source.sample(), received.email_column, source_name=name
        )
        at = columns.index(column)
        rows: list[UploadedRow] = []
        for batch in source.batches(_BATCH_ROWS):
            if len(rows) + batch.num_rows > MAX_ROWS:
                raise _too_large(f"{name} has more than {MAX_ROWS} data rows")
            rows.extend(_rows(batch, at))
    except SourceError as exc:
        raise FormABadRequest(details=_as_service_message(str(exc), received)) from None
    except (pa.ArrowException, UnicodeError, ValueError, OSError) as exc:
        raise FormABadRequest(details=f"{name} cannot be read as {received.kind}: {exc}") from None
    if not rows:
        raise FormABadRequest(details=f"{name} has no data rows")
    return ParsedFile(columns, column, rows)


def _binary(path: Path) -> bool:
    """Whether a text upload is binary: NUL bytes in its first 8 KiB, and no UTF-16 or UTF-32
    byte-order mark to explain them."""
    with path.open("rb") as file:
        head = file.read(8192)
    unicode_bom = head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff"))
    return b"\x00" in head and not unicode_bom


def _rows(batch: pa.RecordBatch, at: int) -> list[UploadedRow]:
    cells = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    emails = cells[at]
    addresses = clean_cells(batch.column(at)).to_pylist()
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

"""Files in and out of form A's file jobs: the upload part, and the result CSV as a DataFrame."""

import io
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FileInput", "read_results_csv", "upload_part"]

#: A path, the bytes of a file, or an open binary file.
FileInput = str | os.PathLike[str] | bytes | IO[bytes]

_CONTENT_TYPES = {
    ".csv": "text/csv",
    ".txt": "text/plain",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".xls": "application/vnd.ms-excel",
}
#: Result columns of the file (PRODUCT.md, "Decisions"), as they should read back.
_BOOL_COLUMNS = ("is_deliverable", "is_disposable", "is_catchall", "is_role", "is_free")
_TRUE = frozenset({"true", "1", "yes"})


def upload_part(file: FileInput, file_name: str | None = None) -> tuple[str, bytes, str]:
    """``(name, content, content type)`` of the multipart ``file`` field.

    The content is read once, so that a retry (of a request that never left) sends it again.
    The name tells the service the format (.csv, .xlsx, .xls, .txt): bytes need one.
    """
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        content, name = path.read_bytes(), file_name or path.name
    elif isinstance(file, bytes | bytearray | memoryview):
        content, name = bytes(file), file_name or ""
    else:
        content = file.read()
        name = file_name or Path(str(getattr(file, "name", "") or "")).name
    if not name:
        raise ValueError("file_name is required with bytes or an unnamed file object")
    content_type = _CONTENT_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")
    return name, content, content_type


def read_results_csv(data: bytes | str) -> "pd.DataFrame":
    """A result file of ``file_results`` as a DataFrame: every cell read as text (addresses and
    the uploaded columns stay as written), ``score`` a float, the flags booleans, an empty
    ``reason`` ``None``."""
    import pandas as pd

    raw = data.encode() if isinstance(data, str) else data
    frame = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, encoding="utf-8-sig")
    if "score" in frame:
        frame["score"] = pd.to_numeric(frame["score"], errors="coerce")
    for column in (*_BOOL_COLUMNS, "smtp_check"):
        if column in frame:
            frame[column] = frame[column].str.strip().str.lower().isin(_TRUE)
    if "reason" in frame:
        reasons = [value or None for value in frame["reason"]]
        frame["reason"] = pd.Series(reasons, index=frame.index, dtype=object)
    return frame

"""A local file opened by its kind: the extension (or the kind asked for) picks the reader.

Only regular files are read: a path (after its symlinks) that is a FIFO, a device such as
``/dev/zero``, a socket or a directory is refused before it is opened, so nothing ever blocks on
it or reads it forever. Readers are imported when their kind is opened: a CSV run never imports
xlrd.
"""

import os
import stat
from pathlib import Path

from listhygiene.pipeline.sources.base import Source, SourceError

__all__ = ["EXTENSIONS", "open_file"]

EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "txt",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".xls": "xls",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",  # JSON lines only; checked when opened
}


def open_file(path: Path, kind: str | None, encoding: str | None) -> Source:
    try:
        return _open_file_of_kind(path, kind, encoding)
    except OSError as exc:  # unreadable: permissions, a vanished file, an I/O error
        raise SourceError(f"{path} cannot be read: {exc.strerror or exc}") from None


def _open_file_of_kind(path: Path, kind: str | None, encoding: str | None) -> Source:
    _check_regular(path)
    if kind is None:
        kind = EXTENSIONS.get(path.suffix.lower())
        if kind is None:
            known = " ".join(sorted(EXTENSIONS))
            raise SourceError(
                f"{path}: unsupported file type {path.suffix or '(no extension)'!r} "
                f"(supported: {known}); pass the kind explicitly"
            )
    if kind in ("csv", "txt"):
        from listhygiene.pipeline.sources.delimited import CsvSource, TxtSource

        return (CsvSource if kind == "csv" else TxtSource)(path, encoding=encoding)
    if kind in ("jsonl", "json"):
        from listhygiene.pipeline.sources.jsonl import JsonlSource

        return JsonlSource(path, encoding=encoding, require_lines=kind == "json")
    if kind == "parquet":
        from listhygiene.pipeline.sources.tables import ParquetSource

        return ParquetSource(path)
    if kind == "xlsx":
        from listhygiene.pipeline.sources.excel import XlsxSource

        return XlsxSource(path)
    if kind == "xls":
        from listhygiene.pipeline.sources.excel import XlsSource

        return XlsSource(path)
    raise SourceError(f"{path}: a file cannot be read as kind {kind!r}")


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(path: Path) -> None:
    """Refuse anything but a regular file, before opening it: opening a FIFO blocks until a
    writer comes, and a device like ``/dev/zero`` never ends."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: what would be read
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    if stat.S_ISREG(mode):
        return
    what = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file")
    if stat.S_ISDIR(mode):
        raise SourceError(f"{path} is a directory, not a file")
    raise SourceError(f"{path} is {what}, not a regular file; give a file")

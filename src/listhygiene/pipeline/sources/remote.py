"""An input at a filesystem URL (``s3://...``): copied to a local spool file, read as a file.

The readers need a seekable file (the CSV reader checks the whole file's encoding before it
reads the rows; an XLSX is a zip whose directory is at its end), and one sequential download
beats a range request per read (docs/object-storage.md). Errors name the URL, never the spool
file.
"""

import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from listhygiene.errors import ConfigurationError
from listhygiene.pipeline.sources.base import Source, SourceError, SourceInfo
from listhygiene.pipeline.sources.files import open_file
from listhygiene.pipeline.storage import describe, url_to_fs

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RemoteSource", "open_remote"]

#: Bytes per read when an input is copied to its spool file.
_CHUNK = 8 << 20


def open_remote(url: str, kind: str | None, encoding: str | None) -> Source:
    """An input at a filesystem URL: copied in chunks to a local spool file, then read as a
    local file is (errors name the URL, never the spool file)."""

    try:
        fs, path = url_to_fs(url)
        info = fs.info(path)
    except ConfigurationError:
        raise
    except Exception as exc:
        raise SourceError(f"{url}: {describe(exc)}") from None
    if info.get("type") == "directory":
        raise SourceError(f"{url} is a folder (a prefix), not an object; give a file")
    spool = Path(tempfile.mkdtemp(prefix="listhygiene-input-"))
    local = spool / (PurePosixPath(path).name or "input")
    try:
        with fs.open(path, "rb", block_size=_CHUNK) as remote, open(local, "wb") as copy:
            shutil.copyfileobj(remote, copy, _CHUNK)
        inner = open_file(local, kind, encoding)
    except SourceError as exc:
        shutil.rmtree(spool, ignore_errors=True)
        raise SourceError(str(exc).replace(str(local), url)) from None
    except Exception as exc:
        shutil.rmtree(spool, ignore_errors=True)
        raise SourceError(f"{url}: {describe(exc)}") from None
    return RemoteSource(inner, url, spool)


class RemoteSource(Source):
    """A source read from a local copy of an object; the copy goes with this object."""

    def __init__(self, inner: Source, url: str, spool: Path) -> None:
        self.inner = inner
        self.url = url
        self.local = str(spool / Path(inner.info.name).name)
        self.info: SourceInfo = inner.info
        self.info.name = url
        self._finalizer = weakref.finalize(self, shutil.rmtree, spool, True)

    @property
    def schema(self) -> "pa.Schema":
        return self.inner.schema

    def sample(self, rows: int = 1000) -> "pa.Table":
        with self._named():
            return self.inner.sample(rows)

    def batches(self, rows: int = 65_536) -> "Iterator[pa.RecordBatch]":
        with self._named():
            yield from self.inner.batches(rows)

    def close(self) -> None:
        """Remove the local copy now (it goes at garbage collection or exit otherwise)."""
        self._finalizer()

    def _named(self) -> "_Renamed":
        return _Renamed(self.local, self.url)


class _Renamed:
    """Re-raises a :class:`SourceError` that names the spool file with the URL instead."""

    def __init__(self, local: str, url: str) -> None:
        self.local, self.url = local, url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, SourceError) and self.local in str(exc):
            raise SourceError(str(exc).replace(self.local, self.url)) from None

"""Where the outputs go: a local folder or any filesystem URL pyarrow or fsspec understands.

Files are written into a staging folder inside the output and moved into place only when the
run has succeeded (quality checks included). ``summary.json`` is moved last and removed first:
an output folder that has a ``summary.json`` is complete, and nothing half-written ever looks
complete.

On object storage (``s3://``, through fsspec: docs/object-storage.md) the staging folder is a
prefix of the output, ``.staging-<id>/``: each file is uploaded there, and published by a
server-side copy to its final key (an object appears whole or not at all), then the staged copy
is deleted. Any failure to read or write there is an :class:`OutputError` of one line.
"""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from listhygiene.errors import ListHygieneError
from listhygiene.pipeline.layout import SUMMARY
from listhygiene.pipeline.storage import OutputError, describe, is_filesystem_url, url_to_fs

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs

__all__ = ["SUMMARY", "OutputError", "OutputFolder"]


def _filesystem(url: str) -> "tuple[pyarrow.fs.FileSystem, str, bool]":
    """The folder's pyarrow filesystem, its path there, and whether it is fsspec's (object
    storage, where a folder is only a prefix and is never created)."""
    import pyarrow.fs as pafs

    if "://" not in url:
        from pathlib import Path

        return pafs.LocalFileSystem(), str(Path(url).resolve()), False
    if is_filesystem_url(url):  # s3:// through s3fs, with the storage options
        try:
            fs, path = url_to_fs(url)
        except ImportError:
            pass  # its fsspec package is not installed: pyarrow may know the scheme itself
        else:
            from pyarrow.fs import FSSpecHandler, PyFileSystem

            return PyFileSystem(FSSpecHandler(fs)), path.rstrip("/"), True
    try:
        fs, path = pafs.FileSystem.from_uri(url)
        return fs, path, False
    except (ValueError, OSError):  # a scheme pyarrow does not know (ArrowInvalid): try fsspec
        pass
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise OutputError(f"{url}: no filesystem understands this URL ({exc})") from None
    return PyFileSystem(FSSpecHandler(fs)), path, True


class OutputFolder:
    """An output folder, with a staging area for the files of one run."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.fs, self.path, self.object_store = _filesystem(url)
        except ListHygieneError:
            raise
        except Exception as exc:  # any filesystem's own error, said with the folder's name
            raise OutputError(f"{url}: cannot use this output folder ({_said(exc)})") from None
        self.staging = f"{self.path}/.staging-{uuid.uuid4().hex[:12]}"

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """A filesystem's error (no such bucket, access denied, no credentials) as one line."""
        try:
            yield
        except ListHygieneError:
            raise
        except Exception as exc:
            raise OutputError(f"{self.url}: cannot {doing} ({_said(exc)})") from None

    def check_writable(self) -> None:
        """Create the folder and write a probe file, so a bad folder fails before any work.
        On object storage nothing is created: a missing bucket is an error, not made."""
        probe = f"{self.path}/.listhygiene-write-probe"
        with self._errors("write to the output folder"):
            if not self.object_store:
                self.fs.create_dir(self.path, recursive=True)
            with self.fs.open_output_stream(probe) as stream:
                stream.write(b"ok")
            self.fs.delete_file(probe)

    def writer(self, name: str, schema: "pa.Schema", **options: Any) -> "_Writer":
        """A zstd Parquet writer of ``name`` in the staging folder; ``options`` are
        ``pyarrow.parquet.ParquetWriter``'s (the writer's ``use_dictionary``)."""
        import pyarrow.parquet as pq

        with self._errors(f"write {name}"):
            self._make_staging()
            return _Writer(
                pq.ParquetWriter(
                    f"{self.staging}/{name}",
                    schema,
                    filesystem=self.fs,
                    compression="zstd",
                    **options,
                ),
                self,
                name,
            )

    def copy(self, name: str, to: str) -> None:
        """Copy the staged file ``name`` to the staged file ``to``."""
        with self._errors(f"write {to}"):
            self.fs.copy_file(self.staged(name), self.staged(to))

    def staged(self, name: str) -> str:
        return f"{self.staging}/{name}"

    def write_text(self, name: str, text: str) -> None:
        with self._errors(f"write {name}"):
            self._make_staging()
            with self.fs.open_output_stream(f"{self.staging}/{name}") as stream:
                stream.write(text.encode("utf-8"))

    def _make_staging(self) -> None:
        if not self.object_store:  # a prefix needs no creating (and s3fs would make a bucket)
            self.fs.create_dir(self.staging, recursive=True)

    def final(self, name: str) -> str:
        return f"{self.path}/{name}"

    def publish(self, names: list[str]) -> None:
        """Move the staged files into place, ``summary.json`` last (on object storage a move is
        a server-side copy: the final key appears whole), then remove the staging folders of
        runs killed before they published."""
        import pyarrow.fs as pafs

        with self._errors("publish the outputs"):
            if self.fs.get_file_info(self.final(SUMMARY)).type != pafs.FileType.NotFound:
                self.fs.delete_file(self.final(SUMMARY))
            for name in sorted(names, key=lambda n: n == SUMMARY):
                target = self.final(name)
                if self.fs.get_file_info(target).type != pafs.FileType.NotFound:
                    self.fs.delete_file(target)
                self.fs.move(self.staged(name), target)
            self.discard()
            for stale in self.fs.get_file_info(pafs.FileSelector(self.path)):
                if (
                    stale.base_name.startswith(".staging-")
                    and stale.type == pafs.FileType.Directory
                ):
                    self.fs.delete_dir(stale.path)

    def discard(self) -> None:
        import pyarrow.fs as pafs

        with self._errors("remove its staging folder"):
            if self.fs.get_file_info(self.staging).type != pafs.FileType.NotFound:
                self.fs.delete_dir(self.staging)


class _Writer:
    """A ``ParquetWriter`` whose filesystem errors are :class:`OutputError` lines."""

    def __init__(self, inner: Any, folder: OutputFolder, name: str) -> None:
        self._inner, self._folder, self._name = inner, folder, name

    def write_table(self, table: "pa.Table", *args: Any, **kwargs: Any) -> None:
        with self._folder._errors(f"write {self._name}"):
            self._inner.write_table(table, *args, **kwargs)

    def write_batch(self, batch: "pa.RecordBatch", *args: Any, **kwargs: Any) -> None:
        with self._folder._errors(f"write {self._name}"):
            self._inner.write_batch(batch, *args, **kwargs)

    def close(self) -> None:
        with self._folder._errors(f"write {self._name}"):
            self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> "_Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _said(exc: BaseException) -> str:
    return describe(exc)

"""Where the outputs go: a local folder or any filesystem URL pyarrow or fsspec understands.

Files are written into a staging folder inside the output and moved into place only when the
run has succeeded (quality checks included). ``summary.json`` is moved last and removed first:
an output folder that has a ``summary.json`` is complete, and nothing half-written ever looks
complete.
"""

import uuid
from typing import TYPE_CHECKING

from listhygiene.errors import StorageError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs
    import pyarrow.parquet as pq

__all__ = ["OutputError", "OutputFolder"]

SUMMARY = "summary.json"


class OutputError(StorageError):
    """The output folder cannot be used; the message names it."""


def _filesystem(url: str) -> "tuple[pyarrow.fs.FileSystem, str]":
    import pyarrow.fs as pafs

    if "://" not in url:
        from pathlib import Path

        return pafs.LocalFileSystem(), str(Path(url).resolve())
    try:
        return pafs.FileSystem.from_uri(url)
    except (ValueError, OSError):  # a scheme pyarrow does not know (ArrowInvalid): try fsspec
        pass
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise OutputError(f"{url}: no filesystem understands this URL ({exc})") from None
    return PyFileSystem(FSSpecHandler(fs)), path


class OutputFolder:
    """An output folder, with a staging area for the files of one run."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.fs, self.path = _filesystem(url)
        except OutputError:
            raise
        except Exception as exc:  # any filesystem's own error, said with the folder's name
            raise OutputError(f"{url}: cannot use this output folder ({exc})") from None
        self.staging = f"{self.path}/.staging-{uuid.uuid4().hex[:12]}"

    def check_writable(self) -> None:
        """Create the folder and write a probe file, so a bad folder fails before any work."""
        probe = f"{self.path}/.listhygiene-write-probe"
        try:
            self.fs.create_dir(self.path, recursive=True)
            with self.fs.open_output_stream(probe) as stream:
                stream.write(b"ok")
            self.fs.delete_file(probe)
        except Exception as exc:
            raise OutputError(f"{self.url}: cannot write to the output folder ({exc})") from None

    def writer(self, name: str, schema: "pa.Schema") -> "pq.ParquetWriter":
        import pyarrow.parquet as pq

        self.fs.create_dir(self.staging, recursive=True)
        return pq.ParquetWriter(
            f"{self.staging}/{name}", schema, filesystem=self.fs, compression="zstd"
        )

    def staged(self, name: str) -> str:
        return f"{self.staging}/{name}"

    def write_text(self, name: str, text: str) -> None:
        self.fs.create_dir(self.staging, recursive=True)
        with self.fs.open_output_stream(f"{self.staging}/{name}") as stream:
            stream.write(text.encode("utf-8"))

    def final(self, name: str) -> str:
        return f"{self.path}/{name}"

    def publish(self, names: list[str]) -> None:
        """Move the staged files into place, ``summary.json`` last."""
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self.final(SUMMARY)).type != pafs.FileType.NotFound:
            self.fs.delete_file(self.final(SUMMARY))
        for name in sorted(names, key=lambda n: n == SUMMARY):
            target = self.final(name)
            if self.fs.get_file_info(target).type != pafs.FileType.NotFound:
                self.fs.delete_file(target)
            self.fs.move(self.staged(name), target)
        self.discard()

    def discard(self) -> None:
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self.staging).type != pafs.FileType.NotFound:
            self.fs.delete_dir(self.staging)

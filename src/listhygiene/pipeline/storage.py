"""Object storage (``s3://``, and any filesystem fsspec knows) for inputs, outputs and work state.

docs/object-storage.md tells the whole story; in short:

- **Filesystems** come from fsspec (s3fs for ``s3://``), created with the storage options of
  :func:`storage_options`: ``LISTHYGIENE_STORAGE_OPTIONS`` (a JSON object; ``clean
  --storage-option KEY=VALUE`` adds to it). Credentials, region and endpoint otherwise come the
  way botocore finds them (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL``, ...),
  and fsspec's own ``FSSPEC_S3_*`` variables apply too.
- **Inputs** at a URL are copied to a local spool file and read as a local file is
  (:mod:`listhygiene.pipeline.sources.remote`).
- **Work state** is mirrored under ``<out>/.listhygiene-work/`` (:class:`Mirror`), so a run
  killed on one machine resumes on another.
- **Errors** (no such bucket, access denied, no credentials) become one line
  (:func:`describe`); the caller raises it as its own error (input: exit 3, output: exit 1).
"""

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listhygiene.errors import ConfigurationError, StorageError

if TYPE_CHECKING:
    pass

__all__ = [
    "ENV",
    "WORK_PREFIX",
    "Mirror",
    "OutputError",
    "describe",
    "is_filesystem_url",
    "object_identity",
    "storage_options",
    "url_to_fs",
]

#: The storage options of every filesystem URL, as a JSON object (docs/object-storage.md).
ENV = "LISTHYGIENE_STORAGE_OPTIONS"
#: Where a remote output's work state is mirrored, under the output URL.
WORK_PREFIX = ".listhygiene-work"
#: Seconds between uploads of the results parts waiting to be mirrored.
_INTERVAL = 1.0
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9.-]*)://")
#: Schemes that are this machine's own files, never object storage.
_LOCAL = frozenset({"file", "local"})


class OutputError(StorageError):
    """The output folder (or the work state kept under it) cannot be used; the message names it.
    Here, below the outputs, because the work-state mirror raises it too."""


def storage_options() -> dict[str, Any]:
    """The options given to every fsspec filesystem: ``LISTHYGIENE_STORAGE_OPTIONS``."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{ENV} is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ConfigurationError(f"{ENV} must be a JSON object, not {type(options).__name__}")
    return options


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--storage-option``: the value as JSON when it parses (``true``, ``5``,
    ``{"region_name": "eu-west-1"}``), else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigurationError(f"a storage option is KEY=VALUE, not {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def is_filesystem_url(text: str) -> bool:
    """True for a URL whose scheme fsspec knows (``s3://``, ``memory://``, ``gs://``, ...),
    except the local filesystem's; a SQLAlchemy URL (``postgresql://``) is not one."""
    match = _SCHEME.match(text)
    if match is None or match.group(1).lower() in _LOCAL:
        return False
    import fsspec

    return match.group(1).lower() in fsspec.available_protocols()


def url_to_fs(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of a URL, with :func:`storage_options`, and the path on it."""
    import fsspec.core

    options = storage_options()
    # a fresh instance, with no listing cache on S3: the work state a resume reads may have been
    # written a moment ago by another machine, and the environment (credentials) may have changed
    options.setdefault("skip_instance_cache", True)
    if url.lower().startswith(("s3://", "s3a://")):
        options.setdefault("use_listings_cache", False)
    fs, path = fsspec.core.url_to_fs(url, **options)
    return fs, str(path)


def describe(exc: BaseException) -> str:
    """What went wrong talking to object storage, in words a user acts on (one line)."""
    name = type(exc).__name__
    text = " ".join(str(exc).split()) or name
    if name == "NoCredentialsError" or "Unable to locate credentials" in text:
        return (
            "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
            "AWS_PROFILE), or give storage options (docs/object-storage.md)"
        )
    if isinstance(exc, FileNotFoundError):
        if "bucket" in text.lower():
            return "no such bucket"
        return "no such object"
    if isinstance(exc, PermissionError):
        return f"access denied ({text})"
    if isinstance(exc, ImportError):
        return f"its filesystem's package is missing ({text}); for s3:// install listhygiene[s3]"
    if name == "EndpointConnectionError" or isinstance(exc, ConnectionError):
        return f"cannot reach the storage endpoint ({text})"
    return f"{name}: {text}"


def object_identity(url: str) -> dict[str, Any]:
    """What tells one version of an object from another (size, ETag, modification time), for
    the resume fingerprint; empty when the object cannot be asked (its open fails anyway)."""
    if not is_filesystem_url(url):
        return {}
    try:
        fs, path = url_to_fs(url)
        info = fs.info(path)
    except Exception:  # the open that follows says what is wrong, in one line
        return {}
    keys = ("size", "ETag", "LastModified", "mtime", "etag", "generation", "version_id")
    return {k: str(info[k]) for k in keys if info.get(k) is not None}


# -- inputs ------------------------------------------------------------------------------------


# -- work state --------------------------------------------------------------------------------


class Mirror:
    """A copy of a run's local work folder under ``<out>/.listhygiene-work/``.

    The work folder writes each file whole and then renames it; the mirror uploads it after
    that, and the manifest last, so a manifest in the bucket never speaks of a file that is not
    there. A run killed on one machine is resumed on another from it (docs/object-storage.md).

    Results parts come often (every 500 results or 2 s) and one PUT each would hold the run's
    event loop: :meth:`queue` hands them to a thread that uploads what is waiting every
    :data:`_INTERVAL` seconds, concurrently, and :meth:`sync` uploads what is still waiting
    before the manifest. The thread ends when nothing waits; it is not a daemon, so what waits
    when the process ends normally is still uploaded.
    """

    def __init__(self, out: str) -> None:
        self.url = f"{out.rstrip('/')}/{WORK_PREFIX}"
        try:
            self.fs, self.path = url_to_fs(self.url)
        except ConfigurationError:
            raise
        except Exception as exc:
            raise OutputError(f"{self.url}: {describe(exc)}") from None
        #: What is in the bucket: name -> (size, mtime_ns) of the local file uploaded.
        self.uploaded: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._waiting: list[tuple[Path, str]] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _fail(self, exc: BaseException) -> Exception:
        return OutputError(f"{self.url}: cannot keep the work state there ({describe(exc)})")

    def manifest(self) -> dict[str, Any] | None:
        """The mirrored manifest, or None when there is none (or it cannot be read)."""
        try:
            return dict(json.loads(self.fs.cat_file(f"{self.path}/manifest.json")))
        except FileNotFoundError:
            return None
        except ValueError:
            return None
        except Exception as exc:
            raise self._fail(exc) from None

    def queue(self, local: Path, name: str) -> None:
        """Upload ``name`` (relative to ``local``) soon, from a thread; an upload that failed
        meanwhile is raised here."""
        with self._lock:
            self._raise_failed()
            self._waiting.append((local, name))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._upload_waiting, name="listhygiene-mirror"
                )
                self._thread.start()

    def _upload_waiting(self) -> None:
        while True:
            time.sleep(_INTERVAL)
            with self._lock:
                if not self._waiting:
                    self._thread = None
                    return
                try:
                    self._put_waiting()
                except Exception as exc:  # raised in the run by the next queue() or sync()
                    self._error = exc

    def _put_waiting(self) -> None:
        """Upload the waiting files at once (s3fs sends them concurrently); under the lock."""
        waiting, self._waiting = self._waiting, []
        if waiting:
            self.fs.put(
                [str(local / name) for local, name in waiting],
                [f"{self.path}/{name}" for _, name in waiting],
            )
        for local, name in waiting:
            stat = (local / name).stat()
            self.uploaded[name] = (stat.st_size, stat.st_mtime_ns)

    def _raise_failed(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise self._fail(error) from None

    def sync(self, local: Path, names: list[str]) -> None:
        """Upload what waits and ``names`` (paths relative to ``local``) that changed since
        their last upload, delete what was uploaded and is gone locally, then the manifest."""
        with self._lock:
            self._raise_failed()
            try:
                self._put_waiting()
                for name in names:
                    stat = (local / name).stat()
                    seen = (stat.st_size, stat.st_mtime_ns)
                    if self.uploaded.get(name) != seen:
                        self.fs.put_file(str(local / name), f"{self.path}/{name}")
                        self.uploaded[name] = seen
                kept = set(names)
                for name in [n for n in self.uploaded if n not in kept]:
                    self.fs.rm_file(f"{self.path}/{name}")
                    del self.uploaded[name]
                self.fs.put_file(str(local / "manifest.json"), f"{self.path}/manifest.json")
            except Exception as exc:  # OSError, and botocore's own (no credentials)
                raise self._fail(exc) from None

    def adopt(self, local: Path) -> None:
        """Learn what the bucket holds of the local folder's files: one of the same name and
        size is taken as uploaded (each is written whole, under a new name); any other is
        uploaded again at the next sync, or deleted when the local folder lacks it."""
        try:
            found = self.fs.find(self.path, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:
            raise self._fail(exc) from None
        self.uploaded = {}
        for path, info in found.items():
            name = path[len(self.path) :].lstrip("/")
            if not name or name == "manifest.json":
                continue
            try:
                stat = (local / name).stat()
            except OSError:
                self.uploaded[name] = (-1, -1)
                continue
            same = stat.st_size == info.get("size")
            self.uploaded[name] = (stat.st_size, stat.st_mtime_ns) if same else (-1, -1)

    def restore(self, local: Path) -> None:
        """Replace the local work folder with the mirrored one."""
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        try:
            remote = [p for p in self.fs.find(self.path) if not p.endswith("/")]
            for path in remote:
                name = path[len(self.path) :].lstrip("/")
                target = local / name
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(path, str(target))
                stat = target.stat()
                if name != "manifest.json":
                    self.uploaded[name] = (stat.st_size, stat.st_mtime_ns)
        except Exception as exc:
            raise self._fail(exc) from None

    def remove(self) -> None:
        """Delete the mirrored work state (a published run, or a fresh start)."""
        with self._lock:
            self._waiting, self._error, self.uploaded = [], None, {}
            try:
                if self.fs.exists(self.path):
                    self.fs.rm(self.path, recursive=True)
            except FileNotFoundError:
                pass
            except Exception as exc:
                raise self._fail(exc) from None

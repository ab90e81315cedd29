"""``open_source`` picks the reader: by the kind asked for or the extension, regular files only,
and no object it cannot read."""

import os
import re
from pathlib import Path

import pytest

from listhygiene.pipeline.sources import SourceError, open_source
from tests.pipeline.sources.helpers import column, write


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(SourceError, match=f"^{re.escape(str(path))}: no such file$"):
        open_source(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "locked.csv", "email\na@x.com\n")
    path.chmod(0)
    with pytest.raises(SourceError, match="cannot be read: Permission denied"):
        open_source(path)


def test_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is a directory"):
        open_source(tmp_path)


def test_unsupported_extension(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"unsupported file type '\.doc'"):
        open_source(write(tmp_path / "x.doc", "hello"))


def test_kind_overrides_the_extension(tmp_path: Path) -> None:
    source = open_source(write(tmp_path / "list.dat", "email,name\na@x.com,Ann\n"), kind="csv")
    assert column(source, "name") == ["Ann"]


def test_other_objects_are_refused() -> None:
    with pytest.raises(SourceError, match="cannot read a dict"):
        open_source({"email": ["a@x.com"]})  # type: ignore[arg-type]

"""Text files in any encoding, as UTF-8 bytes that the fast readers and byte offsets work on.

pyarrow's CSV reader is fastest on UTF-8 and the record-level repairs of ``delimited.py`` need
byte offsets that mean something, so a text input is settled here once, when it is opened:

* a byte-order mark decides (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE); else the ``encoding`` asked
  for; else detection on the first MiB: UTF-8 when it decodes (and has no NUL bytes), otherwise
  charset-normalizer's guess, read as cp1252 when that guess is any Latin-script single-byte code
  page and cp1252 decodes the sample (charset-normalizer cannot tell cp1250 from cp1252 on a few
  accented names, and Western European lists are by far the common case);
* the whole file is then decoded once: UTF-8 input is only checked (and read in place), anything
  else is transcoded to a temporary UTF-8 file removed with its :class:`Utf8Text`;
* bytes that do not decode anywhere in the file stop the reading up front, with the file, the
  encoding and the byte offset, rather than half-way through a verification run.
"""

import codecs
import contextlib
import os
import tempfile
import weakref
from pathlib import Path

from listhygiene.pipeline.sources.base import SourceError

__all__ = ["Utf8Text", "open_text"]

_SAMPLE = 1 << 20
_BLOCK = 8 << 20
_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_LATIN_GUESSES = (
    "ascii cp437 cp850 cp858 cp863 cp865 cp775 cp1250 cp1252 cp1254 cp1257 cp1258 hp_roman8 "
    "iso8859_1 iso8859_2 iso8859_3 iso8859_4 iso8859_9 iso8859_10 iso8859_13 iso8859_14 "
    "iso8859_15 iso8859_16 latin_1 mac_croatian mac_iceland mac_latin2 mac_roman mac_turkish"
)


class Utf8Text:
    """A text input as UTF-8 bytes: ``path`` from byte ``start`` on (after any byte-order mark)."""

    def __init__(self, path: Path, start: int, encoding: str, *, temporary: bool) -> None:
        self.path = path
        self.start = start
        #: The input's own encoding, as reported in ``SourceInfo.encoding``.
        self.encoding = encoding
        if temporary:
            weakref.finalize(self, _remove, path)

    def read_head(self, size: int = _SAMPLE) -> bytes:
        """The first ``size`` bytes of text (fewer at the end of the file)."""
        with self.path.open("rb") as file:
            file.seek(self.start)
            return file.read(size)


def open_text(path: Path, encoding: str | None) -> Utf8Text:
    """Settle a text file's encoding and check that all of it decodes; see the module docstring."""
    with path.open("rb") as file:
        head = file.read(_SAMPLE)
    bom = next(((mark, name) for mark, name in _BOMS if head.startswith(mark)), None)
    if bom is not None:
        mark, name = bom
        codec = "utf-8" if name == "utf-8-sig" else name
        return _settle(path, len(mark), codec, name, detected=True)
    if encoding is not None:
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            raise SourceError(f"{path}: unknown encoding {encoding!r}") from None
        codec = "utf-8" if codec == "utf-8-sig" else codec
        return _settle(path, 0, codec, codec, detected=False)
    codec = detect(head)
    return _settle(path, 0, codec, codec, detected=True)


def detect(sample: bytes) -> str:
    """The encoding of a file's first bytes (without a byte-order mark)."""
    if b"\x00" not in sample and _decodes(sample, "utf-8"):
        return "utf-8"
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best()
    guess = codecs.lookup(best.encoding).name if best is not None else None
    if (guess is None or guess in _latin()) and _decodes(sample, "cp1252"):
        return "cp1252"
    return guess or "latin-1"


def _settle(path: Path, start: int, codec: str, reported: str, *, detected: bool) -> Utf8Text:
    if codec == "utf-8":
        _check_utf8(path, start, reported, detected=detected)
        return Utf8Text(path, start, reported, temporary=False)
    handle, name = tempfile.mkstemp(prefix="listhygiene-", suffix=".utf8.txt")
    target = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            _decode_all(path, start, codec, reported, detected=detected, out=out)
    except BaseException:
        _remove(target)
        raise
    return Utf8Text(target, 0, reported, temporary=True)


def _check_utf8(path: Path, start: int, reported: str, *, detected: bool) -> None:
    """Check that the file from ``start`` is UTF-8, block by block, with Arrow's validation
    (some 25 times quicker than Python's decoder, which is asked only where a block fails, to
    say where: docs/pipeline.md, "Speed")."""
    offset = start  # of data[0] in the file
    carry = b""  # a character the previous block's end cut in two
    with path.open("rb") as file:
        file.seek(start)
        while True:
            block = file.read(_BLOCK)
            final = not block
            data = carry + block if carry else block
            cut = len(data) if final or data.isascii() else _whole_characters(data)
            if not _valid_utf8(data, cut):
                try:
                    codecs.decode(data[:cut], "utf-8", "strict")
                except UnicodeDecodeError as exc:
                    raise _undecodable(path, reported, offset + exc.start, exc, detected) from None
            offset += cut
            carry = data[cut:]
            if final:
                return


def _whole_characters(data: bytes) -> int:
    """The length of ``data`` without a multi-byte character its end cuts short."""
    lead = len(data) - 1
    while lead >= max(0, len(data) - 4) and data[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead < 0 or lead < len(data) - 4:
        return len(data)  # no lead byte where one should be: not UTF-8, said when checked
    first = data[lead]
    needed = 1 if first < 0xC0 else 2 if first < 0xE0 else 3 if first < 0xF0 else 4
    return lead if lead + needed > len(data) else len(data)


def _valid_utf8(data: bytes, end: int) -> bool:
    """Whether ``data[:end]`` is UTF-8 (Arrow's validation of one string value)."""
    import pyarrow as pa

    if data.isascii():
        return True
    text = pa.Array.from_buffers(
        pa.string(),
        1,
        [None, pa.array([0, end], pa.int32()).buffers()[1], pa.py_buffer(data)],
    )
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _decode_all(
    path: Path, start: int, codec: str, reported: str, *, detected: bool, out: object
) -> None:
    """Decode the file from ``start``; write it as UTF-8 to ``out`` unless that is None."""
    decoder = codecs.getincrementaldecoder(codec)(errors="strict")
    offset = start
    with path.open("rb") as file:
        file.seek(start)
        while True:
            block = file.read(_BLOCK)
            final = not block
            if out is None and block.isascii() and not decoder.getstate()[0]:
                offset += len(block)  # ASCII is UTF-8: nothing to decode
                if final:
                    return
                continue
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block, final=final)
            except UnicodeDecodeError as exc:
                at = offset - pending + exc.start
                raise _undecodable(path, reported, at, exc, detected) from None
            if out is not None:
                out.write(text.encode("utf-8"))  # type: ignore[attr-defined]
            offset += len(block)
            if final:
                return


def _undecodable(
    path: Path, encoding: str, offset: int, exc: UnicodeDecodeError, detected: bool
) -> SourceError:
    bad = exc.object[exc.start : exc.start + 1]
    what = f"byte 0x{bad.hex()}" if bad else "a truncated character"
    why = "the encoding detected from its start" if detected else "the encoding asked for"
    return SourceError(
        f"{path} is not valid {encoding} ({why}): {what} at byte offset {offset} does not "
        "decode; pass the file's encoding explicitly, e.g. --encoding cp1252 "
        "(encoding='cp1252')"
    )


def _decodes(data: bytes, codec: str) -> bool:
    try:
        codecs.getincrementaldecoder(codec)(errors="strict").decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


_LATIN: set[str] = set()


def _latin() -> set[str]:
    if not _LATIN:
        _LATIN.update(codecs.lookup(name).name for name in _LATIN_GUESSES.split())
    return _LATIN


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

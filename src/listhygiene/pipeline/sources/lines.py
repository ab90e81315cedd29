"""Whole lines of a text file, chunk by chunk: what the CSV, TXT and JSON-lines readers share.

A chunk ends at a line end (outside quotes when it can), so that each chunk parses on its own;
no line may be longer than :data:`~listhygiene.pipeline.sources.base.MAX_LINE_BYTES`, checked
vectorised with numpy rather than line by line.
"""

from typing import BinaryIO

import numpy as np

from listhygiene.pipeline.sources.base import MAX_LINE_BYTES, LineTooLong, line_too_long
from listhygiene.pipeline.sources.text import Utf8Text

__all__ = ["HEAD", "check_first_line", "has_content", "next_chunk", "whole_lines"]

#: Bytes read from a text file's start to find its header or first lines.
HEAD = 1 << 20


def whole_lines(data: bytes, *, at_end: bool) -> bytes:
    """The head of a file up to its last line end, unless it is the whole file."""
    if at_end:
        return data
    cut = _last_line_end(data, len(data))
    return data[:cut] if cut else data


def check_first_line(head: bytes, size: int, path: object, start: int) -> None:
    """Refuse a file whose head (``size`` bytes asked for) holds no line end: its first line is
    longer than any line may be."""
    if len(head) >= min(size, MAX_LINE_BYTES) and not _last_line_end(head, len(head)):
        raise line_too_long(path, start)


def has_content(text: Utf8Text) -> bool:
    """Whether the text holds anything but ASCII whitespace."""
    with text.path.open("rb") as file:
        file.seek(text.start)
        while block := file.read(HEAD):
            if block.strip():
                return True
    return False


def next_chunk(file: BinaryIO, position: int, size: int, *, quotes: bool) -> bytes:
    """Whole lines from ``position``: about ``size`` bytes, ending outside quotes if it can.

    :class:`LineTooLong` when a line is longer than ``MAX_LINE_BYTES``; a line longer than the
    chunk is read on only up to that limit.
    """
    file.seek(position)
    data = file.read(size)
    if len(data) < size:
        _check_lines(data, position)
        return data  # the rest of the file
    cut = _last_line_end(data, len(data))
    if not cut:  # one line longer than the chunk: take all of it, up to the limit
        pieces, length = [data], len(data)
        while not cut:
            if length > MAX_LINE_BYTES:
                raise LineTooLong(position)
            more = file.read(size)
            if not more:
                break
            pieces.append(more)
            length += len(more)
            cut = _last_line_end(more, len(more))
        data = b"".join(pieces)
        cut = _last_line_end(data, len(data))
        if not cut:
            _check_lines(data, position)
            return data
    if quotes:
        count = int(np.count_nonzero(np.frombuffer(data, np.uint8, cut) == ord('"')))
        end = cut
        while count % 2 and end:
            previous = _last_line_end(data, end - 1)
            count -= data.count(b'"', previous, end)
            end = previous
        cut = end or cut
    chunk = data[:cut]
    _check_lines(chunk, position)
    return chunk


def _check_lines(chunk: bytes, position: int) -> None:
    """:class:`LineTooLong` when a line of the chunk (at ``position`` in the file) is too long."""
    if len(chunk) <= MAX_LINE_BYTES:
        return
    # A line longer than the limit holds a whole block of half the limit: when every block
    # holds a line end (found at once in a table's short lines), no line is too long.
    half = MAX_LINE_BYTES // 2
    for start in range(0, len(chunk), half):
        if (
            chunk.find(b"\n", start, start + half) < 0
            and chunk.find(b"\r", start, start + half) < 0
        ):
            break
    else:
        return
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero((data == 0x0A) | (data == 0x0D))
    bounds = np.concatenate(([-1], ends, [len(chunk)]))
    lengths = np.diff(bounds) - 1
    longest = int(np.argmax(lengths))
    if lengths[longest] > MAX_LINE_BYTES:
        raise LineTooLong(position + int(bounds[longest]) + 1)


def _last_line_end(data: bytes, end: int) -> int:
    """The offset just after the last line end in ``data[:end]``; 0 when there is none."""
    at = data.rfind(b"\n", 0, end)
    if at < 0:
        at = data.rfind(b"\r", 0, end)
    return at + 1

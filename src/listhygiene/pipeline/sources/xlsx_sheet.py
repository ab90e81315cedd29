"""The first worksheet of an XLSX package, streamed from its XML as rows of text.

An XLSX is a zip of XML parts (ECMA-376): ``[Content_Types].xml`` names the workbook part, the
workbook lists its sheets and its relationships part says where each one is, the shared-strings
part holds the text cells refer to, and ``xl/styles.xml`` says which number formats are dates.
This module reads them as openpyxl's read-only, ``data_only`` reader does, and gives every cell
the text ``sources.excel`` gave when it read through openpyxl (``batches.as_text`` of openpyxl's
value: an integral number without ``.0``, dates in ISO 8601, ``TRUE``/``FALSE``, an error cell
its text such as ``#N/A``), several times faster and in bounded memory: a part is read
:data:`CHUNK` inflated bytes at a time, and only the rows of one chunk are held.

**How.** Inside ``sheetData`` of a well-formed sheet every ``<`` starts a tag (text and
attribute values cannot hold one), so regular expressions can take the rows apart exactly: they
match whole cells of the shapes spreadsheet writers emit (``<c r="B2" s="1" t="s"><v>7</v></c>``,
inline strings, a formula before its cached value) in a chunk that holds no comment, CDATA,
processing instruction or DTD (``<!``, ``<?``). What they read is checked as it is read: the
attributes well-formed (names, quotes, no ``<``, declared prefixes, no namespace declaration),
every ``&`` a reference to a character XML allows, no control character XML forbids in the
bytes; so it is well-formed by construction (the text between tags, which openpyxl ignores too,
is not looked at). expat parses the part before ``sheetData`` and the part after it; a row of
another shape; the rest of a sheet from a chunk with ``<!`` or ``<?`` (expat continues the
document from the root's namespace declarations); and all of a sheet not in UTF-8 or whose root
is not the unprefixed ``worksheet`` of the main namespace: slower, the same rows. The shared
strings are read the same way. Every expat parser refuses a document type declaration (a DTD:
entity expansion, "billion laughs", external entities), which no OOXML part has.

The rows are the ``row`` elements of the sheet's ``sheetData``, as openpyxl reads them: a row
without ``r`` follows the one before it, a row numbered at or below one already read is skipped,
a row's cells are its child elements placed by their ``r`` (or after the cell before), its width
is its last cell's column, and a cell that is empty or the empty string is None; a row with no
text is not a row. (openpyxl also read ``row`` elements outside ``sheetData``, where the schema
allows none.)
"""

import codecs
import datetime as dt
import posixpath
import re
import zipfile
import zlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

from listhygiene.pipeline.sources.batches import as_text

__all__ = [
    "CHUNK",
    "Package",
    "SheetRows",
    "TooManyStrings",
    "XlsxError",
    "XlsxRefused",
    "open_package",
]

#: Inflated bytes of a part read (and parsed) at a time.
CHUNK = 1 << 20
#: What a part may hold before its rows (or strings) and still be read by regular expressions.
_PROLOG_MAX = 8 << 20

MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_CONTENT_TYPES = "[Content_Types].xml"
_STYLES = "xl/styles.xml"
_WORKBOOK_TYPES = [  # openpyxl's order (reader.excel._find_workbook_part)
    "application/vnd.ms-excel.template.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.template.main+xml",
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
]
_SHARED_STRINGS_TYPE = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
)

_SHEET_DATA = f"{MAIN} sheetData"
_ROW = f"{MAIN} row"
_V = f"{MAIN} v"
_IS = f"{MAIN} is"
_SI = f"{MAIN} si"


class XlsxError(ValueError):
    """The package is not a workbook this reader can read (the message names no file)."""


class XlsxRefused(XlsxError):
    """A part this reader refuses to parse (one with a DTD)."""


class TooManyStrings(Exception):
    """The shared-strings part holds more strings than allowed (``args[0]``)."""


# --- XML ---------------------------------------------------------------------------------------


def _expat(part: str, namespaces: bool = True) -> Any:
    """An expat parser that refuses a document type declaration, and so any entity."""
    parser = expat.ParserCreate(namespace_separator=" ") if namespaces else expat.ParserCreate()

    def refuse(*_: object) -> None:
        raise XlsxRefused(
            f"its part {part} has a document type declaration (DTD), which no workbook needs"
        )

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    return parser


def _parse(parser: Any, part: str, data: bytes | str, final: bool = False) -> None:
    try:
        parser.Parse(data, final)
    except expat.ExpatError as exc:  # no line: expat may be reading a part from its middle
        raise XlsxError(f"{part}: {expat.errors.messages[exc.code]}") from None


def _chunks(archive: zipfile.ZipFile, part: str) -> Generator[bytes, None, None]:
    """The inflated bytes of ``part``, a chunk at a time; a part missing or damaged is an
    :class:`XlsxError`."""
    try:
        with archive.open(part) as member:
            while chunk := member.read(CHUNK):
                yield chunk
    except KeyError:
        raise XlsxError(f"there is no item named {part!r} in the archive") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError) as exc:
        raise XlsxError(f"{part}: {exc}") from None


@dataclass
class _Element:
    local: str
    attrs: dict[str, str]
    parent: str


def _elements(archive: zipfile.ZipFile, part: str) -> list[_Element]:
    """Every element of a small part (content types, workbook, relationships, styles), by local
    name, as openpyxl reads these parts."""
    found: list[_Element] = []
    stack = [""]
    parser = _expat(part)

    def start(name: str, attrs: dict[str, str]) -> None:
        local = name.rsplit(" ", 1)[-1]
        found.append(_Element(local, attrs, stack[-1]))
        stack.append(local)

    def end(_: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    for chunk in _chunks(archive, part):
        _parse(parser, part, chunk)
    _parse(parser, part, b"", True)
    return found


_S = "[ \t\r\n]"
_NAME = "[A-Za-z_][-A-Za-z0-9._]*"
#: An attribute, leniently (to find tags) and strictly (well-formed: a name, a quoted value
#: without ``<``; groups: the name, the value in double or in single quotes).
_ATTR = rf"""{_S}+[^ \t\r\n=/>]+{_S}*={_S}*(?:"[^"]*"|'[^']*')"""
_STRICT_ATTR = rf"""{_S}+((?:{_NAME}:)?{_NAME}){_S}*={_S}*(?:"([^"<]*)"|'([^'<]*)')"""
_ATTR_ITEM = re.compile(_STRICT_ATTR)
_ATTRIBUTES = re.compile(
    rf"""(?:{_S}+(?:{_NAME}:)?{_NAME}{_S}*={_S}*(?:"[^"<]*"|'[^'<]*'))*{_S}*"""
)
_DECLARATION = re.compile(rf"^(?:\ufeff)?<\?xml{_S}[^?]*\?>")
_ENCODING = re.compile(
    rb"""^(?:\xef\xbb\xbf)?<\?xml[^>]*?encoding[ \t\r\n]*=[ \t\r\n]*["']([^"']*)"""
)
#: A reference, or a bare ``&`` (no group: not well-formed).
_REFERENCE = re.compile(r"&(?:#x([0-9a-fA-F]+);|#([0-9]+);|(lt|gt|amp|quot|apos);)?")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
#: The control characters XML 1.0 forbids, as bytes.
_CONTROLS = bytes(set(range(32)) - {9, 10, 13})
_ATTRIBUTE_SPACES = str.maketrans("\t\n\r", "   ")


def _reference(match: re.Match[str]) -> str:
    hexadecimal, decimal, name = match.groups()
    if name:
        return _NAMED[name]
    if hexadecimal or decimal:
        code = int(hexadecimal, 16) if hexadecimal else int(decimal)
        if _character(code):
            return chr(code)
        raise XlsxError(f"reference to invalid character number ({match.group(0)})")
    raise XlsxError("not well-formed (an & that is not a reference)")


def _xml_text(raw: str) -> str:
    """Character data as an XML parser gives it: line ends normalised, then references replaced
    (a DTD is refused, so only the predefined entities and character references exist; an
    ``&`` that is none of them is an :class:`XlsxError`)."""
    if "\r" in raw:
        raw = raw.replace("\r\n", "\n").replace("\r", "\n")
    return _REFERENCE.sub(_reference, raw) if "&" in raw else raw


def _attribute_text(raw: str) -> str:
    """An attribute value as an XML parser gives it (white space characters become spaces)."""
    raw = raw.replace("\r\n", " ").translate(_ATTRIBUTE_SPACES)
    return _REFERENCE.sub(_reference, raw) if "&" in raw else raw


def _character(code: int) -> bool:
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


def _plain(region: str) -> bool:
    """Whether ``region`` may be read by regular expressions: no comment, CDATA, processing
    instruction or document type (``<!``, ``<?``; a rare ``!`` or ``?`` is looked for first, the
    faster search). The ``&`` of what is read are checked as they are replaced, the control
    characters XML forbids in the bytes, and a namespace declaration is an attribute the fast
    path does not read."""
    return not (("!" in region and "<!" in region) or ("?" in region and "<?" in region))


def _utf8(first: bytes) -> bool:
    """Whether a part is UTF-8 (no UTF-16 byte-order mark, no other encoding declared)."""
    if first.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    declared = _ENCODING.match(first)
    return declared is None or declared.group(1).lower() in (b"utf-8", b"utf8")


def _root(text: str, tag: str) -> tuple[re.Match[str], str] | bool | None:
    """The root element's start tag when it is ``tag``, unprefixed, with the main namespace as
    default and nothing but an XML declaration and white space before it; with the root's
    namespace declarations as written. False when the root is not of that form; None when the
    text does not hold the whole start tag yet."""
    declaration = _DECLARATION.match(text)
    position = declaration.end() if declaration else int(text.startswith("\ufeff"))
    if ">" not in text[position:]:
        return None
    start = re.compile(rf"{_S}*<{tag}((?:{_ATTR})*){_S}*(/?)>").match(text, position)
    if start is None:
        return False
    declarations = []
    default = None
    for item in re.finditer(_STRICT_ATTR, start.group(1)):
        name, double, single = item.groups()
        if name == "xmlns":
            default = _attribute_text(single if double is None else double)
        if name == "xmlns" or name.startswith("xmlns:"):
            declarations.append(item.group(0))
    if default != MAIN:
        return False
    return start, "".join(declarations)


# --- the package -----------------------------------------------------------------------------


@dataclass
class Package:
    """What reading the first worksheet needs: its part, the shared strings and the styles."""

    sheet: str | None
    strings: list[str] = field(default_factory=list)
    date_styles: frozenset[int] = frozenset()
    timedelta_styles: frozenset[int] = frozenset()
    epoch: dt.datetime = dt.datetime(1899, 12, 30)


def open_package(archive: zipfile.ZipFile, max_strings: int | None = None) -> Package:
    """The first worksheet's part of ``archive`` (None when there is none) and what its cells
    refer to, found as openpyxl finds them; more than ``max_strings`` shared strings raise
    :class:`TooManyStrings`."""
    manifest = _elements(archive, _CONTENT_TYPES)
    overrides = [e.attrs for e in manifest if e.local == "Override"]
    strings_part = next(
        (o.get("PartName", "") for o in overrides if o.get("ContentType") == _SHARED_STRINGS_TYPE),
        None,
    )
    strings = _shared_strings(archive, strings_part[1:], max_strings) if strings_part else []
    workbook = _workbook_part(manifest, overrides)
    elements = _elements(archive, workbook)
    package = Package(sheet=None, strings=strings)
    for element in elements:
        if element.local == "workbookPr":
            flag = element.attrs.get("date1904")
            if flag is not None and flag not in ("false", "f", "0") and flag:
                package.epoch = dt.datetime(1904, 1, 1)
    package.sheet = _first_worksheet(archive, workbook, elements)
    if _STYLES in archive.NameToInfo:
        package.date_styles, package.timedelta_styles = _date_styles(_elements(archive, _STYLES))
    return package


def _workbook_part(manifest: list[_Element], overrides: list[dict[str, str]]) -> str:
    for kind in _WORKBOOK_TYPES:
        for override in overrides:
            if override.get("ContentType") == kind:
                return override.get("PartName", "")[1:]
    defaults = {e.attrs.get("ContentType") for e in manifest if e.local == "Default"}
    if defaults & set(_WORKBOOK_TYPES):
        return "xl/workbook.xml"
    raise XlsxError("File contains no valid workbook part")


def _first_worksheet(
    archive: zipfile.ZipFile, workbook: str, elements: list[_Element]
) -> str | None:
    sheets = [e.attrs for e in elements if e.local == "sheet" and e.parent == "sheets"]
    relations: dict[str, dict[str, str]] | None = None
    for sheet in sheets:
        ident = sheet.get(f"{_REL} id")
        if not ident:
            continue
        if relations is None:
            folder, name = posixpath.split(workbook)
            relations = _relations(archive, posixpath.join(folder, "_rels", f"{name}.rels"))
        if ident not in relations:
            raise XlsxError(f"Unknown relationship: {ident}")
        relation = relations[ident]
        if relation["target"] not in archive.NameToInfo:
            continue
        if "chartsheet" in relation.get("Type", ""):
            continue
        return relation["target"]
    return None


def _relations(archive: zipfile.ZipFile, part: str) -> dict[str, dict[str, str]]:
    """The relationships of a part by id, targets made paths in the zip (openpyxl's
    ``get_dependents``)."""
    parent = posixpath.split(posixpath.dirname(part))[0]
    found: dict[str, dict[str, str]] = {}
    for element in _elements(archive, part):
        if element.local != "Relationship":
            continue
        relation = dict(element.attrs)
        target = relation.get("Target", "")
        if relation.get("TargetMode") != "External":
            if target.startswith("/"):
                target = target[1:]
            else:
                target = posixpath.normpath(posixpath.join(parent, target))
        relation["target"] = target
        found[relation.get("Id", "")] = relation
    return found


# openpyxl.styles.numbers: the built-in formats that are dates, and how a format code is one.
_BUILTIN_DATES = {
    14: "mm-dd-yy",
    15: "d-mmm-yy",
    16: "d-mmm",
    17: "mmm-yy",
    18: "h:mm AM/PM",
    19: "h:mm:ss AM/PM",
    20: "h:mm",
    21: "h:mm:ss",
    22: "m/d/yy h:mm",
    45: "mm:ss",
    46: "[h]:mm:ss",
    47: "mmss.0",
}
_STRIP = re.compile(r'".*?"|\[(?!hh?\]|mm?\]|ss?\])[^\]]*\]')
_DATE_TOKEN = re.compile(r"(?<![_\\])[dmhysDMHYS]")
_TIMEDELTA = re.compile(r"\[hh?\](:mm(:ss(\.0*)?)?)?|\[mm?\](:ss(\.0*)?)?|\[ss?\](\.0*)?", re.I)


def is_date_format(code: str | None) -> bool:
    """openpyxl's ``is_date_format``: date or time tokens in the first section, outside quotes
    and brackets (but for elapsed ``[h]``, ``[m]``, ``[s]``)."""
    if code is None:
        return False
    return _DATE_TOKEN.search(_STRIP.sub("", code.split(";")[0])) is not None


def is_timedelta_format(code: str | None) -> bool:
    """openpyxl's ``is_timedelta_format``: elapsed hours, minutes or seconds."""
    if code is None:
        return False
    return _TIMEDELTA.search(code.split(";")[0]) is not None


def _date_styles(elements: list[_Element]) -> tuple[frozenset[int], frozenset[int]]:
    """The cell styles (indexes of ``cellXfs``) whose number format is a date, and those of them
    that are elapsed times (openpyxl's ``Stylesheet._normalise_numbers``)."""
    try:
        custom = {
            int(e.attrs["numFmtId"]): e.attrs.get("formatCode", "")
            for e in elements
            if e.local == "numFmt" and e.parent == "numFmts" and "numFmtId" in e.attrs
        }
        styles = [
            int(e.attrs.get("numFmtId", 0))
            for e in elements
            if e.local == "xf" and e.parent == "cellXfs"
        ]
    except ValueError as exc:
        raise XlsxError(f"{_STYLES}: {exc}") from None
    dates, timedeltas = set(), set()
    for index, number_format in enumerate(styles):
        if number_format in custom:
            code: str | None = custom[number_format]
        else:
            code = _BUILTIN_DATES.get(number_format)
        if is_date_format(code):
            dates.add(index)
        if is_timedelta_format(code):
            timedeltas.add(index)
    return frozenset(dates), frozenset(timedeltas)


# --- text of runs (shared strings, inline strings) -------------------------------------------


class _Text:
    """openpyxl's ``Text.from_tree(node).content`` as expat events: the text of the node's
    last ``t`` child, then of each ``r`` run's last ``t`` (phonetic runs left out); children are
    matched by local name, and an element's text is what comes before its first child."""

    def __init__(self) -> None:
        self.plain: list[str] | None = None
        self.runs: list[list[str] | None] = []
        self.in_run = False  # the child being read is a run

    def start(self, local: str, depth: int) -> list[str] | None:
        """A descendant at ``depth`` (1: a child) began; the list its text goes to, if any."""
        if depth == 1:
            if local == "t":
                self.plain = []
                return self.plain
            if local == "r":
                self.runs.append(None)
        elif depth == 2 and local == "t" and self.in_run:
            run: list[str] = []
            self.runs[-1] = run
            return run
        return None

    def content(self) -> str:
        pieces = [] if self.plain is None else ["".join(self.plain)]
        pieces.extend("".join(run) for run in self.runs if run is not None)
        return "".join(pieces)


class _Events:
    """Depth-tracking expat handlers; subclasses see starts and ends with their depth."""

    def __init__(self, parser: Any) -> None:
        self.depth = 0
        self.text: list[str] | None = None  # where character data goes
        parser.buffer_text = True
        parser.buffer_size = 1 << 16
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._data

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        self.text = None  # an element's text is what precedes its first child
        self.started(name, attrs, self.depth)

    def _end(self, name: str) -> None:
        self.text = None
        self.ended(name, self.depth)
        self.depth -= 1

    def _data(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)

    def started(self, name: str, attrs: dict[str, str], depth: int) -> None:
        raise NotImplementedError

    def ended(self, name: str, depth: int) -> None:
        raise NotImplementedError


# --- the slow paths: expat events ------------------------------------------------------------


class _StringEvents(_Events):
    """The shared strings by expat events: every ``si``'s text, ``x005F_`` removed as openpyxl's
    ``read_string_table`` does."""

    def __init__(self, parser: Any, strings: list[str], most: int | None) -> None:
        super().__init__(parser)
        self.strings = strings
        self.most = most
        self.item: _Text | None = None
        self.item_depth = 0

    def started(self, name: str, attrs: dict[str, str], depth: int) -> None:
        item = self.item
        if item is None:
            if name == _SI:
                self.item, self.item_depth = _Text(), depth
            return
        relative = depth - self.item_depth
        local = name.rsplit(" ", 1)[-1]
        if relative == 1:
            item.in_run = local == "r"
        if relative <= 2:
            self.text = item.start(local, relative)

    def ended(self, name: str, depth: int) -> None:
        item = self.item
        if item is None:
            return
        if depth == self.item_depth:
            self.strings.append(_string(item.content()))
            self.item = None
            if self.most is not None and len(self.strings) > self.most:
                raise TooManyStrings(self.most)
        elif depth == self.item_depth + 1:
            item.in_run = False


def _string(text: str) -> str:
    return text.replace("x005F_", "") if "x005F_" in text else text


# --- cells -----------------------------------------------------------------------------------


def _cast_number(value: str) -> int | float:
    """openpyxl's ``_cast_number``."""
    if "." in value or "E" in value or "e" in value:
        return float(value)
    return int(value)


def _number_text(text: str) -> str:
    """``as_text(_cast_number(text))``."""
    if "." in text or "E" in text or "e" in text:
        number = float(text)
        return str(int(number)) if number.is_integer() else str(number)
    return str(int(text))


_WINDOWS_EPOCH = dt.datetime(1899, 12, 30)
_LAST_DAY = dt.date.max.toordinal()


def _from_excel(value: float, epoch: dt.datetime, timedelta: bool) -> Any:
    """openpyxl's ``from_excel``: a serial number as a datetime, a time or a timedelta."""
    if timedelta:
        delta = dt.timedelta(days=value)
        if delta.microseconds:  # to the millisecond
            delta = dt.timedelta(
                seconds=delta.total_seconds() // 1, microseconds=round(delta.microseconds, -3)
            )
        return delta
    day, fraction = divmod(value, 1)
    diff = dt.timedelta(0, 0, 0, round(fraction * 86400 * 1000))  # rounded as openpyxl does
    if 0 <= value < 1 and diff.days == 0:
        minutes, seconds = divmod(diff.seconds, 60)
        hours, minutes = divmod(minutes, 60)
        return dt.time(hours, minutes, seconds, diff.microseconds)
    if 0 < value < 60 and epoch == _WINDOWS_EPOCH:
        day += 1
    return epoch + dt.timedelta(int(day)) + diff


_ISO = re.compile(
    r"(?P<date>(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2}))?T?"
    r"(?P<time>(?P<hour>\d{2}):(?P<minute>\d{2})(:(?P<second>\d{2})(?P<microsecond>\.\d{1,3})?)?)?Z?"
)
_ISO_DURATION = re.compile(
    r"PT((?P<hours>\d+)H)?((?P<minutes>\d+)M)?((?P<seconds>\d+(\.\d{1,3})?)S)?"
)


def _from_iso8601(text: str) -> Any:
    """openpyxl's ``from_ISO8601`` (a cell of type ``d``)."""
    match = _ISO.match(text)
    if match and any(match.groups()):
        parts: dict[str, Any] = match.groupdict(0)
        for key in ("year", "month", "day", "hour", "minute", "second"):
            if parts[key]:
                parts[key] = int(parts[key])
        if parts["microsecond"]:
            parts["microsecond"] = int(float(parts["microsecond"]) * 1_000_000)
        if not parts["date"]:
            return dt.time(parts["hour"], parts["minute"], parts["second"], parts["microsecond"])
        if not parts["time"]:
            return dt.date(parts["year"], parts["month"], parts["day"])
        del parts["time"], parts["date"]
        return dt.datetime(**parts)
    match = _ISO_DURATION.match(text)
    if match and any(match.groups()):
        return dt.timedelta(
            **{key: float(value) for key, value in match.groupdict(0).items() if value}
        )
    raise ValueError(f"Invalid datetime value {text}")


_LETTERS = {letter: index for index, letter in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 1)}


def _column_index(letters: str) -> int:
    """openpyxl's ``column_index_from_string``."""
    if len(letters) > 3:
        raise ValueError(f"'{letters}' is not a valid column name")
    index = 0
    for letter, power in zip(reversed(letters.upper()), (1, 26, 676), strict=False):
        if letter not in _LETTERS:
            raise ValueError(f"'{letters}' is not a valid column name")
        index += _LETTERS[letter] * power
    if not 0 < index < 18279:
        raise ValueError(f"'{letters}' is not a valid column name")
    return index


def _column(coordinate: str) -> int:
    """The column of a cell reference, as openpyxl's ``coordinate_to_tuple`` reads it."""
    position = 0
    for position, character in enumerate(coordinate):  # noqa: B007
        if character in "0123456789":
            break
    int(coordinate[position:])
    return _column_index(coordinate[:position])


class _Cells:
    """What both ways of reading a sheet share: what cells refer to, how their values become
    text, and openpyxl's row counters."""

    def __init__(self, package: Package) -> None:
        self.strings = package.strings
        self.dates = package.date_styles
        self.timedeltas = package.timedelta_styles
        self.epoch = package.epoch
        self.row_counter = 0  # the last row's number
        self.next_row = 1  # a row numbered below this one is not read
        self.style_kinds: dict[str, int] = {}  # a style's text: 0 a number, 1 a date, 2 elapsed
        self.epoch_day = self.epoch.toordinal()
        self.windows = self.epoch == _WINDOWS_EPOCH
        self.days: dict[int, str] = {}  # a day's ordinal: its ISO text
        self.times: dict[int, str] = {}  # a second of the day: its ISO text

    def date_text(self, value: str, elapsed: bool) -> str:
        """The text of a number styled as a date (``elapsed``: a duration): ``as_text`` of
        openpyxl's ``from_excel`` (``#VALUE!`` where it fails), a day after the epoch by
        integers and cached texts."""
        number = _cast_number(value)
        if elapsed or 0 <= number < 1:  # a duration, or a time of day
            try:
                return as_text(_from_excel(number, self.epoch, elapsed))
            except (OverflowError, ValueError):
                return "#VALUE!"
        try:
            day, fraction = divmod(number, 1)
            milliseconds = round(fraction * 86400 * 1000)  # rounded as openpyxl does
            days = int(day)
        except (OverflowError, ValueError):  # inf, nan
            return "#VALUE!"
        if 0 < number < 60 and self.windows:
            days += 1
        ordinal = self.epoch_day + days  # epoch + timedelta(days) must be a date
        carry, milliseconds = divmod(milliseconds, 86_400_000)
        if not 1 <= ordinal <= _LAST_DAY or ordinal + carry > _LAST_DAY:
            return "#VALUE!"
        ordinal += carry
        text = self.days.get(ordinal)
        if text is None:
            if len(self.days) > 100_000:
                self.days.clear()
            text = self.days[ordinal] = dt.date.fromordinal(ordinal).isoformat()
        if not milliseconds:  # midnight: the date alone
            return text
        seconds, milliseconds = divmod(milliseconds, 1000)
        time = self.times.get(seconds)
        if time is None:
            minutes, second = divmod(seconds, 60)
            time = self.times[seconds] = f"T{minutes // 60:02d}:{minutes % 60:02d}:{second:02d}"
        if milliseconds:
            return f"{text}{time}.{milliseconds * 1000:06d}"
        return text + time

    def row_number(self, r: str | None) -> int:
        """The number of a row with attribute ``r`` (openpyxl's ``parse_row``)."""
        if r is None:
            self.row_counter += 1
        else:
            try:
                self.row_counter = int(r)
            except ValueError:
                number = float(r)
                if not number.is_integer():
                    raise ValueError(f"{r} is not a valid row number") from None
                self.row_counter = int(number)
        return self.row_counter

    def keeps(self, number: int) -> bool:
        """Whether a row of this number is read (openpyxl's ``_cells_by_row``)."""
        if number >= self.next_row:
            self.next_row = number + 1
            return True
        return False

    def style_kind(self, style: str) -> int:
        kind = self.style_kinds.get(style)
        if kind is None:
            index = int(style)
            kind = 2 if index in self.timedeltas else 1 if index in self.dates else 0
            self.style_kinds[style] = kind
        return kind

    def text(self, kind: str | None, style: str | None, value: str | None) -> str | None:
        """The text of a cell of type ``kind``, style ``style`` and value ``value`` (the text
        of its first ``v``; of its ``is`` for an inline string)."""
        date = self.style_kind(style) if style else 0  # openpyxl reads every cell's style
        if kind == "inlineStr":
            return value or None
        if not value:
            return None
        if kind is None or kind == "n":
            if date:
                return self.date_text(value, date == 2)
            if value.isdigit() and value.isascii() and (value[0] != "0" or len(value) == 1):
                return value
            return _number_text(value)
        if kind == "s":
            return self.strings[int(value)] or None
        if kind == "b":
            return "TRUE" if int(value) else "FALSE"
        if kind == "d":
            return as_text(_from_iso8601(value))
        return value  # str, e (an error: #N/A, #REF!, ...), or a type openpyxl keeps as text

    def row(self, cells: list[tuple[str | None, str | None]]) -> list[str | None]:
        """A row's text from its cells' references and texts: placed by column, as wide as its
        last cell's column, trailing empty cells dropped."""
        column = 0
        placed = []
        for coordinate, text in cells:
            column = _column(coordinate) if coordinate else column + 1
            placed.append((column, text))
        if not placed:
            return []
        width = placed[-1][0]
        row: list[str | None] = [None] * width
        for column, text in placed:
            if column <= width:
                row[column - 1] = text
        while row and row[-1] is None:
            row.pop()
        return row


class _SheetEvents(_Events):
    """A sheet's rows by expat events, appended to ``rows`` (the slow path, exact for any XML)."""

    def __init__(self, parser: Any, cells: _Cells, rows: list[list[str | None]]) -> None:
        super().__init__(parser)
        self.cells = cells
        self.rows = rows
        self.data = 0  # depth of sheetData while in it
        self.finished = False
        self.row_cells: list[tuple[str | None, str | None]] | None = None
        self.number = 0
        self.cell: dict[str, str] = {}
        self.value: list[str] | None = None  # the first v's text
        self.inline: _Text | None = None  # the first is's text
        self.in_inline = False

    def started(self, name: str, attrs: dict[str, str], depth: int) -> None:
        data = self.data
        if not data:
            if name == _SHEET_DATA and not self.finished:
                self.data = depth
            return
        relative = depth - data
        if relative == 1:
            if name == _ROW:
                self.number = self.cells.row_number(attrs.get("r"))
                self.row_cells = []
            else:
                self.row_cells = None
        elif self.row_cells is None:
            return
        elif relative == 2:  # a cell: any child of a row
            self.cell = attrs
            self.value = self.inline = None
        elif relative == 3:
            if name == _V and self.value is None:
                self.value = self.text = []
            elif name == _IS and self.inline is None:
                self.inline, self.in_inline = _Text(), True
        elif self.in_inline and self.inline is not None and relative <= 5:
            local = name.rsplit(" ", 1)[-1]
            if relative == 4:
                self.inline.in_run = local == "r"
            self.text = self.inline.start(local, relative - 3)

    def ended(self, name: str, depth: int) -> None:
        data = self.data
        if not data:
            return
        relative = depth - data
        if relative == 0:
            self.data, self.finished = 0, True
        elif self.row_cells is None:
            return
        elif relative == 3:
            self.in_inline = False
        elif relative == 2:
            cell = self.cell
            kind = cell.get("t", "n")
            if kind == "inlineStr":
                value = None if self.inline is None else self.inline.content()
            else:
                value = None if self.value is None else "".join(self.value)
            self.row_cells.append((cell.get("r"), self.cells.text(kind, cell.get("s"), value)))
        elif relative == 1:
            row = self.cells.row(self.row_cells)
            if self.cells.keeps(self.number) and row:
                self.rows.append(row)
            self.row_cells = None


# --- a part read fast where it can be, by expat where not -----------------------------------


class _Stream:
    """A part whose items (the rows of ``sheetData``, the shared strings) are read by regular
    expressions where the text has the fast form, and by expat (:meth:`events`) from the first
    place it has not: expat then continues the document, from a start tag made of the root's
    namespace declarations. Reading pauses after each chunk (:meth:`read` yields)."""

    #: The root element, the element holding the items ('' when it is the root), how an item
    #: starts, and how the items' end starts.
    root = ""
    container = ""
    item = ""
    end = ""

    def __init__(self, archive: zipfile.ZipFile, part: str) -> None:
        self.archive = archive
        self.part = part
        self.declarations = ""  # the root's namespace declarations, as written
        self.prefixes: frozenset[str] = frozenset({"xml"})  # and the prefixes they bind
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""
        self._prolog: list[bytes] | None = []  # the raw chunks until the items start
        self._slow: Any = None  # expat, once it reads
        self.by_expat = False  # whether expat read items: from the start, or from a chunk on

    def events(self, parser: Any) -> None:
        """Set ``parser``'s handlers to read the items."""
        raise NotImplementedError

    def region(self, text: str) -> int | None:
        """Read the items of ``text`` (whole items, and what lies between them); where expat
        must take over, or None."""
        raise NotImplementedError

    def read(self) -> Generator[None, None, None]:
        chunks = _chunks(self.archive, self.part)
        try:
            for chunk in chunks:
                self._feed(chunk)
                yield
        finally:
            chunks.close()
        if self._slow is None:
            if self._prolog is not None:  # the items never started: let expat look
                self._slow = self._from_scratch(self._prolog)
            else:  # their end never came: expat says why
                self._hand_over(self._buffer)
        _parse(self._slow, self.part, b"", True)
        yield

    def _feed(self, chunk: bytes) -> None:
        if self._slow is not None:
            _parse(self._slow, self.part, chunk)
            return
        prolog = self._prolog
        if prolog is not None:
            prolog.append(chunk)
            if len(prolog) == 1 and not _utf8(chunk):
                self._slow = self._from_scratch(prolog)
                return
        pending = self._decoder.getstate()[0]
        try:
            if len(chunk.translate(None, _CONTROLS)) != len(chunk):
                raise UnicodeDecodeError("utf-8", chunk, 0, 1, "a control character")
            self._buffer += self._decoder.decode(chunk)
        except UnicodeDecodeError:  # not well-formed: expat reports it
            if prolog is not None:
                self._slow = self._from_scratch(prolog)
            else:
                self._hand_over(self._buffer, pending + chunk)
            return
        if prolog is not None:
            start = self._start(self._buffer)
            if start is None:
                if len(self._buffer) > _PROLOG_MAX:
                    self._slow = self._from_scratch(prolog)
                return
            if start < 0:
                self._slow = self._from_scratch(prolog)
                return
            self._buffer, self._prolog = self._buffer[start:], None
        buffer = self._buffer
        end = buffer.find(self.end)
        if end >= 0:
            region, rest = buffer[:end], buffer[end:]
        else:
            cut = max(buffer.rfind(self.item), 0)
            region, rest = buffer[:cut], buffer[cut:]
        stop = self.region(region) if region else None
        if stop is not None:
            self._hand_over(region[stop:] + rest)
        elif end >= 0:  # what follows the items: expat checks it
            self._hand_over(rest, items=False)
        else:
            self._buffer = rest

    def _start(self, text: str) -> int | None:
        """Where the items start in the text read so far (after the start tag of the root, or
        of the container), when what precedes them is of the fast form and well-formed; -1 when
        it is not; None when the text does not tell yet."""
        root = _root(text, self.root)
        if root is None or root is False or root is True:
            return None if root is None else -1
        start, self.declarations = root
        if start.group(2):  # an empty root
            return -1
        self.prefixes = frozenset(
            {"xml"} | {name[6:] for name, _, _ in _ATTR_ITEM.findall(self.declarations)}
        )
        end = start.end()
        closing = f"</{self.root}>"
        if self.container:
            found = re.compile(rf"<{self.container}((?:{_ATTR})*){_S}*(/?)>").search(text, end)
            if found is None:
                return None
            if found.group(2) or "xmlns" in found.group(1):  # empty, or declaring namespaces
                return -1
            end, closing = found.end(), f"</{self.container}>{closing}"
        # the prolog, the root's start tag and what precedes the items: well-formed? (and the
        # container a child of the root: a <sheetData in a comment, or in another element, is
        # not well-formed so closed)
        try:
            _parse(_expat(self.part), self.part, text[:end] + closing, True)
        except XlsxError:
            return -1  # expat, from the start, says why
        return end

    def _opening(self) -> str:
        container = f"<{self.container}>" if self.container else ""
        return f"<{self.root}{self.declarations}>{container}"

    def _from_scratch(self, chunks: list[bytes]) -> Any:
        self.by_expat = True
        parser = _expat(self.part)
        self.events(parser)
        for chunk in chunks:
            _parse(parser, self.part, chunk)
        return parser

    def _hand_over(self, text: str, raw: bytes | None = None, items: bool = True) -> None:
        """Let expat read from ``text`` on (then ``raw``, or the bytes the decoder holds);
        ``items``: there may be items left."""
        self.by_expat = self.by_expat or items
        parser = _expat(self.part)
        self.events(parser)
        _parse(parser, self.part, self._opening())
        data = text.encode() + (self._decoder.getstate()[0] if raw is None else raw)
        _parse(parser, self.part, data)
        self._slow, self._buffer = parser, ""

    def _expat_item(self, text: str) -> None:
        """One item of another shape, read by expat."""
        parser = _expat(self.part)
        self.events(parser)
        container = f"</{self.container}>" if self.container else ""
        _parse(parser, self.part, f"{self._opening()}{text}{container}</{self.root}>", True)


# --- shared strings ----------------------------------------------------------------------------

_SI_FAST = re.compile(
    rf'<si>(?:<t(?: xml:space="preserve")?>([^<]*)</t>)?</si>'
    rf"|(<si(?:{_ATTR})*{_S}*(?:/>|>.*?</si{_S}*>))"
    r"|(<)",
    re.S,
)


class _StringTable(_Stream):
    """The shared strings: ``<si><t>text</t></si>`` by a regular expression, any other item
    by expat."""

    root, item, end = "sst", "<si", "</sst"

    def __init__(self, archive: zipfile.ZipFile, part: str, most: int | None) -> None:
        super().__init__(archive, part)
        self.strings: list[str] = []
        self.most = most

    def events(self, parser: Any) -> None:
        _StringEvents(parser, self.strings, self.most)

    def region(self, text: str) -> int | None:
        if not _plain(text):
            return 0
        strings = self.strings
        mark = len(strings)
        append = strings.append
        for plain, other, bad in _SI_FAST.findall(text):
            if bad:
                del strings[mark:]
                return 0
            if other:
                self._expat_item(other)
            elif "&" in plain or "\r" in plain or "x005F_" in plain:
                append(_string(_xml_text(plain)))
            else:
                append(plain)
        if self.most is not None and len(strings) > self.most:
            raise TooManyStrings(self.most)
        return None

    def read_all(self) -> list[str]:
        for _ in self.read():
            pass
        return self.strings


def _shared_strings(archive: zipfile.ZipFile, part: str, most: int | None) -> list[str]:
    """Every shared string of ``part``; more than ``most`` raise :class:`TooManyStrings`."""
    return _StringTable(archive, part, most).read_all()


# --- the sheet ---------------------------------------------------------------------------------

_ROW_HEAD = re.compile(rf"<row(?:{_ATTR})*{_S}*(/?)>")
_ROW_TAIL = re.compile(rf"</row{_S}*>")
#: The tokens of rows of the shapes writers emit: a cell (its column letters when its reference
#: comes first; its other attributes, a group always matched; the text of its ``v``, or of its
#: inline string), a row's start (after the end of the row before, ``/``, or not; its number
#: when it comes first; its other attributes, always matched; ``/`` when it is empty), a row's
#: end (``/``), and any other ``<`` (then the rows are read one at a time, and those not of
#: these shapes by expat).
_TOKEN = re.compile(
    r'<c(?: r="([A-Z]+)[0-9]+")?([^>/]*)(?:/>|>'
    r'(?:<f(?: t="shared"(?: ref="[A-Z0-9:]+")? si="[0-9]+"| t="array" ref="[A-Z0-9:]+")?'
    r"(?:/>|>[^<]*</f>))?"
    r'(?:<v>([^<]*)</v>|<is><t(?: xml:space="preserve")?>([^<]*)</t></is>)?</c>)'
    r'|(?:<(/)row>)?<row(?: r="([0-9]+)")?([^>/]*)(/?)>'
    r"|<(/)row>"
    r"|(<)"
)
#: The same for the commonest shapes only (a cell's and a row's reference first, a value or an
#: inline string but no formula): a third cheaper, and tried first.
_SIMPLE = re.compile(
    r'<c r="([A-Z]+)[0-9]+"([^>/]*)(?:/>|>'
    r'(?:<v>([^<]*)</v>|<is><t(?: xml:space="preserve")?>([^<]*)</t></is>)</c>)'
    r'|(?:<(/)row>)?<row r="([0-9]+)"([^>/]*)(/?)>'
    r"|<(/)row>"
    r"|(<)"
)
#: How a cell's value becomes text, by its attributes.
_NUMBER, _DATE, _ELAPSED, _SHARED, _INLINE, _TEXT, _OTHER = range(7)
_COLUMNS: dict[str, int] = {}  # column letters: their index, as met
_LETTERS_OF = [chr(ord("A") + index) for index in range(26)]  # column index - 1: its letter


def _letters_column(letters: str) -> int:
    index = _COLUMNS[letters] = _column_index(letters)
    return index


class SheetRows(_Stream):
    """The non-empty rows of the package's first worksheet as text, trailing empty cells
    dropped."""

    root, container, item, end = "worksheet", "sheetData", "<row", "</sheetData"

    def __init__(self, archive: zipfile.ZipFile, package: Package) -> None:
        if package.sheet is None:
            raise XlsxError("it has no worksheet")
        super().__init__(archive, package.sheet)
        self.cells = _Cells(package)
        self.rows: list[list[str | None]] = []
        self.expat_rows = 0  # rows read by expat one at a time (the tests look)
        self.codes: dict[str, int] = {}  # a cell's attributes (but r): how it becomes text
        self.types: dict[str, tuple[str, str]] = {}  # and its type and style
        self.row_blobs: set[str] = set()  # a row's attributes (but r) of the fast form

    def __iter__(self) -> Generator[list[str | None], None, None]:
        for chunk in self.chunks():
            yield from chunk

    def chunks(self) -> Generator[list[list[str | None]], None, None]:
        """The rows, a list of them (those of a chunk of the part) at a time."""
        rows = self.rows
        try:
            for _ in self.read():
                if rows:
                    yield rows[:]
                    rows.clear()
        except (ValueError, IndexError, OverflowError) as exc:  # a cell's value
            if isinstance(exc, XlsxError):
                raise
            raise XlsxError(f"{self.part}: {exc}") from None

    def events(self, parser: Any) -> None:
        _SheetEvents(parser, self.cells, self.rows)

    def region(self, text: str) -> int | None:
        if not _plain(text):
            return 0
        if self._tokens(text, _SIMPLE) or self._tokens(text, _TOKEN):
            return None
        return self._by_rows(text)

    def _by_rows(self, region: str) -> int | None:
        """:meth:`region` one row at a time, a row not of the fast shapes read by expat."""
        position = 0
        while (start := region.find("<row", position)) >= 0:
            if start != position and "<" in region[position:start]:
                return position
            head = _ROW_HEAD.match(region, start)
            if head is None:
                return start
            end = head.end()
            if not head.group(1):
                close = region.find("</row", end)
                tail = _ROW_TAIL.match(region, close) if close >= 0 else None
                if tail is None:
                    return start
                end = tail.end()
            text = region[start:end]
            if not self._tokens(text, _TOKEN):
                self.expat_rows += 1
                self._expat_item(text)
            position = end
        if "<" in region[position:]:
            return position
        return None

    def _tokens(self, region: str, tokens: re.Pattern[str]) -> bool:
        """The rows of ``region`` read into ``self.rows`` by ``tokens`` (:data:`_TOKEN` or
        :data:`_SIMPLE`); False, and nothing read, when one of them is not of its shapes."""
        cells = self.cells
        strings, row_blobs = cells.strings, self.row_blobs
        codes, columns = self.codes.get, _COLUMNS.get
        amp, cr = "&" in region, "\r" in region  # references to replace, line ends to normalise
        counter, next_row = cells.row_counter, cells.next_row
        found: list[list[str | None]] = []
        values: list[str | None] = []
        append = values.append
        in_row = False
        column = number = 0
        # split, not findall: a flat list of strings (None for a group not matched), walked 11
        # at a time (the groups and the text up to the next token) by a zip that reuses its
        # tuple, is no work for the garbage collector, where findall's list of tuples is
        parts = iter(tokens.split(region))
        next(parts)  # the text before the first token
        for (
            letters,
            blob,
            v,
            inline,
            ended,
            reference,
            attributes,
            empty,
            end,
            _,
            _,
        ) in zip(*[parts] * 11, strict=False):
            if blob is not None:  # a cell
                if not in_row:
                    return False
                if not letters or (column < 26 and letters == _LETTERS_OF[column]):
                    column += 1  # the next column (single letters are cached strings: fast)
                else:
                    index = columns(letters) or _letters_column(letters)
                    if index <= column:
                        return False
                    values.extend([None] * (index - column - 1))
                    column = index
                code = codes(blob)
                if code is None:
                    code = self._cell_attributes(blob)
                    if code is None:
                        return False
                text = inline if code == _INLINE else v
                if not text:
                    append(None)
                    continue
                if cr or (amp and "&" in text):
                    text = _xml_text(text)
                if code == _INLINE or code == _TEXT:  # noqa: SIM109 (faster than a tuple)
                    append(text)
                elif code == _SHARED:
                    append(strings[int(text)] or None)
                elif code == _NUMBER:
                    if text.isdigit() and text.isascii() and (text[0] != "0" or len(text) == 1):
                        append(text)
                    else:
                        append(_number_text(text))
                elif code == _DATE or code == _ELAPSED:  # noqa: SIM109 (faster than a tuple)
                    append(cells.date_text(text, code == _ELAPSED))
                else:
                    kind, style = self.types[blob]
                    append(cells.text(kind, style, text))
            elif attributes is not None:  # a row's start
                if ended:  # after the end of the row before
                    if not in_row:
                        return False
                    while values and values[-1] is None:
                        values.pop()
                    if number >= next_row:
                        next_row = number + 1
                        if values:
                            found.append(values)
                elif in_row:
                    return False
                if (
                    attributes
                    and attributes not in row_blobs
                    and not self._row_attributes(attributes)
                ):
                    return False
                counter = int(reference) if reference else counter + 1
                number, column = counter, 0
                if empty:
                    in_row = False
                    if number >= next_row:
                        next_row = number + 1
                else:
                    values, in_row = [], True
                    append = values.append
            elif end:
                if not in_row:
                    return False
                while values and values[-1] is None:
                    values.pop()
                if number >= next_row:
                    next_row = number + 1
                    if values:
                        found.append(values)
                in_row = False
            else:
                return False
        if in_row:
            return False
        cells.row_counter, cells.next_row = counter, next_row
        self.rows.extend(found)
        return True

    def _attributes(self, blob: str) -> dict[str, str] | None:
        """The attributes of a cell or a row (but a leading reference), when well-formed: names
        unique, prefixes declared."""
        if _ATTRIBUTES.fullmatch(blob) is None:
            return None
        found = {}
        for name, double, single in _ATTR_ITEM.findall(blob):
            prefix = name.split(":", 1)[0] if ":" in name else None
            if name in found or prefix == "xmlns" or name == "xmlns":
                return None
            if prefix is not None and prefix not in self.prefixes:
                return None
            found[name] = _attribute_text(double or single)
        return found

    def _cell_attributes(self, blob: str) -> int | None:
        """How a cell with these attributes (but a leading reference) becomes text, its type
        and style noted in :attr:`types`; None when they are not of the fast form (a reference
        not first, a style not a number, not well-formed)."""
        attributes = self._attributes(blob)
        if attributes is None or "r" in attributes:
            return None
        kind = attributes.get("t", "n")
        style = attributes.get("s", "")
        try:
            date = self.cells.style_kind(style) if style else 0
        except ValueError:
            return None
        if kind == "n":
            code = _ELAPSED if date == 2 else _DATE if date else _NUMBER
        elif kind == "s":
            code = _SHARED
        elif kind == "inlineStr":
            code = _INLINE
        elif kind in ("b", "d"):
            code = _OTHER
        else:  # str, e (an error: #N/A, #REF!, ...), or a type openpyxl keeps as text
            code = _TEXT
        self.codes[blob] = code
        self.types[blob] = (kind, style)
        return code

    def _row_attributes(self, blob: str) -> bool:
        """Whether a row with these attributes (but a leading number) is of the fast form."""
        attributes = self._attributes(blob)
        if attributes is None or "r" in attributes:
            return False
        self.row_blobs.add(blob)
        return True

"""Syntax and normalisation, by email-validator (its own DNS check off: DNS is ours).

Any value goes in; an :class:`Address` or None (invalid) comes out, never an exception.
"""

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from email_validator import EmailNotValidError, validate_email

if TYPE_CHECKING:
    import pyarrow as pa
    from email_validator import ValidatedEmail

__all__ = ["Address", "parse_address", "parse_addresses", "parse_columns", "within_limits"]

# The plain ASCII addresses that email-validator certainly accepts, unchanged but for the domain's
# case: a dot-atom local part of at most 64 characters, LDH labels of at most 63 characters, a
# final label ending with a letter. Anything else (IDN, UTF-8, quotes, "--" that could be
# Punycode, special-use names, lengths at the limits) goes to email-validator itself, so this
# shortcut can never change a verdict; tests compare the two on many generated strings.
_ATEXT = r"a-z0-9_!#$%&'*+/=?^`{|}~\-"
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
SIMPLE_ADDRESS = (
    rf"^[{_ATEXT}]{{1,64}}(?:\.[{_ATEXT}]+)*@(?:{_LABEL}\.)+(?:[a-z0-9][a-z0-9-]{{0,61}})?[a-z]$"
)
_SIMPLE = re.compile(SIMPLE_ADDRESS)
#: A local part email-validator keeps as it is (lower-case: it lower-cases some mailbox names),
#: and a domain part that holds nothing that could change how the address is split (no quotes,
#: angle brackets, spaces or other punctuation): such addresses take the per-domain path.
_DOT_ATOM = re.compile(rf"^[{_ATEXT}]{{1,64}}(?:\.[{_ATEXT}]+)*$")
_PLAIN_DOMAIN = re.compile(r"^[A-Za-z0-9.\-\u0080-\U0010ffff]+$")
_SPECIAL_TLDS = ("arpa", "invalid", "local", "localhost", "onion")
#: What keeps an address matching :data:`SIMPLE_ADDRESS` off the vectorised path.
_UNSIMPLE = r"--|\.(?:" + "|".join(_SPECIAL_TLDS) + r")$"

#: Longer inputs are not addresses (RFC 5321: 254 octets for a path); refuse before parsing.
_MAX_INPUT = 1024
#: RFC 5321 section 4.5.3.1, in octets as sent: a local part of 64, a domain of 255 less the two
#: octets of DNS's root label (253), a path of 256 less its angle brackets (254). email-validator
#: 2.4 checks the domain and the address but the local part only with ``strict=True``, and counts
#: characters there, not octets: :func:`within_limits` is the one rule of both paths.
MAX_LOCAL_OCTETS = 64
MAX_DOMAIN_OCTETS = 253
MAX_ADDRESS_OCTETS = 254


@dataclass(frozen=True, slots=True)
class Address:
    """A syntactically valid address, normalised."""

    #: The address as reported: local part as given (NFC), domain lower-case Unicode.
    email: str
    local_part: str
    #: The domain in A-labels, as DNS and SMTP want it.
    domain: str
    #: The domain in Unicode, as people read it.
    domain_unicode: str
    #: The local part needs SMTPUTF8 (it is not ASCII).
    needs_smtputf8: bool

    @property
    def smtp_address(self) -> str:
        """The address to put in RCPT TO: ASCII domain, local part as given."""
        return f"{self.local_part}@{self.domain}"


def parse_address(value: object) -> Address | None:
    """Parse anything; None when it is not a syntactically valid address.

    IDN domains, UTF-8 local parts (RFC 6531) and quoted local parts are accepted. Domains under
    ``.test`` pass (they are judged by DNS, where on the internet they do not exist), other
    special-use names (``localhost``, ``.invalid``, ...) are invalid, and so are IP literals.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > _MAX_INPUT:
        return None
    lowered = text.lower()
    if _is_simple(lowered, text):
        local, _, domain = text.rpartition("@")
        domain = domain.lower()
        return Address(f"{local}@{domain}", local, domain, domain, needs_smtputf8=False)
    local, _, domain_part = text.rpartition("@")
    if _DOT_ATOM.match(local) and _PLAIN_DOMAIN.match(domain_part):
        return _with_domain(local, domain_part)
    try:
        valid = _validate(text)
    except (EmailNotValidError, UnicodeError, ValueError):
        return None
    if not within_limits(valid.local_part, valid.ascii_domain):
        return None
    return Address(
        email=valid.normalized,
        local_part=valid.local_part,
        domain=valid.ascii_domain,
        domain_unicode=valid.domain,
        needs_smtputf8=not valid.local_part.isascii(),
    )


def _validate(text: str) -> "ValidatedEmail":
    return validate_email(
        text,
        check_deliverability=False,
        allow_smtputf8=True,
        allow_quoted_local=True,
        allow_domain_literal=False,
        allow_display_name=False,
        test_environment=True,
    )


def _with_domain(local: str, domain_part: str) -> Address | None:
    """A lower-case dot-atom local part at a domain that needs email-validator (IDN, upper
    case, ...): the domain's IDNA work is done once per domain (docs/engine.md, "Syntax"), and
    the rest is what email-validator would do with such a local part: keep it as it is."""
    domain = _domain(domain_part)
    if domain is None:
        return None
    unicode_domain, ascii_domain = domain
    # email-validator's length rule: the address as given, normalised and in IDNA ASCII
    for shown in (domain_part, unicode_domain, ascii_domain):
        if len(f"{local}@{shown}".encode()) > MAX_ADDRESS_OCTETS:
            return None
    if not within_limits(local, ascii_domain):
        return None
    return Address(
        email=f"{local}@{unicode_domain}",
        local_part=local,
        domain=ascii_domain,
        domain_unicode=unicode_domain,
        needs_smtputf8=False,
    )


@functools.lru_cache(maxsize=1 << 16)
def _domain(domain_part: str) -> tuple[str, str] | None:
    """(Unicode, A-label) forms of a domain as email-validator gives them; None if invalid.
    Asked with a one-letter local part: the domain's checks do not depend on the local part."""
    try:
        valid = _validate(f"a@{domain_part}")
    except (EmailNotValidError, UnicodeError, ValueError):
        return None
    return valid.domain, valid.ascii_domain


def within_limits(local_part: str, ascii_domain: str) -> bool:
    """RFC 5321's length limits, in UTF-8 octets, of the address as it goes into RCPT TO."""
    local = len(local_part.encode("utf-8", "surrogatepass"))
    domain = len(ascii_domain.encode("ascii", "replace"))
    return (
        local <= MAX_LOCAL_OCTETS
        and domain <= MAX_DOMAIN_OCTETS
        and local + 1 + domain <= MAX_ADDRESS_OCTETS
    )


def _is_simple(lowered: str, text: str) -> bool:
    # ASCII only (the pattern), so characters are octets here
    if len(text) > MAX_ADDRESS_OCTETS or "--" in text or not _SIMPLE.match(lowered):
        return False
    local, _, domain = lowered.rpartition("@")
    if not within_limits(local, domain):
        return False
    # the local part's case is kept, so only lower-case local parts are surely unchanged
    if local != text.rpartition("@")[0]:
        return False
    return domain.rpartition(".")[2] not in _SPECIAL_TLDS


def parse_addresses(values: "pa.Array | pa.ChunkedArray") -> "pa.Table":
    """Parse a whole column at once: vectorised for plain addresses, email-validator for the rest.

    Returns columns ``valid`` (bool), ``email``, ``local_part``, ``domain`` (A-labels),
    ``domain_unicode`` and ``needs_smtputf8``, aligned with ``values`` (null where invalid).
    """
    import pyarrow as pa

    columns = parse_columns(values)
    del columns["text"]
    return pa.table(columns)


def parse_columns(values: "pa.Array | pa.ChunkedArray") -> dict[str, "pa.Array"]:
    """:func:`parse_addresses`' columns as arrays, and ``text``: the values as text, trimmed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(pc.cast(values, pa.string()))
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    # A plain address holds one "@": split there, by the list's offsets rather than a regular
    # expression with groups, which cost more than the rest of this function together.
    parts = pc.split_pattern(text, "@", max_splits=1, reverse=True)
    starts = parts.offsets.to_numpy()[:-1]
    simple = pc.and_kleene(
        pc.match_substring_regex(text, SIMPLE_ADDRESS),
        # "--" anywhere (possibly Punycode), or a special-use top-level name: the pattern
        # guarantees a dot in the domain, so the name after the last one is a suffix
        pc.invert(pc.match_substring_regex(text, _UNSIMPLE)),
    )
    simple = pc.fill_null(simple, False)
    mask = ~simple.to_numpy(zero_copy_only=False)
    local = parts.values.take(pa.array(starts, mask=mask))
    domain = parts.values.take(pa.array(starts + 1, mask=mask))
    # RFC 5321's lengths (within_limits); the pattern admits ASCII only: octets are characters
    local_length = pc.binary_length(local)
    domain_length = pc.binary_length(domain)
    simple = pc.fill_null(
        pc.and_(
            pc.and_(
                pc.less_equal(local_length, MAX_LOCAL_OCTETS),
                pc.less_equal(domain_length, MAX_DOMAIN_OCTETS),
            ),
            pc.less_equal(pc.add(local_length, domain_length), MAX_ADDRESS_OCTETS - 1),
        ),
        False,
    )
    # the rest, one by one (rare in real lists: IDN, UTF-8, quoted, upper-case local parts);
    # without an "@" a value is no address, and needs no parse to say so
    null = pa.scalar(None, pa.string())
    columns = {
        "email": pc.if_else(simple, text, null),
        "local_part": pc.if_else(simple, local, null),
        "domain": pc.if_else(simple, domain, null),
    }
    columns["domain_unicode"] = columns["domain"]
    valid = simple
    utf8 = pa.repeat(False, len(text))
    rest = pc.fill_null(
        pc.and_(pc.invert(simple), pc.greater(pc.list_value_length(parts), 1)), False
    )
    rest_text = pc.filter(text, rest)
    if len(rest_text):
        # without quotes, an "@" in the local part, or nothing before or after the last "@",
        # is never an address: no parse for those (most broken cells of a list)
        broken = pc.and_(
            pc.invert(pc.match_substring(rest_text, '"')),
            pc.or_(
                pc.greater(pc.count_substring(rest_text, "@"), 1),
                pc.or_(pc.starts_with(rest_text, "@"), pc.ends_with(rest_text, "@")),
            ),
        )
        parsed = [
            None if skip else parse_address(value)
            for value, skip in zip(rest_text.to_pylist(), broken.to_pylist(), strict=True)
        ]
        fields = {
            "email": [a.email if a else None for a in parsed],
            "local_part": [a.local_part if a else None for a in parsed],
            "domain": [a.domain if a else None for a in parsed],
            "domain_unicode": [a.domain_unicode if a else None for a in parsed],
        }
        for name, found in fields.items():
            columns[name] = pc.replace_with_mask(columns[name], rest, pa.array(found, pa.string()))
        valid = pc.replace_with_mask(valid, rest, pa.array([a is not None for a in parsed]))
        utf8 = pc.replace_with_mask(
            utf8, rest, pa.array([bool(a and a.needs_smtputf8) for a in parsed])
        )
    return {"valid": valid, **columns, "needs_smtputf8": utf8, "text": text}

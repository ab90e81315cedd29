"""Syntax and normalisation, by email-validator (its own DNS check off: DNS is ours).

Any value goes in; an :class:`Address` or None (invalid) comes out, never an exception.
"""

from dataclasses import dataclass

from email_validator import EmailNotValidError, validate_email

__all__ = ["Address", "parse_address"]

#: Longer inputs are not addresses (RFC 5321: 254 octets for a path); refuse before parsing.
_MAX_INPUT = 1024


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
    try:
        valid = validate_email(
            text,
            check_deliverability=False,
            allow_smtputf8=True,
            allow_quoted_local=True,
            allow_domain_literal=False,
            allow_display_name=False,
            test_environment=True,
        )
    except (EmailNotValidError, UnicodeError, ValueError):
        return None
    return Address(
        email=valid.normalized,
        local_part=valid.local_part,
        domain=valid.ascii_domain,
        domain_unicode=valid.domain,
        needs_smtputf8=not valid.local_part.isascii(),
    )

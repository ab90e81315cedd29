"""Webhook signatures, shared by the service that signs and the receiver that verifies.

Both forms sign with ``sha256=`` + the lowercase hex HMAC-SHA256 keyed with the webhook's secret:
over the raw body (the ``X-Webhook-Signature`` header), and for form B also over the payload
without its ``signature`` field, as JSON with sorted keys and ``(",", ":")`` separators
(PRODUCT.md).
Standard library only: the clients import it without the service's web framework or database.
"""

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["canonical_payload", "form_b_payload_signature", "sign", "signature_matches"]


def sign(message: bytes, secret: str) -> str:
    """``sha256=`` + lowercase hex HMAC-SHA256 of ``message`` keyed with ``secret``."""
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def canonical_payload(payload: Mapping[str, Any]) -> bytes:
    """What form B's ``signature`` field signs: the payload without it, in canonical JSON."""
    return json.dumps(
        {k: v for k, v in payload.items() if k != "signature"},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8", "surrogatepass")


def form_b_payload_signature(payload: Mapping[str, Any], secret: str) -> str:
    """The ``signature`` field of a form B payload (computed without that field)."""
    return sign(canonical_payload(payload), secret)


def signature_matches(expected: str, given: object) -> bool:
    """Constant-time comparison of a computed signature with a received one (any value)."""
    if not isinstance(given, str):
        return False
    # bytes, not str: compare_digest refuses non-ASCII strings, and a header or a field can hold
    # anything
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))

"""Strict parsing of a compact JWS, done once per token (the profile's own, ADR 0003).

Three base64url parts, each the one canonical spelling of its bytes; header and payload
decoded and parsed as JSON the way the ledger does (lenient UTF-8 for the record, strict
UTF-8 required before anything is accepted). Nothing here is verified or trusted.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Literal

# The signature part may be empty so that `alg: none` is refused for its algorithm.
_COMPACT_JWS = re.compile(r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]*)")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

JwsProblem = Literal["not-compact", "not-canonical-base64url"]


@dataclass(frozen=True)
class ParsedJws:
    """A compact JWS split and decoded, not yet verified."""

    header_b64: str
    payload_b64: str
    signature_b64: str
    header_bytes: bytes
    payload_bytes: bytes
    header: dict[str, object] | None
    payload: dict[str, object] | None


def parse_compact_jws(token: str) -> ParsedJws | JwsProblem:
    """Splits and decodes ``token``, or names why it is not a compact JWS this profile accepts."""
    m = _COMPACT_JWS.fullmatch(token)
    if m is None:
        return "not-compact"
    header_b64, payload_b64, signature_b64 = m.group(1), m.group(2), m.group(3)
    # One token, one spelling: a lenient decoder drops stray trailing bits, so a token could
    # be re-spelled without touching its signature.
    if not (is_canonical_base64url(header_b64) and is_canonical_base64url(payload_b64) and is_canonical_base64url(signature_b64)):
        return "not-canonical-base64url"
    header_bytes = b64url_decode(header_b64)
    payload_bytes = b64url_decode(payload_b64)
    return ParsedJws(
        header_b64,
        payload_b64,
        signature_b64,
        header_bytes,
        payload_bytes,
        parse_json_object(header_bytes.decode("utf-8", "replace")),
        parse_json_object(payload_bytes.decode("utf-8", "replace")),
    )


def is_canonical_base64url(s: str) -> bool:
    """True when ``s`` (base64url characters) is the one encoding of its bytes."""
    rest = len(s) % 4
    if rest == 0:
        return True
    if rest == 1:
        return False
    last = _ALPHABET.index(s[-1])
    return (last & (0x0F if rest == 2 else 0x03)) == 0


def b64url_decode(s: str) -> bytes:
    """Decodes unpadded base64url (already checked to be canonical)."""
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _refuse_constant(name: str) -> object:
    # JSON has no NaN or Infinity; JavaScript's JSON.parse (the ledger's) refuses them.
    raise ValueError(f"not JSON: {name}")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_json(text: str) -> object:
    """JSON text as JavaScript's JSON.parse reads it (no NaN/Infinity); raises ValueError."""
    return _DECODER.decode(text)


def parse_json_object(text: str) -> dict[str, object] | None:
    """JSON text to an object, or None. No trust implied: used before verification."""
    try:
        v = parse_json(text)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


def js_length(s: str) -> int:
    """Length as JavaScript counts it (UTF-16 code units), which the profile's limits use."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2

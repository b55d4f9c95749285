"""Why a sink refused a request: the reason (the ledger's, ADR 0003 / 0013), its gRPC
code, and what the token said about itself, read without trust, for the refusal record.

Neither messages nor errors ever carry the raw capability: it is a bearer credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import grpc

from keycap_client import reasons
from keycap_client.errors import ERROR_DOMAIN, KeycapError
from keycap_client.sink._jws import js_length

__all__ = ["SinkRefusal", "UnverifiedInfo", "REASON_CODES"]

#: The gRPC code of every reason a sink refuses with: the catalogue's
#: (:mod:`keycap_client.reasons`, generated from proto/keycap/rules/v1/reasons.proto).
REASON_CODES: Final[Mapping[str, grpc.StatusCode]] = {
    r: reasons.CODES[r]
    for r in (
        reasons.CAPABILITY_MISSING,
        reasons.CAPABILITY_MALFORMED,
        reasons.CAPABILITY_TOO_LARGE,
        reasons.ALGORITHM_NOT_ALLOWED,
        reasons.WRONG_TOKEN_TYPE,
        reasons.UNKNOWN_KEY_ID,
        reasons.BAD_SIGNATURE,
        reasons.EXPIRED,
        reasons.NOT_YET_VALID,
        reasons.WRONG_ISSUER,
        reasons.WRONG_AUDIENCE,
        reasons.CLAIM_MISSING,
        reasons.CLAIM_INVALID,
        reasons.LIFETIME_TOO_LONG,
        reasons.SIGNING_KEYS_UNAVAILABLE,
        reasons.DATABASE_UNAVAILABLE,
        reasons.TOOL_NOT_ACCEPTED,
        reasons.KEY_MISMATCH,
        reasons.CAPABILITY_REUSED,
        reasons.EFFECT_CLASS_MISMATCH,
        reasons.SANDBOX_CAPABILITY_NOT_LIVE,
    )
}

# Longest string copied from a token into a record: a hostile token cannot bloat it.
_MAX_UNVERIFIED_FIELD = 256


@dataclass(frozen=True)
class UnverifiedInfo:
    """What a refused token says about itself, read WITHOUT trusting it (record only)."""

    tool_id: str = ""
    call_id: str = ""
    jti: str = ""
    kid: str = ""
    effect: str = ""
    key: str = ""
    request_id: str = ""

    @staticmethod
    def read(header: Mapping[str, object] | None, payload: Mapping[str, object] | None) -> UnverifiedInfo:
        """Short non-empty strings picked out of a decoded header and payload; the rest left out."""

        def pick(src: Mapping[str, object] | None, name: str) -> str:
            v = src.get(name) if src is not None else None
            return v if isinstance(v, str) and 0 < js_length(v) <= _MAX_UNVERIFIED_FIELD else ""

        return UnverifiedInfo(
            tool_id=pick(payload, "tool_id"),
            call_id=pick(payload, "call_id"),
            jti=pick(payload, "jti"),
            kid=pick(header, "kid"),
            effect=pick(payload, "effect"),
            key=pick(payload, "key"),
            request_id=pick(payload, "request_id"),
        )


class SinkRefusal(KeycapError):
    """A request the sink refused: :attr:`reason` is the ledger's reason for the same token.

    ``signature_verified``: the refusal came after the signature held (expired, wrong
    audience, bad claims, or a rule of the sink), so ``unverified`` names the tool reliably.
    """

    unverified: UnverifiedInfo
    signature_verified: bool

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        unverified: UnverifiedInfo | None = None,
        signature_verified: bool = False,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(REASON_CODES[reason], reason, message, metadata, ERROR_DOMAIN)
        self.unverified = unverified or UnverifiedInfo()
        self.signature_verified = signature_verified

    @property
    def retryable(self) -> bool:
        """UNAVAILABLE: keycap (or the sink's store) could not decide; the caller may retry."""
        return self.code == grpc.StatusCode.UNAVAILABLE

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild,
            (self.reason, self.message, self.unverified, self.signature_verified, dict(self.metadata)),
        )


def _rebuild(
    reason: str, message: str, unverified: UnverifiedInfo, signature_verified: bool, metadata: dict[str, str]
) -> SinkRefusal:
    return SinkRefusal(reason, message, unverified=unverified, signature_verified=signature_verified, metadata=metadata)

"""keycap's sink SDK: make any Python service an enforcing sink (ADR 0013)."""

from keycap_client.sink.claims import Effect, VerifiedCapability
from keycap_client.sink.keys import JwksError, KernelJwksSource, PublicKeySource, StaticJwksSource, parse_jwks
from keycap_client.sink.refusal import REASON_CODES, SinkRefusal, UnverifiedInfo
from keycap_client.sink.verifier import CapabilityVerifier, VerifierOptions, parse_bearer

__all__ = [
    "CapabilityVerifier",
    "Effect",
    "JwksError",
    "KernelJwksSource",
    "PublicKeySource",
    "REASON_CODES",
    "SinkRefusal",
    "StaticJwksSource",
    "UnverifiedInfo",
    "VerifiedCapability",
    "VerifierOptions",
    "parse_bearer",
    "parse_jwks",
]

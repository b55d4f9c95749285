"""The ledger's strict capability profile, offline, in Python (ADR 0003, ADR 0013 §2).

Fails closed: anything not positively verified is a :class:`SinkRefusal` with the reason
the ledger gives for the same token, checked in the ledger's order. The algorithm is
pinned (Ed25519 through ``cryptography``), never read from the token; the token is parsed
once, strictly (:mod:`keycap_client.sink._jws`), because general JOSE libraries accept
what this profile refuses.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from keycap_client import reasons
from keycap_client.sink._jws import ParsedJws, b64url_decode, is_utf8, js_length, parse_compact_jws
from keycap_client.sink.claims import DerivationClaim, Effect, SandboxMode, VerifiedCapability
from keycap_client.sink.keys import PublicKeySource
from keycap_client.sink.refusal import SinkRefusal, UnverifiedInfo

__all__ = ["CapabilityVerifier", "VerifierOptions", "parse_bearer"]

CAPABILITY_TYP = "keycap-capability+jwt"
#: The typ of a shadow or replay capability (ADR 0028): a verifier that does not know run
#: modes refuses it WRONG_TOKEN_TYPE instead of taking it as live.
CAPABILITY_SANDBOX_TYP = "keycap-sandbox-capability+jwt"
_SANDBOX_MODES = ("shadow", "replay")
CAPABILITY_ALG = "EdDSA"
_ALLOWED_HEADER_MEMBERS = frozenset({"alg", "typ", "kid"})
# Presence before any value, in the ledger's order, so a token missing several names the same one.
_PRESENCE_ORDER = ("iss", "aud", "iat", "exp", "jti", "attempt", "call_id", "effect", "tool_id", "sub")
_REQUIRED_CLAIMS = ("iss", "aud", "sub", "tool_id", "effect", "call_id", "attempt", "jti", "iat", "exp")
_EFFECTS = ("idempotent", "queryable", "unsafe")
_MAX_SAFE_INTEGER = 2**53 - 1
# RFC 6750 §2.1, as the ledger reads it: ASCII-only case folding (re.ASCII), and \Z rather
# than $, which in Python also matches before a trailing newline.
_BEARER = re.compile(r"Bearer +([A-Za-z0-9\-._~+/]+=*) *\Z", re.IGNORECASE | re.ASCII)
# What JavaScript's String.prototype.trim removes (the ledger's "blank" test).
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def parse_bearer(value: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <token>`` value, or None."""
    if value is None:
        return None
    m = _BEARER.match(value)
    return m.group(1) if m else None


@dataclass(frozen=True)
class VerifierOptions:
    """The ledger's verification options; the defaults are the ledger's.

    ``audience``: the kernel's audience (``KEYCAP_CAPABILITY_AUDIENCE`` there).
    ``max_lifetime_seconds`` bounds both ``exp - iat`` and the token's age.
    ``clock``: seconds since the epoch (like ``time.time``); tests move it.
    ``sandbox``: what to do with a shadow or replay capability (ADR 0028): ``"refuse"``
    (the default) refuses its typ WRONG_TOKEN_TYPE, as every verifier that does not know
    run modes does; ``"verify"`` verifies it and returns its ``mode``, for a caller that then
    applies the mode (a :class:`~keycap_client.sink.Sink` refuses it as not live). Either
    way a token whose typ and ``mode`` claim disagree is refused CLAIM_INVALID.
    """

    issuer: str = "keycap-kernel"
    audience: str = "keycap-ledger"
    max_token_bytes: int = 4096
    max_lifetime_seconds: float = 900
    clock_tolerance_seconds: float = 5
    clock: Callable[[], float] = time.time
    sandbox: Literal["refuse", "verify"] = "refuse"

    def __post_init__(self) -> None:
        for name in ("max_token_bytes", "max_lifetime_seconds", "clock_tolerance_seconds"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a non-negative number")


@dataclass(frozen=True)
class _Checked:
    """A token past every check that needs no key: what the signature step needs."""

    jws: ParsedJws
    kid: str
    unverified: UnverifiedInfo


class CapabilityVerifier:
    """Verifies ``Authorization: Bearer <capability>`` values against the kernel's keys.

    Example::

        verifier = CapabilityVerifier(KernelJwksSource.from_kernel("127.0.0.1:50051"))
        cap = verifier.verify(headers.get("authorization"))
        cap.key  # the kernel-derived idempotency key (idempotent capabilities)
    """

    def __init__(self, keys: PublicKeySource, options: VerifierOptions | None = None) -> None:
        self.keys = keys
        self.options = options or VerifierOptions()

    def verify(self, authorization: str | None) -> VerifiedCapability:
        """The verified claims; raises SinkRefusal (and nothing else) on any failure.

        May block while the key source fetches (an unknown kid)."""
        checked = self._check_unsigned(authorization)
        return self._check_signed(checked, self._lookup(checked, self.keys.get_key))

    async def verify_async(self, authorization: str | None) -> VerifiedCapability:
        """:meth:`verify` for asyncio: a key fetch runs in a worker thread, off the event loop."""
        checked = self._check_unsigned(authorization)
        key = self.keys.cached_key(checked.kid)
        if key is None:
            key = await asyncio.to_thread(self._lookup, checked, self.keys.get_key)
        return self._check_signed(checked, key)

    # --- before the key -------------------------------------------------------

    def _check_unsigned(self, authorization: str | None) -> _Checked:
        opts = self.options
        if authorization is None or authorization.strip(_JS_WHITESPACE) == "":
            raise SinkRefusal(reasons.CAPABILITY_MISSING, "no capability: expected authorization: Bearer <capability>")
        # Checked before any parsing, so an oversized header costs nothing but its length.
        if len(authorization) > opts.max_token_bytes + 64 and js_length(authorization) > opts.max_token_bytes + 64:
            raise SinkRefusal(reasons.CAPABILITY_TOO_LARGE, f"capability is larger than {opts.max_token_bytes} bytes")
        token = parse_bearer(authorization)
        if token is None:
            raise SinkRefusal(reasons.CAPABILITY_MALFORMED, "authorization is not a Bearer credential")
        if len(token) > opts.max_token_bytes:  # ASCII by now: length is size in bytes
            raise SinkRefusal(reasons.CAPABILITY_TOO_LARGE, f"capability is larger than {opts.max_token_bytes} bytes")
        jws = parse_compact_jws(token)
        if jws == "not-compact":
            raise SinkRefusal(reasons.CAPABILITY_MALFORMED, "capability is not a compact JWS (three base64url parts)")
        if jws == "not-canonical-base64url":
            raise SinkRefusal(reasons.CAPABILITY_MALFORMED, "capability is not canonical base64url")
        assert isinstance(jws, ParsedJws)
        header = jws.header
        unverified = UnverifiedInfo.read(header, jws.payload)

        def refuse(reason: str, message: str) -> SinkRefusal:
            return SinkRefusal(reason, message, unverified=unverified)

        if header is None:
            raise refuse(reasons.CAPABILITY_MALFORMED, "capability header is not a JSON object")
        # The algorithm is decided here, not by the token: anything but exactly "EdDSA" is refused.
        if header.get("alg") != CAPABILITY_ALG:
            raise refuse(reasons.ALGORITHM_NOT_ALLOWED, f"capability algorithm must be {CAPABILITY_ALG}")
        typ = header.get("typ")
        if typ != CAPABILITY_TYP and not (typ == CAPABILITY_SANDBOX_TYP and opts.sandbox == "verify"):
            raise refuse(reasons.WRONG_TOKEN_TYPE, f"capability typ must be {CAPABILITY_TYP}")
        kid = header.get("kid")
        if not isinstance(kid, str) or kid == "":
            raise refuse(reasons.CAPABILITY_MALFORMED, "capability header has no key id (kid)")
        for member in header:
            if member not in _ALLOWED_HEADER_MEMBERS:
                raise refuse(reasons.CAPABILITY_MALFORMED, f'capability header member "{member[:32]}" is not allowed')
        if jws.signature_b64 == "":
            raise refuse(reasons.CAPABILITY_MALFORMED, "capability has no signature")
        return _Checked(jws, kid, unverified)

    @staticmethod
    def _lookup(checked: _Checked, get_key: Callable[[str], Ed25519PublicKey | None]) -> Ed25519PublicKey:
        try:
            key = get_key(checked.kid)
        except SinkRefusal as err:
            # Fail closed, but honestly: the sink could not check, which is not the tool's fault.
            raise SinkRefusal(err.reason, err.message, unverified=checked.unverified) from None
        except Exception:
            raise SinkRefusal(
                reasons.SIGNING_KEYS_UNAVAILABLE, "the signing key source failed", unverified=checked.unverified
            ) from None
        if key is None:
            raise SinkRefusal(
                reasons.UNKNOWN_KEY_ID,
                "capability is signed with a key id this sink does not know",
                unverified=checked.unverified,
            )
        return key

    # --- with the key ---------------------------------------------------------

    def _check_signed(self, checked: _Checked, key: Ed25519PublicKey) -> VerifiedCapability:
        jws, unverified = checked.jws, checked.unverified
        if not isinstance(key, Ed25519PublicKey):
            raise SinkRefusal(reasons.BAD_SIGNATURE, "capability could not be verified", unverified=unverified)
        # After the key lookup, so that a header with stray bytes keeps the reason it has
        # always had (its typ, its unknown kid...).
        if not is_utf8(jws.header_bytes):
            raise SinkRefusal(reasons.CAPABILITY_MALFORMED, "capability header is not valid UTF-8", unverified=unverified)
        try:
            key.verify(b64url_decode(jws.signature_b64), f"{jws.header_b64}.{jws.payload_b64}".encode("ascii"))
        except InvalidSignature:
            raise SinkRefusal(reasons.BAD_SIGNATURE, "capability signature does not verify", unverified=unverified) from None
        except Exception:
            raise SinkRefusal(reasons.BAD_SIGNATURE, "capability could not be verified", unverified=unverified) from None
        # From here on the signature holds: every refusal says so (signature_verified).
        payload = jws.payload
        if payload is None or not is_utf8(jws.payload_bytes):
            raise SinkRefusal(
                reasons.CAPABILITY_MALFORMED,
                "capability payload is not a JSON object",
                unverified=unverified,
                signature_verified=True,
            )
        cap = self._check_claims(payload, checked.kid, unverified)
        # The typ and the mode claim say the same thing, or the token is not the kernel's
        # kind: a live typ with a mode (a verifier without modes would take it as live) or
        # a sandbox typ without one.
        if (jws.header is not None and jws.header.get("typ") == CAPABILITY_SANDBOX_TYP) != (cap.mode is not None):
            raise SinkRefusal(
                reasons.CLAIM_INVALID,
                f'capability claim "mode" must be present exactly when typ is {CAPABILITY_SANDBOX_TYP}',
                unverified=unverified,
                signature_verified=True,
                metadata={"claim": "mode"},
            )
        return cap

    def _check_claims(self, payload: Mapping[str, object], kid: str, unverified: UnverifiedInfo) -> VerifiedCapability:
        opts = self.options

        def refuse(reason: str, message: str, claim: str | None = None) -> SinkRefusal:
            return SinkRefusal(
                reason,
                message,
                unverified=unverified,
                signature_verified=True,
                metadata={"claim": claim} if claim is not None else None,
            )

        for claim in _PRESENCE_ORDER:
            if claim not in payload:
                raise refuse(reasons.CLAIM_MISSING, f'capability claim "{claim}" is missing', claim)
        if payload["iss"] != opts.issuer:
            raise refuse(reasons.WRONG_ISSUER, "capability was not issued by the expected kernel")
        aud = payload["aud"]
        if aud != opts.audience and not (isinstance(aud, list) and opts.audience in aud):
            raise refuse(reasons.WRONG_AUDIENCE, "capability is not addressed to this sink")

        # NumericDate comparisons in whole seconds, skew tolerated both ways.
        now_f = opts.clock()
        if not math.isfinite(now_f):
            # A broken clock would make every comparison pass: fail closed, not the token's fault.
            raise SinkRefusal(reasons.BAD_SIGNATURE, "capability could not be verified", unverified=unverified)
        now = math.floor(now_f)
        tolerance = opts.clock_tolerance_seconds
        iat, nbf, exp = payload["iat"], payload.get("nbf"), payload["exp"]
        if not _is_number(iat):
            raise refuse(reasons.CLAIM_INVALID, 'capability claim "iat" must be a number', "iat")
        if "nbf" in payload and not _is_number(nbf):
            raise refuse(reasons.CLAIM_INVALID, 'capability claim "nbf" must be a number', "nbf")
        if _is_number(nbf) and cast(float, nbf) > now + tolerance:
            raise refuse(reasons.NOT_YET_VALID, "capability is not valid yet (nbf)")
        if not _is_number(exp):
            raise refuse(reasons.CLAIM_INVALID, 'capability claim "exp" must be a number', "exp")
        if cast(float, exp) <= now - tolerance:
            raise refuse(reasons.EXPIRED, "capability has expired")
        # Age bounds replay of an old token even if its exp were far off.
        age = now - cast(float, iat)
        if age - tolerance > opts.max_lifetime_seconds:
            raise refuse(reasons.EXPIRED, "capability has expired")
        if age < -tolerance:
            raise refuse(reasons.NOT_YET_VALID, "capability is not valid yet (issued in the future)")
        if not isinstance(aud, str):
            # An array naming this audience passed above; the profile says one string.
            raise refuse(reasons.WRONG_AUDIENCE, "capability audience must be a single string")
        problem = _claim_problem(payload)
        if problem is not None:
            kind, claim, detail = problem
            raise refuse(reasons.CLAIM_MISSING if kind == "missing" else reasons.CLAIM_INVALID, detail, claim)
        iat_i, exp_i = _whole(payload["iat"]), _whole(payload["exp"])
        if exp_i - iat_i > opts.max_lifetime_seconds:
            raise refuse(reasons.LIFETIME_TOO_LONG, f"capability lifetime exceeds {opts.max_lifetime_seconds:g} s")
        key, request_id = payload.get("key"), payload.get("request_id")
        return VerifiedCapability(
            iss=opts.issuer,
            aud=aud,
            sub=cast(str, payload["sub"]),
            tool_id=cast(str, payload["tool_id"]),
            effect=cast(Effect, payload["effect"]),
            call_id=cast(str, payload["call_id"]),
            attempt=_whole(payload["attempt"]),
            jti=cast(str, payload["jti"]),
            iat=iat_i,
            exp=exp_i,
            kid=kid,
            key=key if isinstance(key, str) else None,
            request_id=request_id if isinstance(request_id, str) else None,
            derivation=_derivation_of(payload.get("derivation")),
            mode=cast(SandboxMode, payload["mode"]) if "mode" in payload else None,
        )


def _is_number(v: object) -> bool:
    """JavaScript's ``typeof v === "number"`` for a JSON value (bool is not a number)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_safe_integer(v: object) -> bool:
    """``Number.isSafeInteger`` for a JSON value: 3, 3.0 and 3e0 are all the integer 3 there."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return abs(v) <= _MAX_SAFE_INTEGER
    return isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) <= _MAX_SAFE_INTEGER


def _whole(v: object) -> int:
    return int(cast(float, v))


def _nonempty_str(v: object) -> bool:
    return isinstance(v, str) and v != ""


def _claim_problem(value: Mapping[str, object]) -> tuple[str, str, str] | None:
    """The contract's shape rules (services/capability/src/claims.ts findClaimProblem), first problem first."""
    for claim in _REQUIRED_CLAIMS:
        if claim not in value:
            return ("missing", claim, f'capability claim "{claim}" is missing')
    for claim in ("iss", "aud", "sub", "tool_id", "call_id", "jti"):
        if not _nonempty_str(value[claim]):
            return ("invalid", claim, f'capability claim "{claim}" must be a non-empty string')
    effect = value["effect"]
    if not isinstance(effect, str) or effect not in _EFFECTS:
        return ("invalid", "effect", 'capability claim "effect" must be one of idempotent, queryable, unsafe')
    attempt = value["attempt"]
    if not _is_safe_integer(attempt) or cast(float, attempt) < 1:
        return ("invalid", "attempt", 'capability claim "attempt" must be a positive integer')
    for claim in ("iat", "exp"):
        t = value[claim]
        if not _is_safe_integer(t) or cast(float, t) < 0:
            return ("invalid", claim, f'capability claim "{claim}" must be a whole number of seconds')
    if cast(float, value["exp"]) <= cast(float, value["iat"]):
        return ("invalid", "exp", 'capability claim "exp" must be after "iat"')
    if "mode" in value and value["mode"] not in _SANDBOX_MODES:
        return ("invalid", "mode", 'capability claim "mode" must be one of shadow, replay (absent: live)')
    return (
        _paired_problem(value, "key", effect == "idempotent", "idempotent")
        or _derivation_problem(value, effect == "idempotent")
        or _paired_problem(value, "request_id", effect == "queryable", "queryable")
    )


def _derivation_problem(value: Mapping[str, object], allowed: bool) -> tuple[str, str, str] | None:
    """ADR 0026: optional, idempotent only, exactly shaped (claims.ts findDerivationProblem)."""
    if "derivation" not in value:
        return None

    def invalid(detail: str) -> tuple[str, str, str]:
        return ("invalid", "derivation", f'capability claim "derivation" {detail}')

    d = value["derivation"]
    if not allowed:
        return invalid("is only allowed when effect is idempotent")
    if not isinstance(d, dict):
        return invalid("must be an object")
    if any(member not in ("version", "fields", "context") for member in d):
        return invalid("has a member other than version, fields and context")
    version = d.get("version")
    if not _is_safe_integer(version) or cast(float, version) < 1:
        return invalid("version must be a positive integer")
    fields = d.get("fields")
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
        return invalid("fields must be a non-empty array of pointers")
    context = d.get("context")
    if not isinstance(context, dict):
        return invalid("context must be an object")
    if any(member != "run_id" for member in context) or ("run_id" in context and not isinstance(context["run_id"], str)):
        return invalid("context may hold only run_id, a string")
    return None


def _derivation_of(d: object) -> DerivationClaim | None:
    """The claim, already checked by _derivation_problem."""
    if not isinstance(d, dict):
        return None
    run_id = d["context"].get("run_id")
    return DerivationClaim(version=_whole(d["version"]), fields=tuple(d["fields"]), run_id=run_id)


def _paired_problem(value: Mapping[str, object], claim: str, required: bool, effect: str) -> tuple[str, str, str] | None:
    present = claim in value
    if required and not present:
        return ("missing", claim, f'capability claim "{claim}" is required when effect is {effect}')
    if not required and present:
        return ("invalid", claim, f'capability claim "{claim}" is only allowed when effect is {effect}')
    if present and not _nonempty_str(value[claim]):
        return ("invalid", claim, f'capability claim "{claim}" must be a non-empty string')
    return None

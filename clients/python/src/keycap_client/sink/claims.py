"""The verified claims a sink hands its handler (ADR 0013 §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["VerifiedCapability", "DerivationClaim", "Effect", "SandboxMode"]

Effect = Literal["idempotent", "queryable", "unsafe"]
#: A sandbox run mode (the ``mode`` claim, ADR 0028); absent means live.
SandboxMode = Literal["shadow", "replay"]


@dataclass(frozen=True)
class DerivationClaim:
    """How an idempotent capability's ``key`` was derived (ADR 0026): the key's canonical
    document without the field values. With the call's arguments, a sink derives the key
    again (keycap_client.key_derivation) and refuses KEY_MISMATCH when it differs.

    ``run_id``: the run the kernel derived with, only when the derivation names it."""

    version: int
    fields: tuple[str, ...]
    run_id: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The claim as it travels: ``{"version", "fields", "context": {"run_id"?}}``."""
        return {
            "version": self.version,
            "fields": list(self.fields),
            "context": {} if self.run_id is None else {"run_id": self.run_id},
        }


@dataclass(frozen=True)
class VerifiedCapability:
    """A capability whose signature and claims were verified: the kernel's own words.

    ``key`` is the kernel-derived idempotency key (idempotent capabilities only): use it
    as the effect's own unique key. ``request_id``: queryable capabilities only. ``sub``:
    the principal (agent runtime) that began the call. Times are seconds since the epoch.
    ``derivation``: idempotent capabilities minted since ADR 0026 (None on older ones).
    ``mode``: "shadow" or "replay" for a sandbox capability (ADR 0028; only a verifier
    with ``sandbox="verify"`` returns one), None for a live one.
    Only these fields exist: nothing from the request is presented as verified.
    """

    iss: str
    aud: str
    sub: str
    tool_id: str
    effect: Effect
    call_id: str
    attempt: int
    jti: str
    iat: int
    exp: int
    kid: str
    key: str | None = None
    request_id: str | None = None
    derivation: DerivationClaim | None = None
    mode: SandboxMode | None = None

    def as_dict(self) -> dict[str, object]:
        """The claims as the ledger's verifier returns them (``key`` / ``request_id`` only when present)."""
        out: dict[str, object] = {
            "iss": self.iss,
            "aud": self.aud,
            "sub": self.sub,
            "tool_id": self.tool_id,
            "effect": self.effect,
            "call_id": self.call_id,
            "attempt": self.attempt,
            "jti": self.jti,
            "iat": self.iat,
            "exp": self.exp,
            "kid": self.kid,
        }
        if self.key is not None:
            out["key"] = self.key
        if self.request_id is not None:
            out["request_id"] = self.request_id
        if self.derivation is not None:
            out["derivation"] = self.derivation.as_dict()
        if self.mode is not None:
            out["mode"] = self.mode
        return out

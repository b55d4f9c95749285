"""Every capability-verification vector (test/vectors/capability-verification.json) gets
exactly the ledger's verdict from the Python sink's verifier: the same claims, or the
same refusal reason, said before or after the signature held."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import REPO_ROOT
from keycap_client.sink import CapabilityVerifier, KernelJwksSource, SinkRefusal, VerifierOptions

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/capability-verification.json").read_text())


def verifier_for(vector: dict[str, Any]) -> CapabilityVerifier:
    jwks = vector["jwks"]

    def fetch() -> str:
        if jwks is None:
            raise ConnectionError("the vector's key set cannot be fetched")
        return json.dumps(jwks)

    v = VECTORS["verifier"]
    options = VerifierOptions(
        issuer=v["issuer"],
        audience=v["audience"],
        max_token_bytes=v["max_token_bytes"],
        max_lifetime_seconds=v["max_lifetime_seconds"],
        clock_tolerance_seconds=v["clock_tolerance_seconds"],
        clock=lambda: float(vector["clock"]),
    )
    return CapabilityVerifier(KernelJwksSource(fetch, refetch_cooldown=0), options)


def authorization_of(vector: dict[str, Any]) -> str | None:
    if "authorization" in vector:
        auth: str | None = vector["authorization"]
        return auth
    return f"Bearer {vector['token']}"


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_vector_gets_the_ledgers_verdict(vector: dict[str, Any]) -> None:
    verifier = verifier_for(vector)
    expect = vector["expect"]
    if "verified" in expect:
        assert verifier.verify(authorization_of(vector)).as_dict() == expect["verified"]
    else:
        with pytest.raises(SinkRefusal) as caught:
            verifier.verify(authorization_of(vector))
        assert (caught.value.reason, caught.value.signature_verified) == (expect["refused"], expect["signature_verified"])


@pytest.mark.parametrize("vector", VECTORS["vectors"][:3] + VECTORS["vectors"][50:56], ids=lambda v: v["name"])
def test_async_verification_gives_the_same_verdict(vector: dict[str, Any]) -> None:
    verifier = verifier_for(vector)
    expect = vector["expect"]
    if "verified" in expect:
        assert asyncio.run(verifier.verify_async(authorization_of(vector))).as_dict() == expect["verified"]
    else:
        with pytest.raises(SinkRefusal) as caught:
            asyncio.run(verifier.verify_async(authorization_of(vector)))
        assert caught.value.reason == expect["refused"]

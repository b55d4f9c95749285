"""Every capability-verification vector (test/vectors/capability-verification.json) gets
exactly the ledger's verdict from the Python sink's verifier: the same claims, or the
same refusal reason, said before or after the signature held. By default the verifier
refuses a shadow or replay capability's typ (``expect``); with ``sandbox="verify"`` it
verifies it as the ledger does (``expect_by.ledger``); a :class:`Sink` refuses it as not
live, with the verified tool (``expect_by.sink``), as the TypeScript and Go sinks do."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import pytest

from conftest import REPO_ROOT
from keycap_client.sink import (
    AdmissionContext,
    CapabilityVerifier,
    InMemorySpentStore,
    KernelJwksSource,
    Sink,
    SinkRefusal,
    SinkRefusalEvent,
    VerifierOptions,
)
from sink_support import unb64url, verdict_for

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/capability-verification.json").read_text())


def options_for(vector: dict[str, Any], sandbox: Literal["refuse", "verify"] = "refuse") -> VerifierOptions:
    v = VECTORS["verifier"]
    return VerifierOptions(
        issuer=v["issuer"],
        audience=v["audience"],
        max_token_bytes=v["max_token_bytes"],
        max_lifetime_seconds=v["max_lifetime_seconds"],
        clock_tolerance_seconds=v["clock_tolerance_seconds"],
        clock=lambda: float(vector["clock"]),
        sandbox=sandbox,
    )


def keys_for(vector: dict[str, Any]) -> KernelJwksSource:
    jwks = vector["jwks"]

    def fetch() -> str:
        if jwks is None:
            raise ConnectionError("the vector's key set cannot be fetched")
        return json.dumps(jwks)

    return KernelJwksSource(fetch, refetch_cooldown=0)


def verifier_for(vector: dict[str, Any], sandbox: Literal["refuse", "verify"] = "refuse") -> CapabilityVerifier:
    return CapabilityVerifier(keys_for(vector), options_for(vector, sandbox))


def authorization_of(vector: dict[str, Any]) -> str | None:
    if "authorization" in vector:
        auth: str | None = vector["authorization"]
        return auth
    return f"Bearer {vector['token']}"


def check_verdict(verifier: CapabilityVerifier, vector: dict[str, Any], expect: dict[str, Any]) -> None:
    if "verified" in expect:
        assert verifier.verify(authorization_of(vector)).as_dict() == expect["verified"]
    else:
        with pytest.raises(SinkRefusal) as caught:
            verifier.verify(authorization_of(vector))
        assert (caught.value.reason, caught.value.signature_verified) == (expect["refused"], expect["signature_verified"])


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_vector_gets_the_ledgers_verdict(vector: dict[str, Any]) -> None:
    check_verdict(verifier_for(vector), vector, vector["expect"])


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_vector_gets_the_ledgers_own_verdict_when_sandbox_capabilities_are_verified(vector: dict[str, Any]) -> None:
    check_verdict(verifier_for(vector, "verify"), vector, verdict_for(vector, "ledger"))


def tool_ids() -> list[str]:
    """Every tool a vector's token names, so that the sink serves them all."""
    ids = set()
    for v in VECTORS["vectors"]:
        try:
            claims = json.loads(unb64url(v["token"].split(".")[1]))
        except (ValueError, IndexError):
            continue  # a deliberately broken token names no tool
        if isinstance(claims, dict) and isinstance(claims.get("tool_id"), str):
            ids.add(claims["tool_id"])
    return sorted(ids)


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_a_sink_gives_every_sinks_verdict(vector: dict[str, Any]) -> None:
    """A sink serving every tool, with a spent store, admits exactly what the ledger verifies
    live, and refuses the rest with every sink's reason, each refusal reported once."""
    events: list[SinkRefusalEvent] = []
    sink = Sink(
        "vectors",
        tools=tool_ids(),
        keys=keys_for(vector),
        verifier=options_for(vector),
        spent_store=InMemorySpentStore(lambda: float(vector["clock"])),
        on_refusal=events.append,
    )
    expect = verdict_for(vector, "sink")
    context = AdmissionContext("vectors", "127.0.0.1:1")
    if "verified" in expect:
        assert sink.admit(authorization_of(vector), context).as_dict() == expect["verified"]
        assert events == []
        return
    with pytest.raises(SinkRefusal) as caught:
        sink.admit(authorization_of(vector), context)
    assert (caught.value.reason, caught.value.signature_verified) == (expect["refused"], expect["signature_verified"])
    assert [(e.error.reason, e.tool_id_verified) for e in events] == [(expect["refused"], expect["signature_verified"])]


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

"""keycap_client.mcp in process (the SDK's own in-memory Client against an MCPServer):
every capability-verification vector that applies gets the ledger's verdict through the
middleware, the derivation claim is checked and binds the arguments, and every refusal
comes before the handler, as an MCP error carrying keycap's reason."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import MCPServer
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, RequestParamsMeta

from keycap_client.key_derivation import KeyDerivationSpec, derive_key
from keycap_client.mcp import (
    META_CAPABILITY,
    KeycapMcpMiddleware,
    McpRefusalEvent,
    current_call,
    governed_tool_id,
    idempotency_key,
)
from keycap_client.sink import InMemorySpentStore, KernelJwksSource, VerifierOptions, current_capability
from sink_support import VECTORS, b64url, sign, vector_key

TOOL = "charge"
TOOL_ID = governed_tool_id("payments", TOOL)


def kernel_jwks() -> KernelJwksSource:
    """The vectors' current kernel key, as a kernel would publish it."""
    jwk = {k: v for k, v in VECTORS["keys"]["kernel-current"].items() if k != "d"}
    return KernelJwksSource(lambda: json.dumps({"keys": [jwk]}), refetch_cooldown=0)


def claims(effect: str = "idempotent", tool_id: str = TOOL_ID, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    out: dict[str, Any] = {
        "iss": "keycap-kernel",
        "aud": "keycap-ledger",
        "sub": "unit-runtime",
        "tool_id": tool_id,
        "effect": effect,
        "call_id": "call-1",
        "attempt": 1,
        "jti": f"jti-{time.monotonic_ns()}",
        "iat": now,
        "exp": now + 300,
    }
    if effect == "queryable":
        out["request_id"] = "req-1"
    return {**out, **extra}


def token(payload: Mapping[str, Any]) -> str:
    kid, key = vector_key("kernel-current")
    return sign({"alg": "EdDSA", "typ": "keycap-capability+jwt", "kid": kid}, payload, key)


def idempotent_token(arguments: Mapping[str, Any], fields: list[str] | None = None, run_id: str | None = None, **extra: Any) -> str:
    """A capability whose key and derivation claim fit ``arguments``, as the kernel mints it."""
    fields = fields or ["/order_id"]
    spec = KeyDerivationSpec(fields, 1, ("run_id",) if run_id is not None else ())
    key = derive_key(TOOL_ID, spec, dict(arguments), run_id or "")
    derivation = {"version": 1, "fields": fields, "context": {} if run_id is None else {"run_id": run_id}}
    return token(claims(key=key, derivation=derivation, **extra))


class Harness:
    """An MCP server with one governed tool (``charge``) and one that is not (``echo``)."""

    def __init__(self, tool_id: str = TOOL_ID, options: VerifierOptions | None = None, keys: KernelJwksSource | None = None) -> None:
        self.calls: list[tuple[str | None, str]] = []
        self.refusals: list[McpRefusalEvent] = []
        self.server = MCPServer("payments")
        self.middleware = KeycapMcpMiddleware(
            "payments",
            tools={TOOL: tool_id},
            keys=keys or kernel_jwks(),
            verifier=options,
            spent_store=InMemorySpentStore(),
            on_refusal=self.refusals.append,
        ).install(self.server)

        @self.server.tool()
        async def charge(order_id: str, amount_cents: int = 0) -> str:
            call = current_call()
            assert current_capability() is call.capability
            self.calls.append((call.idempotency_key, call.capability.effect))
            return f"charged {order_id}"

        @self.server.tool()
        def echo(text: str) -> str:
            return text

    async def call(self, arguments: dict[str, Any], capability: object = None, name: str = TOOL) -> Any:
        meta = RequestParamsMeta(**{META_CAPABILITY: capability}) if capability is not None else None  # type: ignore[typeddict-unknown-key]
        async with Client(self.server) as client:
            try:
                return await client.call_tool(name, arguments, meta=meta)
            except MCPError as err:
                # Caught inside the session: leaving it with an error raises an ExceptionGroup.
                return err

    def refused(self, arguments: dict[str, Any], capability: object = None) -> MCPError:
        err = asyncio.run(self.call(arguments, capability))
        assert isinstance(err, MCPError), f"admitted: {err}"
        assert self.calls == [], "the handler ran"
        return err


def test_a_capability_for_exactly_these_arguments_runs_the_handler_with_its_key() -> None:
    h = Harness()
    args: dict[str, Any] = {"order_id": "o-1", "amount_cents": 500}
    cap = idempotent_token(args)
    result = asyncio.run(h.call(args, cap))
    assert result.is_error is False
    key = derive_key(TOOL_ID, KeyDerivationSpec(["/order_id"]), args)
    assert h.calls == [(key, "idempotent")]
    # A retry with the same capability and arguments is the same call again: admitted.
    asyncio.run(h.call({"amount_cents": 500, "order_id": "o-1"}, cap))
    assert h.calls == [(key, "idempotent")] * 2


def test_the_arguments_are_bound_to_the_key() -> None:
    h = Harness()
    cap = idempotent_token({"order_id": "o-1", "amount_cents": 500}, fields=["/order_id", "/amount_cents"], run_id="run-A")
    err = h.refused({"order_id": "o-1", "amount_cents": 5000}, cap)
    assert (err.code, err.data) == (INTERNAL_ERROR, {"reason": "KEY_MISMATCH", "domain": "keycap.dev", "tool_id": TOOL_ID, "metadata": {}})
    assert h.refused({"order_id": "o-2", "amount_cents": 500}, cap).data["reason"] == "KEY_MISMATCH"
    # A field the derivation does not name is not bound (ADR 0026): same key, admitted.
    asyncio.run(h.call({"order_id": "o-1", "amount_cents": 500, "note": "retry"}, cap))
    assert len(h.calls) == 1
    assert [e.refusal.reason for e in h.refusals] == ["KEY_MISMATCH", "KEY_MISMATCH"]


def test_arguments_that_cannot_be_keyed_are_invalid_params() -> None:
    h = Harness()
    cap = idempotent_token({"order_id": "o-1", "amount_cents": 500}, fields=["/order_id", "/amount_cents"])
    err = h.refused({"order_id": "o-1"}, cap)
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INVALID_PARAMS, "KEY_FIELD_MISSING", {"field": "/amount_cents"})
    err = h.refused({"order_id": "o-1", "amount_cents": 2**60}, cap)
    assert (err.code, err.data["reason"]) == (INVALID_PARAMS, "KEY_FIELD_UNSAFE_INTEGER")


def test_a_capability_without_the_derivation_claim_cannot_bind_arguments() -> None:
    h = Harness()
    err = h.refused({"order_id": "o-1"}, token(claims(key="k" * 43)))
    assert (err.data["reason"], err.data["metadata"]) == ("KEY_MISMATCH", {"claim": "derivation"})


@pytest.mark.parametrize(
    "effect,derivation",
    [
        ("idempotent", "x"),
        ("idempotent", {"version": 1, "fields": ["/order_id"], "context": {}, "extra": 1}),
        ("idempotent", {"version": 0, "fields": ["/order_id"], "context": {}}),
        ("idempotent", {"version": 1.5, "fields": ["/order_id"], "context": {}}),
        ("idempotent", {"version": 1, "fields": [], "context": {}}),
        ("idempotent", {"version": 1, "fields": [1], "context": {}}),
        ("idempotent", {"version": 1, "fields": ["/order_id"], "context": []}),
        ("idempotent", {"version": 1, "fields": ["/order_id"], "context": {"run_id": 7}}),
        ("idempotent", {"version": 1, "fields": ["/order_id"], "context": {"session": "s"}}),
        ("idempotent", {"version": 1, "fields": ["/order_id"]}),
        ("unsafe", {"version": 1, "fields": ["/order_id"], "context": {}}),
    ],
)
def test_a_misshapen_derivation_claim_is_claim_invalid(effect: str, derivation: object) -> None:
    h = Harness()
    extra: dict[str, Any] = {"key": "k" * 43} if effect == "idempotent" else {}
    err = h.refused({"order_id": "o-1"}, token(claims(effect, derivation=derivation, **extra)))
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INTERNAL_ERROR, "CLAIM_INVALID", {"claim": "derivation"})


def test_missing_other_tools_and_reused_capabilities_are_refused_before_the_handler() -> None:
    h = Harness()
    assert h.refused({"order_id": "o-1"}).data["reason"] == "CAPABILITY_MISSING"
    assert h.refused({"order_id": "o-1"}, "").data["reason"] == "CAPABILITY_MISSING"
    assert h.refused({"order_id": "o-1"}, 17).data["reason"] == "CAPABILITY_MALFORMED"
    other = token(claims("unsafe", tool_id=governed_tool_id("payments", "refund")))
    err = h.refused({"order_id": "o-1"}, other)
    assert (err.data["reason"], err.data["tool_id"]) == ("TOOL_NOT_ACCEPTED", TOOL_ID)
    expired = token(claims(iat=int(time.time()) - 600, exp=int(time.time()) - 60))
    assert h.refused({"order_id": "o-1"}, expired).data["reason"] == "EXPIRED"
    unsafe = token(claims("unsafe"))
    asyncio.run(h.call({"order_id": "o-1"}, unsafe))
    assert h.calls == [(None, "unsafe")]
    h.calls.clear()
    assert h.refused({"order_id": "o-1"}, unsafe).data["reason"] == "CAPABILITY_REUSED"
    queryable = token(claims("queryable"))
    asyncio.run(h.call({"order_id": "o-1"}, queryable))
    assert h.calls == [("req-1", "queryable")]
    assert [e.tool_id for e in h.refusals] == [TOOL_ID] * 6


def test_an_ungoverned_tool_is_untouched_and_has_no_key() -> None:
    h = Harness()
    result = asyncio.run(h.call({"text": "hi"}, name="echo"))
    assert result.content[0].text == "hi"
    with pytest.raises(LookupError):
        idempotency_key()


# --- the published capability-verification vectors, through the middleware ----------

APPLICABLE = [v for v in VECTORS["vectors"] if "authorization" not in v]


@pytest.mark.parametrize("vector", APPLICABLE, ids=[v["name"] for v in APPLICABLE])
def test_capability_vector_gets_the_ledgers_verdict_through_the_middleware(vector: dict[str, Any]) -> None:
    """The token travels in _meta (an Authorization header's parsing does not apply to MCP).
    Refused: the same reason as the ledger's. Verified: the middleware's own rules come next,
    so an idempotent vector (no derivation claim) is KEY_MISMATCH and the others run."""
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
    expect = vector["expect"]
    tool_id = expect["verified"]["tool_id"] if "verified" in expect else "payments.charge"
    h = Harness(tool_id=tool_id, options=options, keys=KernelJwksSource(fetch, refetch_cooldown=0))
    if "refused" in expect:
        assert h.refused({"order_id": "o-1"}, vector["token"]).data["reason"] == expect["refused"]
    elif expect["verified"]["effect"] == "idempotent":
        assert h.refused({"order_id": "o-1"}, vector["token"]).data["reason"] == "KEY_MISMATCH"
    else:
        asyncio.run(h.call({"order_id": "o-1"}, vector["token"]))
        assert h.calls == [(expect["verified"].get("request_id"), expect["verified"]["effect"])]


def test_sign_helper_is_base64url() -> None:
    assert b64url(b"\xff") == "_w"

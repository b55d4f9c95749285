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

from keycap_client.key_derivation import KeyDerivationSpec, derive_key, derive_key_from_parsed
from keycap_client.mcp import (
    META_CAPABILITY,
    META_IDEMPOTENCY_KEY,
    KeycapMcpMiddleware,
    McpRefusalEvent,
    current_call,
    governed_tool_id,
    idempotency_key,
)
from conftest import REPO_ROOT
from keycap_client.mcp.middleware import _binding_refusal
from keycap_client.sink.claims import DerivationClaim, VerifiedCapability
from keycap_client.sink import InMemorySpentStore, KernelJwksSource, SpentCapability, VerifierOptions, current_capability
from sink_support import VECTORS, b64url, sign, vector_key, verdict_for

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

    def __init__(
        self,
        tool_id: str = TOOL_ID,
        options: VerifierOptions | None = None,
        keys: KernelJwksSource | None = None,
        spent_store: InMemorySpentStore | None = None,
    ) -> None:
        self.calls: list[tuple[str | None, str]] = []
        self.refusals: list[McpRefusalEvent] = []
        self.server = MCPServer("payments")
        self.middleware = KeycapMcpMiddleware(
            "payments",
            tools={TOOL: tool_id},
            keys=keys or kernel_jwks(),
            verifier=options,
            spent_store=spent_store or InMemorySpentStore(),
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

    async def call(self, arguments: dict[str, Any], capability: object = None, name: str = TOOL, sent_key: str | None = None) -> Any:
        fields: dict[str, Any] = {}
        if capability is not None:
            fields[META_CAPABILITY] = capability
        if sent_key is not None:
            fields[META_IDEMPOTENCY_KEY] = sent_key
        meta = RequestParamsMeta(**fields) if fields else None  # type: ignore[typeddict-item]
        async with Client(self.server) as client:
            try:
                return await client.call_tool(name, arguments, meta=meta)
            except MCPError as err:
                # Caught inside the session: leaving it with an error raises an ExceptionGroup.
                return err

    def refused(self, arguments: dict[str, Any], capability: object = None, sent_key: str | None = None) -> MCPError:
        err = asyncio.run(self.call(arguments, capability, sent_key=sent_key))
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
    derived = derive_key(TOOL_ID, KeyDerivationSpec(["/order_id", "/amount_cents"], 1, ("run_id",)), {"order_id": "o-1", "amount_cents": 5000}, "run-A")
    assert (err.code, err.data) == (
        INVALID_PARAMS,
        {"reason": "KEY_MISMATCH", "domain": "keycap.dev", "tool_id": TOOL_ID, "metadata": {"derived_key": derived}},
    )
    assert h.refused({"order_id": "o-2", "amount_cents": 500}, cap).data["reason"] == "KEY_MISMATCH"
    # A field the derivation does not name is not bound (ADR 0026): same key, admitted.
    asyncio.run(h.call({"order_id": "o-1", "amount_cents": 500, "note": "retry"}, cap))
    assert len(h.calls) == 1
    assert [e.refusal.reason for e in h.refusals] == ["KEY_MISMATCH", "KEY_MISMATCH"]


def test_arguments_that_give_no_key_are_key_mismatch_naming_the_rederivation_reason() -> None:
    h = Harness()
    cap = idempotent_token({"order_id": "o-1", "amount_cents": 500}, fields=["/order_id", "/amount_cents"])
    err = h.refused({"order_id": "o-1"}, cap)
    assert (err.code, err.data["reason"], err.data["metadata"]) == (
        INVALID_PARAMS,
        "KEY_MISMATCH",
        {"rederivation": "KEY_FIELD_MISSING", "field": "/amount_cents"},
    )
    err = h.refused({"order_id": "o-1", "amount_cents": None}, cap)
    assert err.data["metadata"] == {"rederivation": "KEY_FIELD_NULL", "field": "/amount_cents"}


def test_an_integer_beyond_2_pow_53_is_taken_as_its_double_not_refused() -> None:
    """As the TypeScript middleware: the already-parsed value is the number the handler gets,
    keyed as the double JSON.parse makes of it, so the refusal is KEY_MISMATCH with that key."""
    h = Harness()
    cap = idempotent_token({"order_id": "o-1", "amount_cents": 500}, fields=["/order_id", "/amount_cents"])
    err = h.refused({"order_id": "o-1", "amount_cents": 2**60 + 1}, cap)
    as_double = derive_key(TOOL_ID, KeyDerivationSpec(["/order_id", "/amount_cents"]), {"order_id": "o-1", "amount_cents": float(2**60)})
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INVALID_PARAMS, "KEY_MISMATCH", {"derived_key": as_double})
    assert derive_key_from_parsed(TOOL_ID, KeyDerivationSpec(["/n"]), {"n": 10**20}) == derive_key(
        TOOL_ID, KeyDerivationSpec(["/n"]), {"n": 1e20}
    )


def test_a_capability_without_the_derivation_claim_is_claim_missing() -> None:
    h = Harness()
    err = h.refused({"order_id": "o-1"}, token(claims(key="k" * 43)))
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INVALID_PARAMS, "CLAIM_MISSING", {"claim": "derivation"})


@pytest.mark.parametrize(
    "fields,problem",
    [
        (["order_id"], "INVALID_JSON_POINTER"),
        (["/order_id~2"], "INVALID_JSON_POINTER"),
        (["/order_id", "/order_id"], "KEY_DERIVATION_DUPLICATE_FIELD"),
    ],
)
def test_a_well_shaped_claim_that_is_no_usable_derivation_is_claim_invalid(fields: list[str], problem: str) -> None:
    h = Harness()
    derivation = {"version": 1, "fields": fields, "context": {}}
    err = h.refused({"order_id": "o-1"}, token(claims(key="k" * 43, derivation=derivation)))
    assert (err.code, err.data["reason"], err.data["metadata"]) == (
        INVALID_PARAMS,
        "CLAIM_INVALID",
        {"claim": "derivation", "problem": problem},
    )


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
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INVALID_PARAMS, "CLAIM_INVALID", {"claim": "derivation"})


def test_the_checks_come_in_the_documented_order() -> None:
    h = Harness()
    # A capability for another tool, sent with another key: the tool comes first.
    other = token(claims("unsafe", tool_id=governed_tool_id("payments", "refund")))
    assert h.refused({"order_id": "o-1"}, other, sent_key="k").data["reason"] == "TOOL_NOT_ACCEPTED"
    # The _meta key before single use: the Unsafe capability is not spent by a refused call...
    unsafe = token(claims("unsafe"))
    err = h.refused({"order_id": "o-1"}, unsafe, sent_key="k")
    assert (err.code, err.data["reason"], err.data["metadata"]) == (INVALID_PARAMS, "KEY_MISMATCH", {})
    asyncio.run(h.call({"order_id": "o-1"}, unsafe))
    assert h.calls == [(None, "unsafe")]
    h.calls.clear()
    # ...and before the derivation claim: an Idempotent capability without one.
    no_claim = token(claims(key="k" * 43))
    assert h.refused({"order_id": "o-1"}, no_claim, sent_key="another").data["reason"] == "KEY_MISMATCH"
    assert h.refused({"order_id": "o-1"}, no_claim, sent_key="k" * 43).data["reason"] == "CLAIM_MISSING"
    # The capability's own key beside it, for these arguments: admitted.
    args: dict[str, Any] = {"order_id": "o-9"}
    cap = idempotent_token(args)
    key = derive_key(TOOL_ID, KeyDerivationSpec(["/order_id"]), args)
    asyncio.run(h.call(args, cap, sent_key=key))
    assert h.calls == [(key, "idempotent")]
    assert [e.refusal.reason for e in h.refusals] == ["TOOL_NOT_ACCEPTED", "KEY_MISMATCH", "KEY_MISMATCH", "CLAIM_MISSING"]


def test_keycap_unable_to_decide_is_internal_error() -> None:
    def unreachable() -> str:
        raise ConnectionError("the kernel is down")

    h = Harness(keys=KernelJwksSource(unreachable, refetch_cooldown=0))
    err = h.refused({"order_id": "o-1"}, token(claims("unsafe")))
    assert (err.code, err.data["reason"]) == (INTERNAL_ERROR, "SIGNING_KEYS_UNAVAILABLE")

    class BrokenStore(InMemorySpentStore):
        def spend(self, spent: SpentCapability) -> bool:
            raise OSError("the database is down")

    h = Harness(spent_store=BrokenStore())
    err = h.refused({"order_id": "o-1"}, token(claims("unsafe")))
    assert (err.code, err.data["reason"]) == (INTERNAL_ERROR, "DATABASE_UNAVAILABLE")


def test_missing_other_tools_and_reused_capabilities_are_refused_before_the_handler() -> None:
    h = Harness()
    assert h.refused({"order_id": "o-1"}).data["reason"] == "CAPABILITY_MISSING"
    assert h.refused({"order_id": "o-1"}, "").data["reason"] == "CAPABILITY_MISSING"
    # Blank as JavaScript trims it (the TypeScript middleware's rule), a BOM included.
    assert h.refused({"order_id": "o-1"}, " \t\ufeff\u3000").data["reason"] == "CAPABILITY_MISSING"
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
    assert [e.tool_id for e in h.refusals] == [TOOL_ID] * 7


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
    Refused: the same reason as every sink's (``expect_by.sink``: a shadow or replay
    capability is SANDBOX_CAPABILITY_NOT_LIVE), InternalError only when keycap could not decide.
    Verified: the middleware's own rules come next, so an idempotent vector (the corpus
    predates the derivation claim) is CLAIM_MISSING and the others run."""
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
    expect = verdict_for(vector, "sink")
    claims = verdict_for(vector, "ledger")
    tool_id = claims["verified"]["tool_id"] if "verified" in claims else "payments.charge"
    h = Harness(tool_id=tool_id, options=options, keys=KernelJwksSource(fetch, refetch_cooldown=0))
    if "refused" in expect:
        err = h.refused({"order_id": "o-1"}, vector["token"])
        undecided = expect["refused"] == "SIGNING_KEYS_UNAVAILABLE"
        assert (err.data["reason"], err.code) == (expect["refused"], INTERNAL_ERROR if undecided else INVALID_PARAMS)
    elif expect["verified"]["effect"] == "idempotent":
        err = h.refused({"order_id": "o-1"}, vector["token"])
        assert (err.data["reason"], err.data["metadata"], err.code) == ("CLAIM_MISSING", {"claim": "derivation"}, INVALID_PARAMS)
    else:
        asyncio.run(h.call({"order_id": "o-1"}, vector["token"]))
        assert h.calls == [(expect["verified"].get("request_id"), expect["verified"]["effect"])]


def test_sign_helper_is_base64url() -> None:
    assert b64url(b"\xff") == "_w"


# --- the published key-derivation vectors, through the argument binding ----------------

KEY_VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/key-derivation.json").read_text())
# The middleware receives arguments the SDK already decoded: byte-level (UTF-8) vectors do not apply.
TEXTUAL = [v for v in KEY_VECTORS["vectors"] if "arguments_json" in v and "run_id_utf8_hex" not in v["context"]]


def _capability_for(vector: dict[str, Any], key: str) -> VerifiedCapability:
    d = vector["derivation"]
    run_id = vector["context"].get("run_id") if "run_id" in d.get("context_fields", []) else None
    derivation = DerivationClaim(version=d.get("version") or 1, fields=tuple(d["fields"]), run_id=run_id)
    now = int(time.time())
    return VerifiedCapability(
        iss="keycap-kernel", aud="keycap-ledger", sub="unit-runtime", tool_id=vector["tool_id"], effect="idempotent",
        call_id="call-1", attempt=1, jti="jti-1", iat=now, exp=now + 300, kid="k", key=key, derivation=derivation,
    )  # fmt: skip


@pytest.mark.parametrize("vector", TEXTUAL, ids=[v["name"] for v in TEXTUAL])
def test_key_vector_through_the_argument_binding(vector: dict[str, Any]) -> None:
    """As the TypeScript middleware's run: a key vector's parsed arguments are bound to its key
    (and refused KEY_MISMATCH, with that key, against another); a refused vector binds nothing."""
    try:
        parsed = json.loads(vector["arguments_json"])
    except (ValueError, RecursionError):
        pytest.skip("not JSON to a lenient parser: the transport would never deliver it")
    expect = vector["expect"]
    if "key" in expect:
        assert _binding_refusal(_capability_for(vector, expect["key"]), parsed) is None
        refusal = _binding_refusal(_capability_for(vector, expect["key"] + "x"), parsed)
        assert refusal is not None and (refusal.reason, dict(refusal.metadata)) == ("KEY_MISMATCH", {"derived_key": expect["key"]})
    else:
        refusal = _binding_refusal(_capability_for(vector, "some-key"), parsed)
        assert refusal is not None and refusal.reason in {"KEY_MISMATCH", "CLAIM_INVALID"}
        if refusal.reason == "CLAIM_INVALID":
            assert refusal.metadata["problem"] == expect["error"]
        elif expect["error"] not in {"ARGUMENTS_DUPLICATE_MEMBER", "ARGUMENTS_NOT_JSON", "KEY_FIELD_UNSAFE_INTEGER"}:
            # The value still shows the problem: the same reason as the kernel's. (A duplicate
            # member collapsed in the parse, Python's json reads NaN, and an integer beyond
            # 2^53 is keyed as its double.)
            assert refusal.metadata["rederivation"] == expect["error"]

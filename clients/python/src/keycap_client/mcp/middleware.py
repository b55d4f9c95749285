"""keycap's middleware for MCP servers written with the official Python SDK (issue 29).

A ``tools/call`` of a governed tool runs its handler only under a capability the kernel
minted for exactly this call: ``_meta["io.keycap/capability"]`` (sent by ``keycap mcp``)
must verify with the ledger's profile (keycap_client.sink), be live (a shadow or replay
capability, ADR 0028, is refused SANDBOX_CAPABILITY_NOT_LIVE), name this tool, agree with a
``_meta["io.keycap/idempotency-key"]`` sent beside it, and then
- Unsafe, Queryable: be spent here for the first time (a spent store is required);
- Idempotent: carry the ``derivation`` claim (ADR 0026; CLAIM_MISSING, CLAIM_INVALID),
  from which the key is derived again over the arguments this server received; another
  key, or none, is KEY_MISMATCH, so a capability minted for one call cannot carry another
  call's arguments.
Reasons, metadata, error codes and this order are the TypeScript and Go middlewares'.
Anything else is refused before the handler runs, as an MCP error with keycap's reason
(errors.py), and recorded in keycap's refusal store under ``sink:<server name>`` against
the called tool's id. Tools that are not governed pass through untouched.

It is the SDK's context-tier ``ServerMiddleware``: it runs before params validation and
the handler, on both ``MCPServer`` and the low-level ``Server``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

from keycap_client import reasons
from keycap_client.key_derivation import KeyDerivationError, KeyDerivationSpec, derive_key_from_parsed, validate_derivation
from keycap_client.mcp.call import GovernedCall, _current
from keycap_client.mcp.errors import keycap_mcp_error
from keycap_client.mcp.meta_keys import META_CAPABILITY, META_IDEMPOTENCY_KEY
from keycap_client.sink import _current as sink_current
from keycap_client.sink.claims import VerifiedCapability
from keycap_client.sink.keys import PublicKeySource
from keycap_client.sink.refusal import SinkRefusal, UnverifiedInfo
from keycap_client.sink.refusal_recorder import RefusalRecorder, RejectionInput
from keycap_client.sink.sink import sink_service
from keycap_client.sink.spent_store import InMemorySpentStore, SpentCapability, SpentStore
from keycap_client.sink.verifier import _JS_WHITESPACE, CapabilityVerifier, VerifierOptions

__all__ = ["KeycapMcpMiddleware", "McpRefusal", "McpRefusalEvent", "governed_tool_id"]

_log = logging.getLogger("keycap_client.mcp")


def governed_tool_id(server: str, tool: str) -> str:
    """The keycap tool id ``keycap mcp`` registers for ``tool`` of the upstream it calls
    ``server`` (services/mcp/src/governed-tools.ts ``kernelToolId``): ``mcp:<server>/<tool>``."""
    return f"mcp:{server}/{tool}"


@dataclass(frozen=True)
class McpRefusal:
    """Why a governed call was refused: the reason, its gRPC code name, and what is known."""

    reason: str
    code_name: str
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    signature_verified: bool = False


@dataclass(frozen=True)
class McpRefusalEvent:
    """A refusal as the ``on_refusal`` hook sees it (after it is recorded)."""

    server: str
    tool_name: str
    tool_id: str
    refusal: McpRefusal


class _Server(Protocol):
    @property
    def middleware(self) -> list[Any]: ...


class KeycapMcpMiddleware:
    """Governs the named tools of one MCP server.

    ``name``: the server's name: its refusals are ``sink:<name>``, and (unless ``tools``
    maps them) its tools' ids are ``mcp:<name>/<tool>``, as ``keycap mcp`` names them
    when its policy calls this upstream ``name``. ``tools``: the governed MCP tool names,
    or a mapping of MCP tool name to keycap tool id. ``keys``: the kernel's signing keys
    (:class:`~keycap_client.sink.KernelJwksSource`). ``spent_store``: required to admit
    Unsafe and Queryable calls (single use); without one they are refused
    EFFECT_CLASS_MISMATCH. ``refusals``: keycap's refusal store
    (:class:`~keycap_client.sink.MongoRefusalRecorder` with ``service="sink:<name>"``).

    Example::

        server = MCPServer("payments")
        KeycapMcpMiddleware("payments", tools=["charge"], keys=keys, refusals=recorder).install(server)

        @server.tool()
        async def charge(order_id: str, amount_cents: int) -> str:
            return stripe.charge(order_id, amount_cents, idempotency_key=idempotency_key())
    """

    def __init__(
        self,
        name: str,
        *,
        tools: Mapping[str, str] | Iterable[str],
        keys: PublicKeySource,
        verifier: VerifierOptions | None = None,
        spent_store: SpentStore | None = None,
        refusals: RefusalRecorder | None = None,
        on_refusal: Callable[[McpRefusalEvent], None] | None = None,
    ) -> None:
        self.service = sink_service(name)
        self.name = name
        self.tools: dict[str, str] = (
            dict(tools) if isinstance(tools, Mapping) else {t: governed_tool_id(name, t) for t in tools}
        )
        if not self.tools:
            raise ValueError("name the governed tools (tools=[...] or {mcp name: keycap tool id})")
        # Sandbox capabilities are verified so that their refusal names the verified tool and
        # says why (not live), rather than an unverified WRONG_TOKEN_TYPE.
        self.verifier = CapabilityVerifier(keys, replace(verifier or VerifierOptions(), sandbox="verify"))
        self.spent_store = spent_store
        self.refusals = refusals
        self.on_refusal = on_refusal

    def install(self, server: _Server) -> KeycapMcpMiddleware:
        """Appends this middleware to ``server.middleware`` (``MCPServer`` or ``Server``):
        innermost of the chain, so the SDK's tracing still sees the refusal."""
        server.middleware.append(self)
        return self

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if ctx.params is not None else {}
        name = params.get("name")
        tool_id = self.tools.get(name) if ctx.method == "tools/call" and isinstance(name, str) else None
        if tool_id is None or ctx.request_id is None:
            return await call_next(ctx)
        assert isinstance(name, str)
        try:
            call = await self._admit(name, tool_id, params, _peer_of(ctx))
        except MCPError:
            raise
        except Exception:
            # Admission refuses with MCPError only; anything else is a defect, said as one
            # (not recorded: there is no refusal to record, as in the TypeScript middleware).
            _log.exception("the MCP middleware failed to admit the call")
            raise keycap_mcp_error(_code_name(reasons.INTERNAL), reasons.INTERNAL, "the MCP sink failed to admit the call", tool_id) from None
        token = _current.set(call)
        sink_token = sink_current.current.set(call.capability)
        try:
            return await call_next(ctx)
        finally:
            sink_current.current.reset(sink_token)
            _current.reset(token)

    # --- admission ------------------------------------------------------------------

    async def _admit(self, name: str, tool_id: str, params: Mapping[str, Any], peer: str) -> GovernedCall:
        """The admitted call, or MCPError after the refusal is recorded. The order is fixed,
        as in the TypeScript and Go middlewares, so a call breaking several rules gets the
        same reason in every language (docs/mcp-server-python.md): the capability's own
        verification, the run mode (live only), the tool, the ``_meta`` idempotency key, single use (Unsafe,
        Queryable), then the derivation claim and the arguments' key (Idempotent)."""
        raw_meta = params.get("_meta")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        sent = meta.get(META_IDEMPOTENCY_KEY)
        # Only a string is a key to compare; the capability's own key is bound anyway.
        sent_key = sent if isinstance(sent, str) else None
        record = _Record(method=f"MCP tools/call {name}"[:256], tool_id=tool_id, peer=peer, attempted_key=sent_key or "")
        try:
            cap = await self.verifier.verify_async(_authorization_of(meta.get(META_CAPABILITY)))
        except SinkRefusal as err:
            raise await self._refuse(name, record.unverified(err.unverified), _from_sink(err)) from None
        record = record.verified(cap)
        refusal: McpRefusal | None
        if cap.mode is not None:
            # A server performs live effects: a shadow or replay capability grants none here.
            refusal = _refusal(
                reasons.SANDBOX_CAPABILITY_NOT_LIVE,
                f"server {self.name} performs live effects only; this capability is of a {cap.mode} run",
                {"mode": cap.mode},
            )
        elif cap.tool_id != tool_id:
            refusal = _refusal(reasons.TOOL_NOT_ACCEPTED, f"the capability is for tool {cap.tool_id[:128]!r}, not {tool_id!r}")
        elif sent_key is not None and sent_key != cap.key:
            # As a sink's Idempotency-Key header: a key beside the capability must be its key.
            refusal = _refusal(reasons.KEY_MISMATCH, f"_meta {META_IDEMPOTENCY_KEY} is not the capability's key")
        elif cap.effect != "idempotent":
            refusal = await self._spend(cap)
        else:
            # MCP's arguments are optional: absent is the empty object, as the gateway begins
            # such a call; anything else present (null included) is what was sent.
            refusal = _binding_refusal(cap, params["arguments"] if "arguments" in params else {})
        if refusal is not None:
            raise await self._refuse(name, record, refusal)
        return GovernedCall(tool_name=name, tool_id=tool_id, capability=cap)

    async def _spend(self, cap: VerifiedCapability) -> McpRefusal | None:
        store = self.spent_store
        if store is None:
            # Running an Unsafe effect without single use would be the double effect keycap exists to stop.
            return _refusal(reasons.EFFECT_CLASS_MISMATCH, f"server {self.name} has no spent store, so it admits idempotent capabilities only")
        spent = SpentCapability(
            sink=self.name,
            jti=cap.jti,
            tool_id=cap.tool_id,
            call_id=cap.call_id,
            effect=cap.effect,
            expires_at=datetime.fromtimestamp(cap.exp + self.verifier.options.clock_tolerance_seconds, timezone.utc),
        )
        try:
            first = store.spend(spent) if isinstance(store, InMemorySpentStore) else await asyncio.to_thread(store.spend, spent)
        except SinkRefusal as err:
            return _from_sink(err)
        except Exception:
            _log.exception("the spent-capability store failed")
            return _refusal(reasons.DATABASE_UNAVAILABLE, "the spent-capability store failed; retry")
        if not first:
            return _refusal(reasons.CAPABILITY_REUSED, f"this {cap.effect} capability was already used at server {self.name}")
        return None

    async def _refuse(self, name: str, record: _Record, refusal: McpRefusal) -> MCPError:
        """Records the refusal (never raising) and returns the MCP error to raise."""
        rejection = record.rejection(refusal)
        if self.refusals is not None:
            await asyncio.to_thread(self._record, rejection)
        if self.on_refusal is not None:
            try:
                self.on_refusal(McpRefusalEvent(self.name, name, record.tool_id, refusal))
            except Exception:  # the hook is the author's; its failure is not the caller's refusal
                _log.exception("the on_refusal hook failed")
        return keycap_mcp_error(refusal.code_name, refusal.reason, refusal.message, record.tool_id, refusal.metadata)

    def _record(self, rejection: RejectionInput) -> None:
        assert self.refusals is not None
        try:
            self.refusals.record(rejection)
        except Exception:  # a recorder that raises must not turn a refusal into a crash
            _log.exception("the refusal recorder failed; refusing anyway")


# --- helpers -------------------------------------------------------------------------


def _authorization_of(token: object) -> str | None:
    """The capability as the verifier reads it (an Authorization value): absent, null or
    blank (JavaScript's whitespace, as the TypeScript middleware trims) is CAPABILITY_MISSING;
    anything but a string is CAPABILITY_MALFORMED, never "missing"."""
    if token is None:
        return None
    if not isinstance(token, str):
        return "Bearer !"  # not a b64token: CAPABILITY_MALFORMED, as a header that is not Bearer
    if token.strip(_JS_WHITESPACE) == "":
        return None
    return f"Bearer {token}"


def _binding_refusal(cap: VerifiedCapability, arguments: object) -> McpRefusal | None:
    """An Idempotent capability bound to the arguments received (ADR 0026), with the reasons
    and metadata of the TypeScript and Go middlewares (services/sink/src/argument-binding.ts,
    clients/go/sink/call.go): CLAIM_MISSING without a ``derivation`` claim, CLAIM_INVALID for
    a claim that is no usable derivation, KEY_MISMATCH for arguments that give another key
    (``derived_key``) or none (``rederivation``: the reason they give none)."""
    d = cap.derivation
    if d is None:
        # Minted before ADR 0026 (renewed from an old journaled call): its key cannot be tied to any arguments.
        return _refusal(
            reasons.CLAIM_MISSING,
            'the capability has no "derivation" claim, so its key cannot be bound to these arguments; begin the call again with a current kernel',
            {"claim": "derivation"},
        )
    spec = KeyDerivationSpec(fields=d.fields, version=d.version, context_fields=("run_id",) if d.run_id is not None else ())
    try:
        validate_derivation(spec)
    except KeyDerivationError as err:
        return _refusal(
            reasons.CLAIM_INVALID,
            f'capability claim "derivation" is not a usable derivation: {err.message}',
            {"claim": "derivation", "problem": err.reason},
        )
    try:
        # An integer beyond 2^53 is taken as JSON.parse's double, not refused (see derive_key_from_parsed).
        derived = derive_key_from_parsed(cap.tool_id, spec, arguments, d.run_id or "")
    except KeyDerivationError as err:
        # Arguments the kernel would not key (a key field missing, not an object…) cannot be the ones it keyed.
        return _refusal(
            reasons.KEY_MISMATCH,
            f"the arguments received give no key under the capability's derivation ({err.reason}: {err.message}); "
            "the capability was minted for other arguments",
            {"rederivation": err.reason, **({"field": err.field} if err.field is not None else {})},
        )
    if derived != cap.key:
        return _refusal(
            reasons.KEY_MISMATCH,
            "the key derived from the arguments received is not the capability's key: the capability was minted for other arguments",
            {"derived_key": derived},
        )
    return None


def _refusal(reason: str, message: str, metadata: Mapping[str, str] | None = None) -> McpRefusal:
    """A refusal about a verified capability, with its reason's gRPC code (the catalogue's)."""
    return McpRefusal(reason, _code_name(reason), message, dict(metadata or {}), True)


def _code_name(reason: str) -> str:
    return reasons.CODES[reason].name


def _from_sink(err: SinkRefusal) -> McpRefusal:
    return McpRefusal(err.reason, err.code_name, err.message, dict(err.metadata), err.signature_verified)


def _peer_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The caller's address over HTTP (``ip:port``); ``stdio`` for a launched server."""
    client = getattr(ctx.request, "client", None)
    host, port = getattr(client, "host", None), getattr(client, "port", None)
    return f"{host}:{port}" if isinstance(host, str) else "stdio"


@dataclass(frozen=True)
class _Record:
    """What the refusal record will say, filled in as admission learns it."""

    method: str
    tool_id: str
    peer: str
    cap: VerifiedCapability | None = None
    seen: UnverifiedInfo = field(default_factory=UnverifiedInfo)
    #: The key sent in ``_meta`` beside the capability ("" when none), as the TypeScript and
    #: Go sinks record it; a key re-derived from the arguments is in KEY_MISMATCH's metadata.
    attempted_key: str = ""

    def unverified(self, seen: UnverifiedInfo) -> _Record:
        return _Record(self.method, self.tool_id, self.peer, None, seen, self.attempted_key)

    def verified(self, cap: VerifiedCapability) -> _Record:
        return _Record(self.method, self.tool_id, self.peer, cap, self.seen, self.attempted_key)

    def rejection(self, r: McpRefusal) -> RejectionInput:
        # tool_id is the called tool's (the server's own table); it is "verified" only when a
        # verified capability names that same tool. authenticated: the signature held.
        cap, seen = self.cap, self.seen
        return RejectionInput(
            method=self.method,
            reason=r.reason,
            code=r.code_name,
            peer=self.peer,
            message=r.message,
            tool_id=self.tool_id,
            tool_id_verified=cap is not None and cap.tool_id == self.tool_id,
            authenticated=r.signature_verified,
            principal=cap.sub if cap is not None else "",
            attempted_key=self.attempted_key,
            capability_key=(cap.key or "") if cap is not None else seen.key,
            capability_request_id=(cap.request_id or "") if cap is not None else seen.request_id,
            call_id=cap.call_id if cap is not None else seen.call_id,
            capability_id=cap.jti if cap is not None else seen.jti,
            key_id=cap.kid if cap is not None else seen.kid,
            effect=cap.effect if cap is not None else seen.effect,
        )

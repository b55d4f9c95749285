"""A sink: a service that performs an effect and admits a request only under a genuine
capability for one of its tools (ADR 0013).

The admission order is fixed, so a request breaking several rules gets the same reason
every time, in every SDK: the ledger's verification, the run mode (live only: a shadow or
replay capability is refused SANDBOX_CAPABILITY_NOT_LIVE, ADR 0028), the tool allow-list, the request's
idempotency key against the capability's, then single use for unsafe and queryable
capabilities. Every refusal goes to the recorder (keycap's ``rejections``, under
``sink:<name>``) and then to the ``on_refusal`` hook.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from keycap_client import reasons
from keycap_client.sink.claims import VerifiedCapability
from keycap_client.sink.keys import PublicKeySource
from keycap_client.sink.refusal import SinkRefusal
from keycap_client.sink.refusal_recorder import RefusalRecorder, RejectionInput
from keycap_client.sink.spent_store import InMemorySpentStore, SpentCapability, SpentStore
from keycap_client.sink.verifier import CapabilityVerifier, VerifierOptions

__all__ = ["Sink", "AdmissionContext", "SinkRefusalEvent", "sink_service", "SINK_NAME"]

#: A sink name: lowercase letters, digits, ".", "_" and "-", 1-63 long, starting alphanumeric.
SINK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_log = logging.getLogger("keycap_client.sink")


def sink_service(name: str) -> str:
    """The ``service`` of a sink's refusal records, e.g. ``"sink:payments"``; ValueError on a bad name."""
    if SINK_NAME.fullmatch(name) is None:
        raise ValueError(f"sink name {name!r}: expected 1-63 of [a-z0-9._-], starting with a letter or digit")
    return f"sink:{name}"


@dataclass(frozen=True)
class AdmissionContext:
    """What the transport knows about the request being admitted.

    ``method``: the gRPC full method (``/pkg.Service/Method``) or ``HTTP <METHOD> <path>``;
    ``peer``: the caller's address (``ip:port``); ``idempotency_key``: the request's own
    key (metadata ``idempotency-key``, header ``Idempotency-Key``), if it sent one.
    """

    method: str
    peer: str
    idempotency_key: str | None = None


@dataclass(frozen=True)
class SinkRefusalEvent:
    """A refusal as the ``on_refusal`` hook sees it. ``tool_id``: what the capability names,
    verified or not (``tool_id_verified``); "" when unreadable."""

    sink: str
    error: SinkRefusal
    context: AdmissionContext
    tool_id: str
    tool_id_verified: bool


class Sink:
    """Admits requests under capabilities; the transports (gRPC interceptors, ASGI
    middleware) call :meth:`admit` / :meth:`admit_async` and refuse on :class:`SinkRefusal`.

    ``tools``: the tool ids this sink serves (required); a genuine capability for any other
    is refused TOOL_NOT_ACCEPTED. ``spent_store``: required to admit unsafe and queryable
    capabilities (single use); without one they are refused EFFECT_CLASS_MISMATCH.
    ``refusals``: keycap's refusal store; without it refusals reach only ``on_refusal``.

    Example::

        sink = Sink("payments", tools=["payments.charge"], keys=KernelJwksSource.from_kernel(kernel))
        cap = sink.admit(headers.get("authorization"), AdmissionContext("HTTP POST /charges", peer))
        charge(idempotency_key=cap.key)
    """

    def __init__(
        self,
        name: str,
        *,
        tools: Iterable[str],
        keys: PublicKeySource,
        verifier: VerifierOptions | None = None,
        spent_store: SpentStore | None = None,
        refusals: RefusalRecorder | None = None,
        on_refusal: Callable[[SinkRefusalEvent], None] | None = None,
    ) -> None:
        self.service = sink_service(name)
        self.name = name
        self.tools = frozenset(tools)
        if not self.tools:
            raise ValueError("a sink must name the tools it serves (tools=[...])")
        # Sandbox capabilities are verified, so that their refusal names the verified tool
        # and says why (not live), rather than an unverified WRONG_TOKEN_TYPE.
        self.verifier = CapabilityVerifier(keys, replace(verifier or VerifierOptions(), sandbox="verify"))
        self.spent_store = spent_store
        self.refusals = refusals
        self.on_refusal = on_refusal

    def admit(self, authorization: str | None, context: AdmissionContext) -> VerifiedCapability:
        """The verified claims, or SinkRefusal after the refusal is recorded. May block (key
        fetch, spent store, record)."""
        try:
            cap = self.verifier.verify(authorization)
        except SinkRefusal as err:
            self._report(_unverified_input(err, context), err, context)
            raise
        refusal = self._check_claims(cap, context)
        if refusal is None and cap.effect != "idempotent":
            refusal = self._spend(cap)
        if refusal is not None:
            self._report(_verified_input(refusal, cap, context), refusal, context)
            raise refusal
        return cap

    async def admit_async(self, authorization: str | None, context: AdmissionContext) -> VerifiedCapability:
        """:meth:`admit` for asyncio: blocking store and key calls run in worker threads."""
        try:
            cap = await self.verifier.verify_async(authorization)
        except SinkRefusal as err:
            await self._report_async(_unverified_input(err, context), err, context)
            raise
        refusal = self._check_claims(cap, context)
        if refusal is None and cap.effect != "idempotent":
            if isinstance(self.spent_store, InMemorySpentStore):
                refusal = self._spend(cap)
            else:
                refusal = await asyncio.to_thread(self._spend, cap)
        if refusal is not None:
            await self._report_async(_verified_input(refusal, cap, context), refusal, context)
            raise refusal
        return cap

    def _check_claims(self, cap: VerifiedCapability, context: AdmissionContext) -> SinkRefusal | None:
        # A sink performs live effects: a shadow or replay capability grants none here.
        if cap.mode is not None:
            return SinkRefusal(
                reasons.SANDBOX_CAPABILITY_NOT_LIVE,
                f"sink {self.name} performs live effects only; this capability is of a {cap.mode} run",
                signature_verified=True,
                metadata={"mode": cap.mode},
            )
        if cap.tool_id not in self.tools:
            return SinkRefusal(
                reasons.TOOL_NOT_ACCEPTED,
                f"sink {self.name} does not serve tool {cap.tool_id[:128]!r}",
                signature_verified=True,
            )
        if context.idempotency_key is not None and context.idempotency_key != cap.key:
            return SinkRefusal(
                reasons.KEY_MISMATCH, "the request's idempotency key is not the capability's key", signature_verified=True
            )
        if cap.effect != "idempotent" and self.spent_store is None:
            # Running an unsafe effect without single use would be the double charge keycap exists to stop.
            return SinkRefusal(
                reasons.EFFECT_CLASS_MISMATCH,
                f"sink {self.name} has no spent store, so it accepts idempotent capabilities only",
                signature_verified=True,
            )
        return None

    def _spend(self, cap: VerifiedCapability) -> SinkRefusal | None:
        assert self.spent_store is not None
        tolerance = self.verifier.options.clock_tolerance_seconds
        try:
            first = self.spent_store.spend(
                SpentCapability(
                    sink=self.name,
                    jti=cap.jti,
                    tool_id=cap.tool_id,
                    call_id=cap.call_id,
                    effect=cap.effect,
                    expires_at=datetime.fromtimestamp(cap.exp + tolerance, timezone.utc),
                )
            )
        except SinkRefusal as err:
            return err
        except Exception as err:
            refusal = SinkRefusal(reasons.DATABASE_UNAVAILABLE, "the spent-capability store failed; retry")
            refusal.__cause__ = err
            return refusal
        if not first:
            return SinkRefusal(
                reasons.CAPABILITY_REUSED,
                f"this {cap.effect} capability was already used at sink {self.name}",
                signature_verified=True,
            )
        return None

    def _report(self, r: RejectionInput, error: SinkRefusal, context: AdmissionContext) -> None:
        if self.refusals is not None:
            try:
                self.refusals.record(r)
            except Exception:  # a recorder that raises must not turn a refusal into a crash
                _log.exception("the refusal recorder failed; refusing anyway")
        if self.on_refusal is not None:
            try:
                self.on_refusal(SinkRefusalEvent(self.name, error, context, r.tool_id, r.tool_id_verified))
            except Exception:  # the hook is the user's; its failure is not the caller's refusal
                _log.exception("the on_refusal hook failed")

    async def _report_async(self, r: RejectionInput, error: SinkRefusal, context: AdmissionContext) -> None:
        if self.refusals is None:
            self._report(r, error, context)
        else:
            await asyncio.to_thread(self._report, r, error, context)


def _unverified_input(err: SinkRefusal, context: AdmissionContext) -> RejectionInput:
    u = err.unverified
    return RejectionInput(
        method=context.method,
        reason=err.reason,
        code=err.code_name,
        tool_id=u.tool_id,
        tool_id_verified=err.signature_verified,
        attempted_key=context.idempotency_key or "",
        capability_key=u.key,
        capability_request_id=u.request_id,
        call_id=u.call_id,
        capability_id=u.jti,
        key_id=u.kid,
        effect=u.effect,
        peer=context.peer,
        message=err.message,
    )


def _verified_input(err: SinkRefusal, cap: VerifiedCapability, context: AdmissionContext) -> RejectionInput:
    return RejectionInput(
        method=context.method,
        reason=err.reason,
        code=err.code_name,
        tool_id=cap.tool_id,
        tool_id_verified=True,
        principal=cap.sub,
        attempted_key=context.idempotency_key or "",
        capability_key=cap.key or "",
        capability_request_id=cap.request_id or "",
        call_id=cap.call_id,
        capability_id=cap.jti,
        key_id=cap.kid,
        effect=cap.effect,
        peer=context.peer,
        message=err.message,
    )

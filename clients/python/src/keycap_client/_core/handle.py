"""What every capability handle holds, sync or asyncio, and the checks of ``handle_for``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Generic, Protocol, TypedDict, TypeVar

from google.protobuf import timestamp_pb2

from keycap_client._core.call import client_error
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2


def _copy(call: kernel_pb2.Call) -> kernel_pb2.Call:
    c = kernel_pb2.Call()
    c.CopyFrom(call)
    return c


class WriteTarget(TypedDict):
    """Where a handle's write goes and how: the call's key and request id, and whether it may be retried."""

    key: str
    request_id: str
    retry: bool


class ReceiptForwarder(Protocol):
    """What a handle needs of its kernel client: somewhere to leave the ledger's receipts."""

    def _forward_receipt(self, receipt: effect_pb2.CompletionReceipt) -> None: ...


_Ledger = TypeVar("_Ledger")
_Kernel = TypeVar("_Kernel", bound=ReceiptForwarder)


def handle_parts(
    call: kernel_pb2.Call | None, expires_at: timestamp_pb2.Timestamp | datetime | None
) -> tuple[kernel_pb2.Call, datetime | None]:
    """``handle_for``'s checks: the kernel answered with a call; the expiry as a UTC datetime."""
    if call is None or not call.call_id:
        raise client_error("CALL_MISSING", "the kernel answered without a call")
    if isinstance(expires_at, timestamp_pb2.Timestamp):
        expires_at = expires_at.ToDatetime(tzinfo=timezone.utc)
    return call, expires_at


class HandleBase(Generic[_Ledger, _Kernel]):
    """What every handle holds (sync :class:`CapabilityHandle`, asyncio
    :class:`~keycap_client.aio.AsyncCapabilityHandle`): the call, its capability in a
    name-mangled slot with no accessor, and the clients it writes and completes through."""

    __slots__ = ("_call", "__capability", "_expires_at", "_ledger", "_kernel", "_recorded", "_completed_by_write")

    def __init__(
        self,
        call: kernel_pb2.Call,
        capability: str,
        expires_at: datetime | None,
        ledger: _Ledger | None,
        kernel: _Kernel,
        recorded: kernel_pb2.Call | None = None,
    ) -> None:
        snapshot = kernel_pb2.Call()
        snapshot.CopyFrom(call)
        self._call = snapshot
        self._recorded = _copy(recorded) if recorded is not None else None
        self.__capability = capability
        self._expires_at = expires_at
        self._ledger = ledger
        self._kernel = kernel
        self._completed_by_write = False

    @property
    def call(self) -> kernel_pb2.Call:
        """A copy of the journaled call."""
        return _copy(self._call)

    @property
    def recorded(self) -> kernel_pb2.Call | None:
        """In a replay: (a copy of) the recorded call this call matched, with the outcome the
        recorded run got (``outcome``, ``outcome_detail``); None otherwise."""
        return _copy(self._recorded) if self._recorded is not None else None

    @property
    def call_id(self) -> str:
        return self._call.call_id

    @property
    def tool_id(self) -> str:
        return self._call.tool_id

    @property
    def key(self) -> str:
        """The kernel-derived idempotency key ("" unless Idempotent)."""
        return self._call.key

    @property
    def request_id(self) -> str:
        """The request id ("" unless Queryable)."""
        return self._call.request_id

    @property
    def attempt(self) -> int:
        return self._call.attempt

    @property
    def effect_kind(self) -> effect_pb2.EffectKind:
        return self._call.effect_kind

    @property
    def expires_at(self) -> datetime | None:
        """When the capability expires (UTC), if the kernel said."""
        return self._expires_at

    @property
    def completed_by_write(self) -> bool:
        """True once the ledger answered that its entry completes this call (ADR 0034):
        ``complete("succeeded")`` then sends no CompleteCall."""
        return self._completed_by_write

    def _capability(self) -> str:
        return self.__capability

    def _write_target(self) -> WriteTarget:
        """The ledger write's key, request id and retry flag: always the kernel's own."""
        # A single-use capability's write is not retried blindly: had the first try taken
        # effect with only its answer lost, the retry would be refused CAPABILITY_REUSED.
        retry = self._call.effect_kind == effect_pb2.EFFECT_KIND_IDEMPOTENT
        return WriteTarget(key=self._call.key, request_id=self._call.request_id, retry=retry)

    def _noted(self, res: ledger_pb2.WriteResponse) -> ledger_pb2.WriteResponse:
        """``write``'s answer, after remembering whether its entry completes the call."""
        if res.completes_call:
            self._completed_by_write = True
        if res.HasField("completion_receipt"):
            # Rides on the client's next BeginCalls: the kernel need not read the entry (ADR 0035).
            self._kernel._forward_receipt(res.completion_receipt)
        return res

    def _local_completion(self, outcome: str, detail: str) -> kernel_pb2.CompleteCallResponse | None:
        """``complete``'s answer when no CompleteCall is needed: a success without detail
        after a write whose entry completes the call (ADR 0034; the kernel settles the call
        from the entry). None: send CompleteCall (a failure, a detail, or no such write)."""
        if not (self._completed_by_write and outcome == "succeeded" and detail == ""):
            return None
        call = _copy(self._call)
        call.state = kernel_pb2.CALL_STATE_COMPLETED
        call.outcome = kernel_pb2.CALL_OUTCOME_SUCCEEDED
        return kernel_pb2.CompleteCallResponse(call=call, already_completed=False)

    def _require_ledger(self) -> _Ledger:
        if self._ledger is None:
            raise client_error(
                "LEDGER_ADDRESS_MISSING",
                f"{type(self._kernel).__name__} was created without ledger_address; handles cannot write",
            )
        return self._ledger

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tool_id={self.tool_id!r}, call_id={self.call_id!r}, "
            f"key={self.key!r}, attempt={self.attempt})"
        )

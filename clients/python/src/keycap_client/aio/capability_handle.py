"""What a tool holds while it runs, on asyncio (twin of :class:`keycap_client.CapabilityHandle`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from keycap_client._core.handle import HandleBase
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2

if TYPE_CHECKING:
    from keycap_client.aio.kernel_client import AsyncKernelClient
    from keycap_client.aio.ledger_client import AsyncLedgerClient

__all__ = ["AsyncCapabilityHandle"]


class AsyncCapabilityHandle(HandleBase["AsyncLedgerClient", "AsyncKernelClient"]):
    """A call's identity and a capability the tool cannot misuse; ``write``, ``lookup``
    and ``complete`` are awaited. The properties (``key``, ``call_id``, ``expires_at``, …),
    the single-use rule and the ``repr`` without the capability are the sync handle's.
    """

    __slots__ = ()

    async def write(self, payload: bytes | str, *, timeout: float | None = None) -> ledger_pb2.WriteResponse:
        """Records the effect in the ledger under the kernel's key (str payloads are UTF-8).

        Returns the entry; ``duplicate`` is True when this key's effect was
        already recorded (nothing new was written). ``completes_call`` is True when the
        entry completes the call (ADR 0034): :meth:`complete` then answers a success itself.
        """
        return self._noted(
            await self._require_ledger().write_with_capability(
                self._capability(), payload=payload, timeout=timeout, **self._write_target()
            )
        )

    async def lookup(self, *, timeout: float | None = None) -> ledger_pb2.LookupRequestResponse:
        """Queryable: whether this call's request already took effect."""
        return await self._require_ledger().lookup_with_capability(
            self._capability(), self._call.request_id, timeout=timeout
        )

    async def complete(
        self, outcome: Literal["succeeded", "failed"] = "succeeded", detail: str = "", *, timeout: float | None = None
    ) -> kernel_pb2.CompleteCallResponse:
        """Marks the call done in the kernel's journal.

        After a write whose entry completes the call (``completed_by_write``, ADR 0034) a
        success is already recorded: answered here, without a CompleteCall (nor a place in a
        CompleteCalls batch); the kernel settles the call from the entry. A ``"failed"``
        outcome, a ``detail``, or a write that did not complete the call is sent as before.
        """
        local = self._local_completion(outcome, detail)
        if local is not None:
            return local
        return await self._kernel.complete_call(self._call.call_id, outcome, detail, timeout=timeout)

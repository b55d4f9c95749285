"""What a tool holds while it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from keycap_client._core.handle import HandleBase
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2

if TYPE_CHECKING:
    from keycap_client.kernel_client import KernelClient
    from keycap_client.ledger_client import LedgerClient

__all__ = ["CapabilityHandle"]


class CapabilityHandle(HandleBase["LedgerClient", "KernelClient"]):
    """A call's identity and a capability the tool cannot misuse.

    :meth:`write` always sends the kernel-derived key (or request id) with the
    call's capability; there is no parameter to pass another key. The
    capability is not exposed as an attribute and never appears in ``repr``.
    """

    __slots__ = ()

    def write(self, payload: bytes | str, *, timeout: float | None = None) -> ledger_pb2.WriteResponse:
        """Records the effect in the ledger under the kernel's key (str payloads are UTF-8).

        Returns the entry; ``duplicate`` is True when this key's effect was
        already recorded (nothing new was written). ``completes_call`` is True when the
        entry completes the call (ADR 0034): :meth:`complete` then answers a success itself.
        """
        return self._noted(
            self._require_ledger().write_with_capability(
                self._capability(), payload=payload, timeout=timeout, **self._write_target()
            )
        )

    def lookup(self, *, timeout: float | None = None) -> ledger_pb2.LookupRequestResponse:
        """Queryable: whether this call's request already took effect."""
        return self._require_ledger().lookup_with_capability(self._capability(), self._call.request_id, timeout=timeout)

    def complete(
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
        return self._kernel.complete_call(self._call.call_id, outcome, detail, timeout=timeout)

"""Typed client of keycap.kernel.v1.KernelService (called by agent runtimes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import grpc
from google.protobuf import timestamp_pb2

from keycap_client._core.call import DEFAULT_TIMEOUT_S
from keycap_client._core.handle import handle_parts
from keycap_client._core.kernel import BeginItem, KernelCore
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2, kernel_pb2_grpc
from keycap_client._rpc import Batcher, ChannelClient
from keycap_client.capability_handle import CapabilityHandle
from keycap_client.credentials import TlsOptions, resolve_credentials, runtime_bearer
from keycap_client.errors import KeycapError
from keycap_client.run_modes import RunMode
from keycap_client.ledger_client import LedgerClient
from keycap_client.tool_definition import ToolDefinition

__all__ = ["KernelClient"]


class KernelClient(ChannelClient):
    """Registers tools, begins calls and hands out :class:`CapabilityHandle` s.

    ``ledger_address`` is where handles write; without it handles can only
    ``complete``. ``token``: the principal's bearer secret, sent on every kernel
    call (default: the runtime credential by the standard lookup, see
    :mod:`keycap_client.credentials`; ``""`` sends none, for a principal proven by
    its TLS client certificate). ``tls``: CA and client certificate for the kernel
    and ledger channels; ``credentials``: channel credentials overriding ``tls``
    (default insecure, for loopback). ``timeout``: each call's deadline in seconds
    (default 10). ``mode``: the run mode of every call begun without one of its own
    (default live; ``Replay("run-1")`` or ``Shadow()``, :mod:`keycap_client.run_modes`).
    ``batching``: begins, completes and writes that threads make while one of their kind is in flight
    go together in the next BeginCalls / CompleteCalls, each answered as if alone (ADR 0022;
    False: one RPC per call).
    Every error is a :class:`~keycap_client.KeycapError`.

    Example::

        with KernelClient("127.0.0.1:50051", ledger_address="127.0.0.1:50052") as kernel:
            handle = kernel.begin("payments.charge", {"order_id": "o-1", "amount": 500})
            handle.write(b'{"charged": 500}')
            handle.complete()
    """

    def __init__(
        self,
        address: str,
        *,
        ledger_address: str | None = None,
        token: str | None = None,
        tls: TlsOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        mode: RunMode | None = None,
        batching: bool = True,
    ) -> None:
        self._core = KernelCore(runtime_bearer(token), mode)
        credentials = resolve_credentials(tls, credentials)
        self.raw = self._connect(address, credentials, timeout, kernel_pb2_grpc.KernelServiceStub)
        if batching:
            self._batcher = Batcher(self.raw, self._endpoint, timeout)
        self._ledger = (
            LedgerClient(ledger_address, credentials=credentials, timeout=timeout, batching=batching) if ledger_address else None
        )

    def register_tool(
        self, tool: ToolDefinition | kernel_pb2.Tool, *, timeout: float | None = None
    ) -> kernel_pb2.RegisterToolResponse:
        """Registers a tool; the same definition again is a no-op (``already_registered``)."""
        return self._run(self._core.register_tool(tool), timeout)

    def get_tool(self, tool_id: str, *, timeout: float | None = None) -> kernel_pb2.Tool:
        """One tool; KeycapError NOT_FOUND when unknown."""
        return self._run(self._core.get_tool(tool_id), timeout)

    def list_tools(self, *, timeout: float | None = None) -> list[kernel_pb2.Tool]:
        """Every registered tool, ordered by id."""
        return self._run(self._core.list_tools(), timeout)

    def begin_call(
        self,
        tool_id: str,
        arguments_json: str,
        *,
        call_id: str = "",
        run_id: str = "",
        mode: RunMode | None = None,
        timeout: float | None = None,
    ) -> kernel_pb2.BeginCallResponse:
        """BeginCall in its wire form (the capability is in the response; in a replay,
        ``recorded_call`` is the recorded call it matched)."""
        flow = self._core.begin_call(tool_id, arguments_json, call_id=call_id, run_id=run_id, mode=mode)
        return self._run(flow, timeout)

    def begin(
        self,
        tool_id: str,
        args: Mapping[str, Any] | str,
        *,
        call_id: str = "",
        run_id: str = "",
        mode: RunMode | None = None,
        timeout: float | None = None,
    ) -> CapabilityHandle:
        """Begins a call and returns a handle whose ``write`` sends the kernel's key and capability.

        ``args`` is a mapping (serialised to JSON here) or JSON text sent exactly as given.
        ``mode`` (default: the client's, else live) begins it in a replay or shadow run
        (:mod:`keycap_client.run_modes`); in a replay the handle's ``recorded`` is the
        recorded call it matched.
        """
        flow = self._core.begin(tool_id, args, call_id=call_id, run_id=run_id, mode=mode)
        return self.handle_for(*self._run(flow, timeout))

    def _forward_receipt(self, receipt: effect_pb2.CompletionReceipt) -> None:
        """Keeps the ledger's completion receipt of a handle's write for the next BeginCalls
        (ADR 0035). Only batches carry receipts: without batching there is nothing to ride on,
        and the kernel reads the entry instead."""
        if self._batcher is not None:
            self._batcher.receipts.add(receipt)

    def begin_many(
        self, items: Sequence[BeginItem], *, mode: RunMode | None = None, timeout: float | None = None
    ) -> list[CapabilityHandle | KeycapError]:
        """Begins 1 to 256 calls in one BeginCalls round trip, all in run mode ``mode``
        (default: the client's). Each item is answered on its own, in order: a handle as
        :meth:`begin` returns, or the :class:`~keycap_client.KeycapError` it would have raised
        alone (returned, not raised, so one refused item does not hide the others)."""
        answers = self._run(self._core.begin_many(items, mode=mode), timeout)
        return [a if isinstance(a, KeycapError) else self.handle_for(*a) for a in answers]

    def complete_call(
        self,
        call_id: str,
        outcome: Literal["succeeded", "failed"],
        detail: str = "",
        *,
        timeout: float | None = None,
    ) -> kernel_pb2.CompleteCallResponse:
        """Marks a call done; the same outcome again is a no-op (``already_completed``)."""
        return self._run(self._core.complete_call(call_id, outcome, detail), timeout)

    def list_pending_calls(self, tool_id: str = "", *, timeout: float | None = None) -> list[kernel_pb2.Call]:
        """Every call begun and not completed (of one tool, or all), oldest first."""
        return self._run(self._core.list_pending_calls(tool_id), timeout)

    def resume_call(self, call_id: str, *, timeout: float | None = None) -> kernel_pb2.ResumeCallResponse:
        """The recovery path; with RESUME_ACTION_RETRY pass the result to :meth:`handle_for`."""
        return self._run(self._core.resume_call(call_id), timeout)

    def signing_keys(self, *, timeout: float | None = None) -> tuple[str, str]:
        """The kernel's public JWKS (JSON text) and the current key id."""
        return self._run(self._core.signing_keys(), timeout)

    def handle_for(
        self,
        call: kernel_pb2.Call | None,
        capability: str,
        expires_at: timestamp_pb2.Timestamp | datetime | None,
        recorded: kernel_pb2.Call | None = None,
    ) -> CapabilityHandle:
        """A handle for a call and its capability (after BeginCall or a RETRY ResumeCall)."""
        checked, expiry = handle_parts(call, expires_at)
        return CapabilityHandle(checked, capability, expiry, self._ledger, self, recorded)

    def close(self) -> None:
        super().close()
        if self._ledger is not None:
            self._ledger.close()

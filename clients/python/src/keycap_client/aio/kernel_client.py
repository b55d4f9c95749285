"""asyncio client of keycap.kernel.v1.KernelService (twin of :class:`keycap_client.KernelClient`)."""

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
from keycap_client.aio._rpc import AsyncBatcher, AsyncChannelClient
from keycap_client.aio.capability_handle import AsyncCapabilityHandle
from keycap_client.aio.ledger_client import AsyncLedgerClient
from keycap_client.credentials import TlsOptions, resolve_credentials, runtime_bearer
from keycap_client.errors import KeycapError
from keycap_client.run_modes import RunMode
from keycap_client.tool_definition import ToolDefinition

__all__ = ["AsyncKernelClient"]


class AsyncKernelClient(AsyncChannelClient):
    """Registers tools, begins calls and hands out :class:`AsyncCapabilityHandle` s, over ``grpc.aio``.

    The constructor options (``ledger_address``, ``token`` with the default runtime
    credential lookup, ``tls``, ``credentials``, ``timeout``, ``mode``, ``batching``) and the methods are those of
    :class:`keycap_client.KernelClient`; every method that calls the kernel is awaited
    (``handle_for`` sends nothing and is not). Make it inside the running event loop.
    Every error is a :class:`~keycap_client.KeycapError`.

    Example::

        async with AsyncKernelClient("127.0.0.1:50051", ledger_address="127.0.0.1:50052") as kernel:
            handle = await kernel.begin("payments.charge", {"order_id": "o-1", "amount": 500})
            await handle.write(b'{"charged": 500}')
            await handle.complete()
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
            self._batcher = AsyncBatcher(self.raw, self._endpoint, timeout)
        self._ledger = (
            AsyncLedgerClient(ledger_address, credentials=credentials, timeout=timeout, batching=batching) if ledger_address else None
        )

    async def register_tool(
        self, tool: ToolDefinition | kernel_pb2.Tool, *, timeout: float | None = None
    ) -> kernel_pb2.RegisterToolResponse:
        """Registers a tool; the same definition again is a no-op (``already_registered``)."""
        return await self._run(self._core.register_tool(tool), timeout)

    async def get_tool(self, tool_id: str, *, timeout: float | None = None) -> kernel_pb2.Tool:
        """One tool; KeycapError NOT_FOUND when unknown."""
        return await self._run(self._core.get_tool(tool_id), timeout)

    async def list_tools(self, *, timeout: float | None = None) -> list[kernel_pb2.Tool]:
        """Every registered tool, ordered by id."""
        return await self._run(self._core.list_tools(), timeout)

    async def begin_call(
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
        return await self._run(flow, timeout)

    async def begin(
        self,
        tool_id: str,
        args: Mapping[str, Any] | str,
        *,
        call_id: str = "",
        run_id: str = "",
        mode: RunMode | None = None,
        timeout: float | None = None,
    ) -> AsyncCapabilityHandle:
        """Begins a call and returns a handle whose ``write`` sends the kernel's key and capability.

        ``args`` is a mapping (serialised to JSON here) or JSON text sent exactly as given.
        ``mode`` (default: the client's, else live) begins it in a replay or shadow run
        (:mod:`keycap_client.run_modes`); in a replay the handle's ``recorded`` is the
        recorded call it matched.
        """
        flow = self._core.begin(tool_id, args, call_id=call_id, run_id=run_id, mode=mode)
        return self.handle_for(*await self._run(flow, timeout))

    def _forward_receipt(self, receipt: effect_pb2.CompletionReceipt) -> None:
        """Keeps the ledger's completion receipt of a handle's write for the next BeginCalls
        (ADR 0035). Only batches carry receipts: without batching there is nothing to ride on,
        and the kernel reads the entry instead."""
        if self._batcher is not None:
            self._batcher.receipts.add(receipt)

    async def begin_many(
        self, items: Sequence[BeginItem], *, mode: RunMode | None = None, timeout: float | None = None
    ) -> list[AsyncCapabilityHandle | KeycapError]:
        """Begins 1 to 256 calls in one BeginCalls round trip, all in run mode ``mode``
        (default: the client's). Each item is answered on its own, in order: a handle as
        :meth:`begin` returns, or the :class:`~keycap_client.KeycapError` it would have raised
        alone (returned, not raised, so one refused item does not hide the others)."""
        answers = await self._run(self._core.begin_many(items, mode=mode), timeout)
        return [a if isinstance(a, KeycapError) else self.handle_for(*a) for a in answers]

    async def complete_call(
        self,
        call_id: str,
        outcome: Literal["succeeded", "failed"],
        detail: str = "",
        *,
        timeout: float | None = None,
    ) -> kernel_pb2.CompleteCallResponse:
        """Marks a call done; the same outcome again is a no-op (``already_completed``)."""
        return await self._run(self._core.complete_call(call_id, outcome, detail), timeout)

    async def list_pending_calls(self, tool_id: str = "", *, timeout: float | None = None) -> list[kernel_pb2.Call]:
        """Every call begun and not completed (of one tool, or all), oldest first."""
        return await self._run(self._core.list_pending_calls(tool_id), timeout)

    async def resume_call(self, call_id: str, *, timeout: float | None = None) -> kernel_pb2.ResumeCallResponse:
        """The recovery path; with RESUME_ACTION_RETRY pass the result to :meth:`handle_for`."""
        return await self._run(self._core.resume_call(call_id), timeout)

    async def signing_keys(self, *, timeout: float | None = None) -> tuple[str, str]:
        """The kernel's public JWKS (JSON text) and the current key id."""
        return await self._run(self._core.signing_keys(), timeout)

    def handle_for(
        self,
        call: kernel_pb2.Call | None,
        capability: str,
        expires_at: timestamp_pb2.Timestamp | datetime | None,
        recorded: kernel_pb2.Call | None = None,
    ) -> AsyncCapabilityHandle:
        """A handle for a call and its capability (after BeginCall or a RETRY ResumeCall); sends nothing."""
        checked, expiry = handle_parts(call, expires_at)
        return AsyncCapabilityHandle(checked, capability, expiry, self._ledger, self, recorded)

    async def close(self) -> None:
        await super().close()
        if self._ledger is not None:
            await self._ledger.close()

"""keycap.kernel.v1.KernelService's operations as flows (the sync and asyncio kernel clients run them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf import timestamp_pb2

from keycap_client._core import wire
from keycap_client._core.call import ClientCore, Flow, collect_pages
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client.errors import KeycapError
from keycap_client.run_modes import Live, RunMode
from keycap_client.tool_definition import ToolDefinition

#: What a handle is made of: the journaled call, its capability, when that expires, and
#: in a replay the recorded call it matched.
HandleArgs = tuple[kernel_pb2.Call, str, timestamp_pb2.Timestamp | None, kernel_pb2.Call | None]


@dataclass(frozen=True)
class BeginItem:
    """One call of a :meth:`KernelCore.begin_many` batch: ``begin``'s arguments."""

    tool_id: str
    args: Mapping[str, Any] | str
    call_id: str = ""
    run_id: str = ""


def handle_args(res: kernel_pb2.BeginCallResponse) -> HandleArgs:
    """``handle_for``'s arguments from a BeginCall answer."""
    expires = res.capability_expires_at if res.HasField("capability_expires_at") else None
    return res.call, res.capability, expires, res.recorded_call if res.HasField("recorded_call") else None


class KernelCore(ClientCore):
    """Every KernelService operation: the request built and checked, paging, the result.

    ``mode`` is the run mode of every call begun without one of its own (default live)."""

    __slots__ = ("_mode",)

    def __init__(self, bearer: str | None, mode: RunMode | None = None) -> None:
        super().__init__(bearer)
        self._mode: RunMode = mode if mode is not None else Live()

    def register_tool(self, tool: ToolDefinition | kernel_pb2.Tool) -> Flow[kernel_pb2.RegisterToolResponse]:
        res: kernel_pb2.RegisterToolResponse = yield from self._unary("RegisterTool", wire.register_tool(tool))
        return res

    def get_tool(self, tool_id: str) -> Flow[kernel_pb2.Tool]:
        res: kernel_pb2.GetToolResponse = yield from self._unary("GetTool", kernel_pb2.GetToolRequest(tool_id=tool_id))
        return res.tool

    def _tools_page(self, token: str) -> Flow[kernel_pb2.ListToolsResponse]:
        res: kernel_pb2.ListToolsResponse = yield from self._unary("ListTools", wire.list_tools(token))
        return res

    def list_tools(self) -> Flow[list[kernel_pb2.Tool]]:
        return (yield from collect_pages(self._tools_page, lambda res: res.tools))

    def begin_call(
        self, tool_id: str, arguments_json: str, *, call_id: str, run_id: str, mode: RunMode | None = None
    ) -> Flow[kernel_pb2.BeginCallResponse]:
        req = wire.begin_call_request(tool_id, arguments_json, call_id, run_id, self._mode if mode is None else mode)
        res: kernel_pb2.BeginCallResponse = yield from self._unary("BeginCall", req)
        return res

    def begin(
        self, tool_id: str, args: Mapping[str, Any] | str, *, call_id: str, run_id: str, mode: RunMode | None = None
    ) -> Flow[HandleArgs]:
        """BeginCall with ``args`` (a mapping serialised to JSON, or JSON text as given): ``handle_for``'s arguments."""
        res = yield from self.begin_call(tool_id, wire.arguments_json(args), call_id=call_id, run_id=run_id, mode=mode)
        return handle_args(res)

    def begin_many(
        self, items: Sequence[BeginItem], *, mode: RunMode | None = None
    ) -> Flow[list[HandleArgs | KeycapError]]:
        """One BeginCalls of ``items``, all in the same run mode: per item, ``handle_for``'s
        arguments or the error BeginCall would have raised for it alone."""
        calls = [
            wire.begin_call_request(i.tool_id, wire.arguments_json(i.args), i.call_id, i.run_id, self._mode if mode is None else mode)
            for i in items
        ]
        res: kernel_pb2.BeginCallsResponse = yield from self._unary(
            "BeginCalls", kernel_pb2.BeginCallsRequest(calls=calls)
        )
        return [
            handle_args(r.begun) if r.WhichOneof("result") == "begun" else KeycapError.from_status_bytes(r.error_status)
            for r in res.results
        ]

    def complete_call(
        self, call_id: str, outcome: Literal["succeeded", "failed"], detail: str
    ) -> Flow[kernel_pb2.CompleteCallResponse]:
        req = wire.complete_call(call_id, outcome, detail)
        res: kernel_pb2.CompleteCallResponse = yield from self._unary("CompleteCall", req)
        return res

    def list_pending_calls(self, tool_id: str) -> Flow[list[kernel_pb2.Call]]:
        def page(token: str) -> Flow[kernel_pb2.ListPendingCallsResponse]:
            req = wire.list_pending_calls(tool_id, token)
            res: kernel_pb2.ListPendingCallsResponse = yield from self._unary("ListPendingCalls", req)
            return res

        return (yield from collect_pages(page, lambda res: res.calls))

    def resume_call(self, call_id: str) -> Flow[kernel_pb2.ResumeCallResponse]:
        req = kernel_pb2.ResumeCallRequest(call_id=call_id)
        res: kernel_pb2.ResumeCallResponse = yield from self._unary("ResumeCall", req)
        return res

    def signing_keys(self) -> Flow[tuple[str, str]]:
        res: kernel_pb2.GetSigningKeysResponse = yield from self._unary("GetSigningKeys", kernel_pb2.GetSigningKeysRequest())
        return res.jwks_json, res.current_key_id

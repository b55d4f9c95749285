"""keycap.kernel.v1.KernelService's operations as flows (the sync and asyncio kernel clients run them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from google.protobuf import timestamp_pb2

from keycap_client._core import wire
from keycap_client._core.call import ClientCore, Flow, collect_pages
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client.tool_definition import ToolDefinition

#: What a handle is made of: the journaled call, its capability, and when that expires.
HandleArgs = tuple[kernel_pb2.Call, str, timestamp_pb2.Timestamp | None]


class KernelCore(ClientCore):
    """Every KernelService operation: the request built and checked, paging, the result."""

    __slots__ = ()

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
        self, tool_id: str, arguments_json: str, *, call_id: str, run_id: str
    ) -> Flow[kernel_pb2.BeginCallResponse]:
        req = wire.begin_call_request(tool_id, arguments_json, call_id, run_id)
        res: kernel_pb2.BeginCallResponse = yield from self._unary("BeginCall", req)
        return res

    def begin(self, tool_id: str, args: Mapping[str, Any] | str, *, call_id: str, run_id: str) -> Flow[HandleArgs]:
        """BeginCall with ``args`` (a mapping serialised to JSON, or JSON text as given): ``handle_for``'s arguments."""
        res = yield from self.begin_call(tool_id, wire.arguments_json(args), call_id=call_id, run_id=run_id)
        return res.call, res.capability, res.capability_expires_at if res.HasField("capability_expires_at") else None

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

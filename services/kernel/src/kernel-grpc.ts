/**
 * The gRPC binding of the kernel: each RPC authenticates its caller and records its refusals
 * (kernel-handlers.ts), maps its request to the service's input, and its result to the reply
 * (kernel-proto.ts). GetSigningKeys alone is anonymous.
 */
import {
  BeginCallRequest,
  CompleteCallRequest,
  type BeginCallResponse,
  type BeginCallsRequest,
  type BeginCallsResponse,
  type CompleteCallResponse,
  type CompleteCallsRequest,
  type CompleteCallsResponse,
  type GetCallRequest,
  type GetToolRequest,
  type KernelServiceServer,
  type ListIndeterminateCallsRequest,
  type ListPendingCallsRequest,
  type ListRunCallsRequest,
  type ListToolsRequest,
  type RegisterToolRequest,
  type ResumeCallRequest,
  type SearchCallsRequest,
} from "../../../gen/ts/keycap/kernel/v1/kernel";
import { RequestRules } from "../../common/src/request-rules";
import type { Caller } from "./caller-auth";
import type { Kernel } from "./kernel";
import { kernelBatchHandler, kernelHandler, type KernelEdge } from "./kernel-handlers";
import { beginInputFromProto, begunToProto, callToProto, criterionFromProto, outcomeFromProto, resumedToProto, storyToProto } from "./kernel-proto";
import { definitionFromProto, toolToProto } from "./tool-definition";

export function kernelServiceImpl(kernel: Kernel, edge: KernelEdge, rules = RequestRules.load()): KernelServiceServer {
  // A batch's items are checked against their message's rules one by one (kernel.proto).
  const beginRules = rules.checkerOf("keycap.kernel.v1.BeginCallRequest");
  const completeRules = rules.checkerOf("keycap.kernel.v1.CompleteCallRequest");
  const beginItem = { method: "BeginCall", check: (r: BeginCallRequest) => beginRules(BeginCallRequest.encode(r).finish()) };
  const completeItem = { method: "CompleteCall", check: (r: CompleteCallRequest) => completeRules(CompleteCallRequest.encode(r).finish()) };
  const handle = <Req, Res>(method: string, fn: (r: Req, c: Caller) => Promise<Res>) => kernelHandler(edge, method, fn);
  const begin = async (r: BeginCallRequest, c: Caller): Promise<BeginCallResponse> => begunToProto(await kernel.beginCall(beginInputFromProto(r), c));
  const complete = async (r: CompleteCallRequest, c: Caller): Promise<CompleteCallResponse> => {
    const { call, alreadyCompleted } = await kernel.completeCall({ callId: r.callId, outcome: outcomeFromProto(r.outcome), outcomeDetail: r.outcomeDetail }, c);
    return { call: callToProto(call), alreadyCompleted };
  };
  return {
    registerTool: handle("RegisterTool", async (r: RegisterToolRequest, c) => {
      const { tool, alreadyRegistered } = await kernel.registerTool(() => definitionFromProto(r.tool), c);
      return { tool: toolToProto(tool), alreadyRegistered };
    }),
    getTool: handle("GetTool", async (r: GetToolRequest, c) => ({ tool: toolToProto(await kernel.getTool(r.toolId, c)) })),
    listTools: handle("ListTools", async (r: ListToolsRequest, c) => {
      const page = await kernel.listTools(r, c);
      return { tools: page.items.map(toolToProto), nextPageToken: page.nextPageToken };
    }),
    beginCall: handle("BeginCall", begin),
    completeCall: handle("CompleteCall", complete),
    beginCalls: kernelBatchHandler<BeginCallsRequest, BeginCallsResponse, BeginCallRequest, BeginCallResponse>(
      edge,
      "BeginCalls",
      beginItem,
      begin,
      (results) => ({
        results: results.map((r) => ({ result: r.$case === "ok" ? { $case: "begun", value: r.value } : { $case: "errorStatus", value: r.status } })),
      }),
      (r) => kernel.acceptReceipts(r.receipts),
    ),
    completeCalls: kernelBatchHandler<CompleteCallsRequest, CompleteCallsResponse, CompleteCallRequest, CompleteCallResponse>(
      edge,
      "CompleteCalls",
      completeItem,
      complete,
      (results) => ({
        results: results.map((r) => ({ result: r.$case === "ok" ? { $case: "completed", value: r.value } : { $case: "errorStatus", value: r.status } })),
      }),
    ),
    listPendingCalls: handle("ListPendingCalls", async (r: ListPendingCallsRequest, c) => {
      const page = await kernel.listPendingCalls(r, c);
      return { calls: page.items.map(callToProto), nextPageToken: page.nextPageToken };
    }),
    resumeCall: handle("ResumeCall", async (r: ResumeCallRequest, c) => resumedToProto(await kernel.resumeCall(r, c))),
    listIndeterminateCalls: handle("ListIndeterminateCalls", async (r: ListIndeterminateCallsRequest, c) => {
      const page = await kernel.listIndeterminateCalls(r, c);
      return { calls: page.items.map(callToProto), nextPageToken: page.nextPageToken };
    }),
    listRunCalls: handle("ListRunCalls", async (r: ListRunCallsRequest, c) => {
      const page = await kernel.listRunCalls(r, c);
      return { calls: page.items.map((rc) => ({ position: rc.position, call: callToProto(rc.call) })), nextPageToken: page.nextPageToken };
    }),
    getCall: handle("GetCall", async (r: GetCallRequest, c) => storyToProto(await kernel.getCall(r.callId, c))),
    searchCalls: handle("SearchCalls", async (r: SearchCallsRequest, c) => {
      const criterion = criterionFromProto(r);
      const page = await kernel.searchCalls({ pageSize: r.pageSize, pageToken: r.pageToken, ...(criterion ? { criterion } : {}) }, c);
      return { calls: page.items.map(callToProto), nextPageToken: page.nextPageToken };
    }),
    // The JWKS is public (kernel.proto): its authenticity comes from the channel, not the caller.
    getSigningKeys: kernelHandler(edge, "GetSigningKeys", async () => kernel.getSigningKeys(), { anonymous: true }),
  };
}

/** `keycap mcp`: the MCP gateway (DESIGN §11). */
export { runMcpGateway, type ServeOptions } from "./main";
export { loadPolicy, parsePolicy, PolicyError, POLICY_SCHEMA, type Policy, type ToolPolicy, type UpstreamPolicy } from "./policy";
export { governTools, kernelToolId, PolicyMismatchError, type GovernedTool, type UpstreamTool } from "./governed-tools";
export { RegistrationError } from "./kernel-registration";
export { initPolicy, policyText } from "./policy-init";
export {
  META_CALL_ID,
  META_CAPABILITY,
  META_IDEMPOTENCY_KEY,
  META_RECORDED_AT,
  META_RECORDED_CALL_ID,
  META_REPLAY,
  META_REPLAY_OF,
  META_REQUEST_ID,
  META_RUN_ID,
  META_RUN_MODE,
  META_SHADOWED,
  META_SHADOWS,
} from "./meta-keys";
export { createStderrLogger } from "./stderr-logger";

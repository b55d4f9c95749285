/**
 * The `_meta` keys keycap reads and writes on MCP messages. They are part of the contract
 * with keycap-aware MCP servers, so they live in services/common/src/mcp-contract.ts.
 */
export {
  META_ARGUMENTS_MISMATCH,
  META_CALL_ID,
  META_CAPABILITY,
  META_IDEMPOTENCY_KEY,
  META_NOT_SENT,
  META_RECORDED_AT,
  META_RECORDED_CALL_ID,
  META_REPLAY,
  META_REPLAY_OF,
  META_REQUEST_ID,
  META_RUN_ID,
  META_RUN_MODE,
  META_SHADOWED,
  META_SHADOWS,
} from "../../common/src/mcp-contract";

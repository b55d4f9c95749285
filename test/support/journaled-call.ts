/**
 * A pending Idempotent call as BeginCall journals it, its capability's claims filled in
 * (unsigned; iat the second of created_at, five minutes to live): the specs that write or read
 * the journal directly start from it and change what they test.
 */
import type { CallRecord } from "../../services/kernel/src/call-record";

export interface JournaledCallOptions {
  at?: Date;
  toolId?: string;
  runId?: string;
  /** The principal: the capability's `sub` and the record's `principal` (default "rt"). */
  principal?: string;
  argumentsJson?: string;
}

export function journaledCall(id: string, o: JournaledCallOptions = {}, extra: Partial<CallRecord> = {}): CallRecord {
  const at = o.at ?? new Date();
  const toolId = o.toolId ?? "rt.tool";
  const principal = o.principal ?? "rt";
  const iat = Math.floor(at.getTime() / 1000);
  return {
    _id: id,
    tool_id: toolId,
    run_id: o.runId ?? "run-1",
    arguments_json: o.argumentsJson ?? JSON.stringify({ order: id }),
    effect: "idempotent",
    key: `key-${id}`,
    attempt: 1,
    state: "pending",
    capability: {
      iss: "keycap-kernel",
      aud: "keycap-ledger",
      sub: principal,
      tool_id: toolId,
      effect: "idempotent",
      call_id: id,
      attempt: 1,
      jti: `jti-${id}`,
      key: `key-${id}`,
      iat,
      exp: iat + 300,
    },
    created_at: at,
    updated_at: at,
    principal,
    ...extra,
  };
}

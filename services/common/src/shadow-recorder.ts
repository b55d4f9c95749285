/**
 * Where keycap's gateways record a shadow run's would-be effects (ADR 0029): in the ledger's
 * shadow store (`shadow_entries`), through the ledger's own Write under the call's shadow
 * capability. The ledger is the component that knows modes and owns that store (one document
 * per key, never `entries`, ADR 0028), so a shadow call of a gateway is listed beside the
 * shadow run's other effects, and the gateway reaches no other service's collection.
 */
import { KeycapClientError, LedgerClient } from "../../../clients/ts/src";
import { Code, KeycapError, type KeycapCode } from "./errors";
import { Reasons, refuse } from "./refuse";

/** A recorded would-be effect, as the ledger's shadow store holds it. */
export interface ShadowRecord {
  entryId: string;
  recordedAt: Date | undefined;
  /** True when the shadow store already held an effect under this key (the first one is kept). */
  duplicate: boolean;
  /** A duplicate whose would-be effect differs from the one kept (another request under the same key). */
  payloadMismatch: boolean;
}

/** What the shadow effect is recorded under: the shadow capability's key (Idempotent) or request id (Queryable). */
export type ShadowTarget = { key: string } | { requestId: string };

/** Records would-be effects of shadow calls. */
export interface ShadowRecorder {
  /** Records `wouldBe` (JSON) as the effect of the shadow `capability` (compact JWS); throws KeycapError. */
  record(capability: string, target: ShadowTarget, wouldBe: Record<string, unknown>): Promise<ShadowRecord>;
  close(): void;
}

const CODES: ReadonlySet<number> = new Set(Object.values(Code));

/** A {@link ShadowRecorder} writing to the ledger (KEYCAP_LEDGER_ADDRESS). */
export class LedgerShadowRecorder implements ShadowRecorder {
  constructor(private readonly ledger: LedgerClient) {}

  async record(capability: string, target: ShadowTarget, wouldBe: Record<string, unknown>): Promise<ShadowRecord> {
    let res;
    try {
      res = await this.ledger.writeWithCapability(capability, { ...target, payload: Buffer.from(JSON.stringify(wouldBe), "utf8") });
    } catch (err) {
      const e = KeycapClientError.from(err);
      // The ledger's reason passes through; a code keycap does not answer with (a dropped connection's) is UNAVAILABLE: retry.
      const code = (CODES.has(e.code) ? e.code : Code.UNAVAILABLE) as KeycapCode;
      throw new KeycapError(code, e.reason, `the ledger did not record the shadow effect: ${e.message}`, e.metadata);
    }
    if (!res.shadow) {
      // The ledger wrote somewhere other than its shadow store: never expected; say so loudly rather than call it shadowed.
      throw refuse(Reasons.INTERNAL, "the ledger did not take the shadow capability's write as a shadow effect");
    }
    return { entryId: res.entry?.entryId ?? "", recordedAt: res.entry?.recordedAt, duplicate: res.duplicate, payloadMismatch: res.payloadMismatch };
  }

  close(): void {
    this.ledger.close();
  }
}

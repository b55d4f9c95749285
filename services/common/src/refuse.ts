/**
 * A refusal from the reason catalogue (`proto/keycap/rules/v1/reasons.proto`): the reason
 * names its status code once, there, and the compiler holds every throw site to a reason
 * the catalogue has. Throw sites never pick a code by hand (issue 31; STYLE "Errors name
 * their reason once").
 *
 * @example throw refuse(Reasons.KEY_FIELD_MISSING, "arguments: /order_id is missing", { field: "/order_id" })
 */
import { REASON_CODES, type Reason } from "../../../gen/ts/keycap/rules/v1/reasons.catalog";
import { KeycapError, type FieldViolation, type KeycapCode } from "./errors";

export { REASON_CODES, Reasons, type Reason } from "../../../gen/ts/keycap/rules/v1/reasons.catalog";

export function refuse(reason: Reason, message: string, metadata: Record<string, string> = {}, violations: readonly FieldViolation[] = []): KeycapError {
  return new KeycapError(REASON_CODES[reason] as KeycapCode, reason, message, metadata, violations);
}

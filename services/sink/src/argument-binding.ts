/**
 * A capability bound to the arguments a sink received, not just to its tool (ADR 0026): the
 * sink derives the key again from the arguments in hand, with the derivation the kernel signed
 * into the capability, and refuses KEY_MISMATCH when it is not the capability's key. So a
 * capability minted for `charge(order A)` cannot carry `charge(order B)`.
 *
 * Only Idempotent capabilities carry a key to bind; Unsafe and Queryable ones are bound to
 * one use instead (the spent store).
 */
import type { DerivationClaim, VerifiedCapability } from "../../capability/src";
import { KeycapError } from "../../common/src/errors";
import { deriveKey, derivationOfClaim, validateDerivation } from "../../common/src/domain/key-derivation";
import { DEFAULT_JSON_LIMITS, parseArguments, type JsonLimits } from "../../common/src/domain/strict-json";
import { Reasons, refuse } from "../../common/src/refuse";

/**
 * The key `argumentsJson` gives under a capability's `derivation` claim: the kernel's own
 * derivation (ADR 0002), on the strict parse of the text.
 *
 * @throws KeycapError with the derivation's reasons (KEY_FIELD_MISSING, ARGUMENTS_DUPLICATE_MEMBER, …).
 * @example rederiveKey("mcp:payments/charge", cap.derivation!, JSON.stringify(args)) === cap.key
 */
export function rederiveKey(toolId: string, claim: DerivationClaim, argumentsJson: string, limits: JsonLimits = DEFAULT_JSON_LIMITS): string {
  const { spec, ctx } = derivationOfClaim(claim);
  return deriveKey(toolId, spec, parseArguments(argumentsJson, limits), ctx);
}

/**
 * Checks that `args` (the call's arguments as the sink received them, already parsed) are
 * arguments the capability's key was derived from.
 *
 * @returns the refusal, or undefined when they are (or the capability has no key to bind):
 *   CLAIM_MISSING for an Idempotent capability without a `derivation` claim (minted before
 *   it existed: its key cannot be tied to any arguments), CLAIM_INVALID for a claim the
 *   kernel would never sign, KEY_MISMATCH for arguments that give another key or none.
 */
export function bindArguments(cap: VerifiedCapability, args: unknown, limits: JsonLimits = DEFAULT_JSON_LIMITS): KeycapError | undefined {
  if (cap.effect !== "idempotent") return undefined;
  const claim = cap.derivation;
  if (claim === undefined) {
    return refuse(
      Reasons.CLAIM_MISSING,
      'the capability has no "derivation" claim, so its key cannot be bound to these arguments; begin the call again with a current kernel',
      { claim: "derivation" },
    );
  }
  try {
    validateDerivation(derivationOfClaim(claim).spec);
  } catch (err) {
    if (!(err instanceof KeycapError)) throw err;
    return refuse(Reasons.CLAIM_INVALID, `capability claim "derivation" is not a usable derivation: ${err.message}`, {
      claim: "derivation",
      problem: err.reason,
    });
  }
  let derived: string;
  try {
    derived = deriveFromParsed(cap.tool_id, claim, args === undefined ? {} : args, limits);
  } catch (err) {
    if (!(err instanceof KeycapError)) throw err;
    return refuse(
      Reasons.KEY_MISMATCH,
      `the arguments received give no key under the capability's derivation (${err.reason}: ${err.message}); the capability was minted for other arguments`,
      { rederivation: err.reason, ...err.metadata },
    );
  }
  if (derived === cap.key) return undefined;
  return refuse(
    Reasons.KEY_MISMATCH,
    "the key derived from the arguments received is not the capability's key: the capability was minted for other arguments",
    { derived_key: derived },
  );
}

/**
 * The key of arguments the transport already parsed. Their JSON text is gone, so they are
 * written out again and read back strictly, which keeps every check on values (an object,
 * finite numbers, well-formed Unicode, the depth and size limits) but one: an integer beyond
 * 2^53 is not refused here. In the text it may have been rounded by the parse; here it is the
 * exact double the handler will act on, so a key bound to that value binds what happens.
 */
function deriveFromParsed(toolId: string, claim: DerivationClaim, args: unknown, limits: JsonLimits): string {
  const { spec, ctx } = derivationOfClaim(claim);
  const { value } = parseArguments(JSON.stringify(args) ?? "", limits);
  return deriveKey(toolId, spec, { value, unsafeIntegerPaths: new Set() }, ctx);
}

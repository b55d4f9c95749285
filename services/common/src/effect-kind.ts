import { EffectKind } from "../../../gen/ts/keycap/effect/v1/effect";
import type { EffectName } from "./capability";

const EFFECT_KINDS: Readonly<Record<string, EffectKind>> = {
  idempotent: EffectKind.EFFECT_KIND_IDEMPOTENT,
  queryable: EffectKind.EFFECT_KIND_QUERYABLE,
  unsafe: EffectKind.EFFECT_KIND_UNSAFE,
};

/** Effect name ("idempotent", ...) → proto enum; anything else is UNSPECIFIED. */
export function effectKindOf(name: EffectName | string): EffectKind {
  return EFFECT_KINDS[name] ?? EffectKind.EFFECT_KIND_UNSPECIFIED;
}

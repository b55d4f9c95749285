import { EffectKind } from "../../../gen/ts/keycap/effect/v1/effect";

/** The effect class a tool declares and a capability grants, as written in the `effect` claim. */
export type EffectName = "idempotent" | "queryable" | "unsafe";

/** Every valid `effect` claim value. */
export const EFFECT_NAMES: readonly EffectName[] = ["idempotent", "queryable", "unsafe"];

const EFFECT_KINDS: Readonly<Record<string, EffectKind>> = {
  idempotent: EffectKind.EFFECT_KIND_IDEMPOTENT,
  queryable: EffectKind.EFFECT_KIND_QUERYABLE,
  unsafe: EffectKind.EFFECT_KIND_UNSAFE,
};

/** Effect name ("idempotent", ...) → proto enum; anything else is UNSPECIFIED. */
export function effectKindOf(name: EffectName | string): EffectKind {
  return EFFECT_KINDS[name] ?? EffectKind.EFFECT_KIND_UNSPECIFIED;
}

// The generated type (not only defineTool): a derivation with no fields must not compile.
import type { KeyDerivationValid } from "../../gen/ts/keycap/effect/v1/effect.valid";

export const key: KeyDerivationValid = { fields: [], version: 1, contextFields: [] };

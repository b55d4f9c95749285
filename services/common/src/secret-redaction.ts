/**
 * Credentials out of log text. Every log line passes through `redactSecrets` on its way to
 * stdout (log-destination.ts), whatever wrote it: our code, grpc-js's own messages routed
 * into the log, an error's message or stack. Redaction works on the serialized line, so a
 * secret is caught in a message, a field or a nested error alike (DESIGN §13).
 */

/** What a redacted value becomes. */
export const REDACTED = "[redacted]";

/**
 * grpc-js's warning for a header it cannot turn into metadata quotes the whole value, twice
 * (once itself, once in the validation error): an `authorization: Bearer <token>` with a tab
 * or a non-ASCII character printed the token. The key and the reason are kept; the value,
 * whatever header it belongs to, is not.
 */
const GRPC_METADATA_WARNING = /(Failed to add metadata entry )([^:\s]*): .*?(?=\. For more information|$)/g;

/**
 * An HTTP authorization scheme and everything after it up to the end of the (JSON) string
 * it sits in: a credential with a tab or a quote inside is cut at no character of its own.
 * `<token>`-style placeholders in help texts are left alone.
 */
const AUTH_SCHEME = /\b(Bearer|Basic)\b(?![ \t]*<)(?:[^"\\\n\r]|\\.)+/gi;

/** keycap's bearer secrets carry a prefix so scanners can find them (ADR 0008). */
const PREFIXED_TOKEN = /\bkeycap_(rt|op)_[A-Za-z0-9_-]+/g;

/** A compact JWS (a capability is a bearer credential for one write). */
const COMPACT_JWS = /\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+/g;

/** Secret values this process knows (the admin token), replaced wherever they appear. */
const knownSecrets = new Set<string>();

/**
 * Makes `value` be replaced in every later log line, as is and JSON-escaped. Values
 * shorter than 8 characters are ignored: they would redact ordinary words.
 */
export function registerSecret(value: string): void {
  if (value.length < 8) return;
  knownSecrets.add(value);
  const escaped = JSON.stringify(value).slice(1, -1);
  if (escaped !== value) knownSecrets.add(escaped);
}

/** `text` with every credential shape replaced by {@link REDACTED}. */
export function redactSecrets(text: string): string {
  let out = text
    .replace(GRPC_METADATA_WARNING, `$1$2: <value withheld>`)
    .replace(AUTH_SCHEME, `$1 ${REDACTED}`)
    .replace(PREFIXED_TOKEN, `keycap_$1_${REDACTED}`)
    .replace(COMPACT_JWS, REDACTED);
  for (const secret of knownSecrets) {
    if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  }
  return out;
}

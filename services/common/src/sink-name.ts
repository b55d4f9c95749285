/**
 * How a sink (a service embedding keycap's sink SDK) is named in the refusal store: its
 * records carry `service: "sink:<name>"`, so `keycap rejections --service sink:payments`
 * shows one sink's refusals beside the kernel's and the ledger's. The SDKs in Python and
 * Go apply the same rule (docs/decisions/0013-sink-sdks.md).
 */

/** A sink name: lowercase letters, digits, ".", "_" and "-", 1-63 long, starting alphanumeric. */
export const SINK_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** `service` value of a sink's refusal records, e.g. "sink:payments". */
export const SINK_SERVICE = /^sink:[a-z0-9][a-z0-9._-]{0,62}$/;

/** The `service` a sink's records carry; throws RangeError on a name {@link SINK_NAME} refuses. */
export function sinkService(name: string): string {
  if (!SINK_NAME.test(name)) throw new RangeError(`sink name ${JSON.stringify(name)}: expected 1-63 of [a-z0-9._-], starting with a letter or digit`);
  return `sink:${name}`;
}

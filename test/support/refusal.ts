import { KeycapClientError } from "../../clients/ts/src";

/** Awaits a call that must be refused, and returns the refusal (fails the test on success). */
export async function refusal(p: Promise<unknown>): Promise<KeycapClientError> {
  try {
    await p;
  } catch (err) {
    return KeycapClientError.from(err);
  }
  throw new Error("expected a refusal, got success");
}

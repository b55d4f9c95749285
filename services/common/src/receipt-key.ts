/**
 * The completion receipts' key (ADR 0035), kept in the database the kernel and the ledger
 * share: the first service to start creates it, every start reads it. Never logged.
 */
import { randomBytes } from "node:crypto";
import { Binary, type Db } from "mongodb";
import { RECEIPT_KEY_BYTES } from "./domain/completion-receipt";
import { isDuplicateKey } from "./mongo";

interface ReceiptKeyDoc {
  _id: string;
  key: Binary;
  created_at: Date;
}

/** The collection and the document holding the key. */
export const RECEIPT_KEYS = "receipt_keys";
const COMPLETION_RECEIPTS = "completion-receipts";

export async function loadReceiptKey(db: Db): Promise<Uint8Array> {
  const keys = db.collection<ReceiptKeyDoc>(RECEIPT_KEYS);
  try {
    const key = randomBytes(RECEIPT_KEY_BYTES);
    await keys.insertOne({ _id: COMPLETION_RECEIPTS, key: new Binary(key), created_at: new Date() }, { writeConcern: { w: "majority" } });
    return key;
  } catch (err) {
    if (!isDuplicateKey(err)) throw err;
  }
  const doc = await keys.findOne({ _id: COMPLETION_RECEIPTS });
  const key = doc?.key.buffer;
  if (!key || key.length !== RECEIPT_KEY_BYTES) {
    throw new Error(
      `${RECEIPT_KEYS}/${COMPLETION_RECEIPTS} holds no ${RECEIPT_KEY_BYTES}-byte key: remove that document and restart (the next start creates one)`,
    );
  }
  return Uint8Array.from(key);
}

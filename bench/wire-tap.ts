/**
 * A MongoDB wire-protocol tap: a TCP proxy between one service and the database that
 * counts what the service sends, so "database round trips per call" is a measured number,
 * not a reading of the code. Each client message (OP_MSG) is one round trip; its first
 * BSON key names the command and its value the collection. Bytes are counted both ways.
 * The tap adds a hop, so it runs in a pass of its own, never under a throughput run.
 */
import * as net from "node:net";
import { BSON } from "mongodb";

const OP_MSG = 2013;
const OP_COMPRESSED = 2012;
const HEADER = 16;

/** Counts of one command on one collection. */
export interface CommandCount {
  command: string;
  collection: string;
  count: number;
  bytesToServer: number;
}

/** What an insert command sent, values left out: the shape two inserts are compared by. */
export interface InsertShape {
  collection: string;
  /** The command's own fields other than the collection and per-request ids (writeConcern, ordered, ...). */
  options: Record<string, unknown>;
  /** Each inserted document's fields in order with their BSON type and value size in bytes. */
  fields: { name: string; type: string; bytes: number }[];
  documentBytes: number;
}

export interface TapSnapshot {
  messages: number;
  bytesToServer: number;
  bytesFromServer: number;
  commands: CommandCount[];
}

/** Commands the driver sends on its own (handshakes, monitoring), not for a request. */
const HOUSEKEEPING = new Set(["hello", "ismaster", "isMaster", "ping", "buildInfo", "buildinfo", "endSessions", "saslStart", "saslContinue"]);

export class WireTap {
  private readonly counts = new Map<string, CommandCount>();
  private bytesToServer = 0;
  private bytesFromServer = 0;
  private readonly sockets = new Set<net.Socket>();
  /** The last insert seen per collection. */
  readonly inserts = new Map<string, InsertShape>();
  /** Armed by {@link loseAnswerTo}: the next such command reaches the server, its answer never the client. */
  private losing: { command: string; collection: string; lost: () => void } | undefined;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  /** Listens on a free loopback port and forwards every connection to `target` (host:port). */
  static async start(target: { host: string; port: number }): Promise<WireTap> {
    let tap: WireTap | undefined;
    const server = net.createServer((client) => tap?.relay(client, target));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    tap = new WireTap(server, (server.address() as net.AddressInfo).port);
    return tap;
  }

  /** What was counted since the last reset, housekeeping commands (handshakes, heartbeats) left out of the counts and bytes sent. */
  snapshot(): TapSnapshot {
    const commands = [...this.counts.values()].filter((c) => !HOUSEKEEPING.has(c.command)).sort((a, b) => b.count - a.count);
    return { messages: commands.reduce((n, c) => n + c.count, 0), bytesToServer: this.bytesToServer, bytesFromServer: this.bytesFromServer, commands };
  }

  /**
   * A network fault for tests: the next `command` on `collection` is forwarded and applied by
   * the server, then the connection breaks before its answer reaches the client — a write
   * whose outcome the client cannot know. Resolves once the answer has been dropped.
   */
  loseAnswerTo(command: string, collection: string): Promise<void> {
    return new Promise((lost) => (this.losing = { command, collection, lost }));
  }

  reset(): void {
    this.counts.clear();
    this.bytesToServer = 0;
    this.bytesFromServer = 0;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(client: net.Socket, target: { host: string; port: number }): void {
    const upstream = net.connect(target.port, target.host);
    this.sockets.add(client).add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    let pending: Buffer = Buffer.alloc(0);
    /** Set when this connection carried the command whose answer is to be lost. */
    let losing: (() => void) | undefined;
    client.on("data", (chunk: Buffer) => {
      upstream.write(chunk);
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= HEADER) {
        const length = pending.readInt32LE(0);
        if (pending.length < length) break;
        const { command, collection } = this.count(pending.subarray(0, length));
        if (this.losing && this.losing.command === command && this.losing.collection === collection) {
          losing = this.losing.lost;
          this.losing = undefined;
        }
        pending = pending.subarray(length);
      }
    });
    upstream.on("data", (chunk: Buffer) => {
      this.bytesFromServer += chunk.length;
      if (losing) {
        // The server answered, so it applied the command: the client never hears of it.
        client.destroy();
        upstream.destroy();
        losing();
        losing = undefined;
        return;
      }
      client.write(chunk);
    });
  }

  private count(message: Buffer): { command: string; collection: string } {
    const opCode = message.readInt32LE(12);
    let command = `opcode ${opCode}`;
    let collection = "";
    if (opCode === OP_MSG) {
      const { body, sequences } = sectionsOf(message);
      const first = Object.keys(body)[0] ?? "?";
      command = first;
      collection = typeof body[first] === "string" ? (body[first] as string) : "";
      if (command === "insert") {
        // In a document sequence (kind 1) the documents are raw; in the body they were decoded: re-encode (same order, same types).
        const inBody = Array.isArray(body["documents"]) ? (body["documents"] as Record<string, unknown>[]).map((d) => Buffer.from(BSON.serialize(d))) : [];
        const doc = (sequences.get("documents") ?? inBody)[0];
        if (doc) this.inserts.set(collection, insertShape(collection, body, doc));
      }
    } else if (opCode === OP_COMPRESSED) {
      command = "compressed";
    }
    if (!HOUSEKEEPING.has(command)) this.bytesToServer += message.length;
    const id = `${command}\u0000${collection}`;
    const c = this.counts.get(id) ?? { command, collection, count: 0, bytesToServer: 0 };
    c.count++;
    c.bytesToServer += message.length;
    this.counts.set(id, c);
    return { command, collection };
  }
}

/** The body (kind 0) and document sequences (kind 1, raw BSON) of an OP_MSG. */
function sectionsOf(message: Buffer): { body: Record<string, unknown>; sequences: Map<string, Buffer[]> } {
  let at = HEADER + 4;
  let body: Record<string, unknown> = {};
  const sequences = new Map<string, Buffer[]>();
  const end = message.length - ((message.readUInt32LE(HEADER) & 1) === 1 ? 4 : 0);
  while (at < end) {
    const kind = message[at++];
    if (kind === 0) {
      const size = message.readInt32LE(at);
      body = BSON.deserialize(message.subarray(at, at + size));
      at += size;
    } else {
      const size = message.readInt32LE(at);
      const stop = at + size;
      const nameEnd = message.indexOf(0, at + 4);
      const name = message.toString("utf8", at + 4, nameEnd);
      const docs: Buffer[] = [];
      for (let d = nameEnd + 1; d < stop; d += message.readInt32LE(d)) docs.push(message.subarray(d, d + message.readInt32LE(d)));
      sequences.set(name, docs);
      at = stop;
    }
  }
  return { body, sequences };
}

const BSON_TYPES: Record<number, string> = {
  1: "double",
  2: "string",
  3: "object",
  4: "array",
  5: "binary",
  7: "objectId",
  8: "bool",
  9: "date",
  10: "null",
  16: "int",
  18: "long",
};

/** Field names, types and sizes of one raw BSON document, read from its bytes. */
function insertShape(collection: string, command: Record<string, unknown>, raw: Buffer): InsertShape {
  const fields: InsertShape["fields"] = [];
  const decoded = BSON.deserialize(raw);
  const names = Object.keys(decoded);
  for (const name of names) {
    const value = decoded[name];
    const bytes = BSON.calculateObjectSize({ v: value }) - 5 - 3; // the value alone: minus the wrapper and the "v" element header
    fields.push({ name, type: bsonType(raw, name), bytes });
  }
  const { insert: _c, lsid: _l, $db: _d, $clusterTime: _t, txnNumber: _n, documents: _docs, ...options } = command;
  return { collection, options, fields, documentBytes: raw.length };
}

/** The BSON element type byte of top-level field `name` in `raw`. */
function bsonType(raw: Buffer, name: string): string {
  let at = 4;
  while (at < raw.length - 1) {
    const type = raw[at]!;
    const nameEnd = raw.indexOf(0, at + 1);
    const field = raw.toString("utf8", at + 1, nameEnd);
    if (field === name) return BSON_TYPES[type] ?? `type ${type}`;
    const value = raw.subarray(nameEnd + 1);
    at = nameEnd + 1 + elementSize(type, value);
  }
  return "?";
}

function elementSize(type: number, v: Buffer): number {
  switch (type) {
    case 1:
    case 9:
    case 18:
      return 8;
    case 2:
      return 4 + v.readInt32LE(0);
    case 3:
    case 4:
      return v.readInt32LE(0);
    case 5:
      return 5 + v.readInt32LE(0);
    case 7:
      return 12;
    case 8:
      return 1;
    case 10:
      return 0;
    case 16:
      return 4;
    default:
      throw new Error(`wire tap: BSON type ${type} not supported`);
  }
}

/** `mongodb://host:port/...` with host:port replaced by the tap's. */
export function viaTap(uri: string, tap: WireTap): string {
  const u = new URL(uri);
  u.host = `127.0.0.1:${tap.port}`;
  return u.toString();
}

/** host and port of a mongodb:// URI (single host). */
export function targetOf(uri: string): { host: string; port: number } {
  const u = new URL(uri);
  return { host: u.hostname, port: Number(u.port || 27017) };
}

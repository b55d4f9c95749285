/**
 * A gRPC request with headers no well-behaved client would send: a tab or a non-ASCII byte
 * in a value, two values of one header. grpc-js and Node's http2 client refuse to send
 * those, so this writes the HTTP/2 frames itself (HPACK literals, no Huffman coding) on a
 * plain socket. It only waits for the stream to end; the answer is not decoded.
 */
import * as net from "node:net";

/** One header as sent: name and raw value bytes (a string is sent as UTF-8). */
export type RawHeader = [name: string, value: string | Buffer];

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const TYPE_DATA = 0x0;
const TYPE_HEADERS = 0x1;
const TYPE_RST_STREAM = 0x3;
const TYPE_SETTINGS = 0x4;
const TYPE_GOAWAY = 0x7;
const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** RFC 7541 §5.1 integer with a 7-bit prefix (string lengths, Huffman bit clear). */
function hpackLength(n: number): Buffer {
  if (n < 127) return Buffer.from([n]);
  const out = [127];
  let rest = n - 127;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return Buffer.from(out);
}

/** Literal header field without indexing, new name (RFC 7541 §6.2.2). */
function hpackLiteral(name: string, value: string | Buffer): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = typeof value === "string" ? Buffer.from(value, "utf8") : value;
  return Buffer.concat([Buffer.from([0x00]), hpackLength(n.length), n, hpackLength(v.length), v]);
}

/**
 * Sends one unary gRPC request (an empty message) to `path` on `address` with the extra
 * headers, and resolves when the server ends the stream or the connection (or after
 * `timeoutMs`, whichever is first).
 */
export async function sendRawGrpc(address: string, path: string, headers: RawHeader[], timeoutMs = 3000): Promise<void> {
  const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))];
  const block = Buffer.concat(
    (
      [
        [":method", "POST"],
        [":scheme", "http"],
        [":path", path],
        [":authority", address],
        ["content-type", "application/grpc"],
        ["te", "trailers"],
        ...headers,
      ] as RawHeader[]
    ).map(([k, v]) => hpackLiteral(k, v)),
  );
  await new Promise<void>((resolve) => {
    const socket = net.connect(port, host);
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    socket.on("error", done);
    socket.on("close", done);
    socket.on("connect", () => {
      socket.write(
        Buffer.concat([
          PREFACE,
          frame(TYPE_SETTINGS, 0, 0, Buffer.alloc(0)),
          frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, block),
          frame(TYPE_DATA, FLAG_END_STREAM, 1, Buffer.alloc(5)),
        ]),
      );
    });
    let pending = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 9) {
        const len = pending.readUIntBE(0, 3);
        if (pending.length < 9 + len) break;
        const [type, flags, stream] = [pending[3]!, pending[4]!, pending.readUInt32BE(5) & 0x7fffffff];
        pending = pending.subarray(9 + len);
        if (type === TYPE_SETTINGS && (flags & FLAG_ACK) === 0) socket.write(frame(TYPE_SETTINGS, FLAG_ACK, 0, Buffer.alloc(0)));
        if (type === TYPE_GOAWAY || (stream === 1 && (type === TYPE_RST_STREAM || (type === TYPE_HEADERS && (flags & FLAG_END_STREAM) !== 0)))) {
          done();
          return;
        }
      }
    });
  });
}

/** One HTTP/1.1 request written as is (header bytes included), resolved when the server closes or answers. */
export async function sendRawHttp1(address: string, head: Buffer, timeoutMs = 3000): Promise<string> {
  const [host, port] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))];
  return new Promise<string>((resolve) => {
    let answer = "";
    const socket = net.connect(port, host, () => socket.write(head));
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(done, timeoutMs);
    socket.on("data", (d: Buffer) => {
      answer += d.toString("latin1");
      if (/\r\n\r\n/.test(answer)) setTimeout(done, 50);
    });
    socket.on("error", done);
    socket.on("close", done);
  });
}

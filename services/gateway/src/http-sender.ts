/**
 * One HTTP exchange with a destination: node:http(s) through request-filtering-agent, which
 * checks the address actually connected to (after DNS, so a name that resolves to a private
 * address is caught, and a rebinding answer cannot slip past a check made earlier). The
 * whole exchange (connect, answer, body) has one deadline; the body is read up to a limit.
 */
import * as http from "node:http";
import * as https from "node:https";
import { RequestFilteringHttpAgent, RequestFilteringHttpsAgent } from "request-filtering-agent";

/** What the destination answered. */
export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  bodyTruncated: boolean;
}

/** Why no answer came back: `address` means nothing was sent; the others may have reached the destination. */
export class SendFailure extends Error {
  constructor(
    readonly kind: "address" | "timeout" | "network",
    message: string,
  ) {
    super(message);
    this.name = "SendFailure";
  }
}

/** The request to send. */
export interface HttpRequestSpec {
  method: string;
  url: URL;
  headers: [string, string][];
  body: Buffer;
  allowPrivateNetwork: boolean;
}

export interface HttpSenderOptions {
  timeoutMs: number;
  maxResponseBytes: number;
}

// request-filtering-agent refuses with a plain Error whose message says so; its wording is
// pinned by the version in package-lock.json and by the gateway's SSRF test.
const ADDRESS_REFUSED = /is not allowed\. Because/;

export class HttpSender {
  private readonly publicOnly = { http: new RequestFilteringHttpAgent({ keepAlive: true }), https: new RequestFilteringHttpsAgent({ keepAlive: true }) };
  private readonly anyAddress = {
    http: new RequestFilteringHttpAgent({ keepAlive: true, allowPrivateIPAddress: true }),
    https: new RequestFilteringHttpsAgent({ keepAlive: true, allowPrivateIPAddress: true }),
  };

  constructor(private readonly opts: HttpSenderOptions) {}

  send(req: HttpRequestSpec): Promise<HttpAnswer> {
    const agents = req.allowPrivateNetwork ? this.anyAddress : this.publicOnly;
    const secure = req.url.protocol === "https:";
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of req.headers) {
      const existing = headers[name];
      headers[name] = existing === undefined ? value : [...(Array.isArray(existing) ? existing : [String(existing)]), value];
    }
    headers["content-length"] = String(req.body.length);
    return new Promise<HttpAnswer>((resolve, reject) => {
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, this.opts.timeoutMs);
      const fail = (err: unknown): void => {
        clearTimeout(timer);
        const message = err instanceof Error ? err.message : String(err);
        if (timedOut) reject(new SendFailure("timeout", `no answer within ${this.opts.timeoutMs} ms`));
        else if (ADDRESS_REFUSED.test(message)) reject(new SendFailure("address", message));
        else reject(new SendFailure("network", message));
      };
      const options: https.RequestOptions = { method: req.method, headers, signal: controller.signal, agent: secure ? agents.https : agents.http };
      const request = (secure ? https : http).request(req.url, options, (res) => {
        const chunks: Buffer[] = [];
        let length = 0;
        let truncated = false;
        res.on("data", (chunk: Buffer) => {
          if (truncated) return;
          const room = this.opts.maxResponseBytes - length;
          if (chunk.length > room) {
            chunks.push(chunk.subarray(0, room));
            length += room;
            truncated = true;
            // The rest is not wanted: stop reading and drop the connection.
            res.destroy();
            finish();
            return;
          }
          chunks.push(chunk);
          length += chunk.length;
        });
        let finished = false;
        const finish = (): void => {
          if (finished) return;
          finished = true;
          clearTimeout(timer);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks, length), bodyTruncated: truncated });
        };
        res.on("end", finish);
        res.on("error", (err) => (truncated ? undefined : fail(err)));
        res.on("aborted", () => (truncated ? undefined : fail(new Error("the destination closed the answer early"))));
      });
      request.on("error", fail);
      request.end(req.body);
    });
  }

  close(): void {
    for (const agents of [this.publicOnly, this.anyAddress]) {
      agents.http.destroy();
      agents.https.destroy();
    }
  }
}

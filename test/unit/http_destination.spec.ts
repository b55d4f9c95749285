/**
 * The gateway's rules (ADR 0019), without a network: what a destination may be, which
 * request URLs stay inside it, which headers a caller may set, which answers leave a key
 * retryable, and which redirects are followed.
 */
import { expect } from "chai";
import { KeycapError } from "../../services/common/src/errors";
import {
  checkHeaders,
  decideRedirect,
  isRetryableStatus,
  normalizeDestination,
  resolveForwardUrl,
  type HttpDestinationSpec,
} from "../../services/common/src/domain/http-destination";

const dest: HttpDestinationSpec = normalizeDestination({
  baseUrl: "https://api.example.com/v1",
  methods: ["POST", "PUT", "POST"],
  responseHeaders: ["Request-Id"],
  idempotencyHeader: "",
  allowPrivateNetwork: false,
});

function reasonOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof KeycapError) return err.reason;
    throw err;
  }
  return "none";
}

describe("HTTP destination rules (issue 12, gateway)", function () {
  it("normalises a destination: trailing slash, sorted unique methods, lower-case headers with content-type, the default key header", function () {
    expect(dest).to.deep.equal({
      baseUrl: "https://api.example.com/v1/",
      methods: ["POST", "PUT"],
      responseHeaders: ["content-type", "request-id"],
      idempotencyHeader: "Idempotency-Key",
      allowPrivateNetwork: false,
    });
  });

  it("refuses a base URL with another scheme, user info, a query or a fragment, and methods that are not writes", function () {
    const base = { baseUrl: "https://api.example.com/", methods: ["POST"], responseHeaders: [], idempotencyHeader: "", allowPrivateNetwork: false };
    for (const bad of [
      { baseUrl: "file:///etc/passwd" },
      { baseUrl: "https://u:p@api.example.com/" },
      { baseUrl: "https://api.example.com/?x=1" },
      { baseUrl: "https://api.example.com/#f" },
      { baseUrl: "not a url" },
      { methods: ["GET"] },
      { methods: [] },
      { idempotencyHeader: "Idempotency Key" },
      { responseHeaders: ["bad header"] },
    ]) {
      expect(
        reasonOf(() => normalizeDestination({ ...base, ...bad })),
        JSON.stringify(bad),
      ).to.equal("INVALID_HTTP_DESTINATION");
    }
  });

  it("resolves paths under the base URL and refuses every way out of it", function () {
    expect(resolveForwardUrl(dest, "charges").href).to.equal("https://api.example.com/v1/charges");
    expect(resolveForwardUrl(dest, "/charges?expand=customer").href).to.equal("https://api.example.com/v1/charges?expand=customer");
    // Leading slashes are "relative to the base", not a scheme-relative way to another host.
    expect(resolveForwardUrl(dest, "//evil.example.com/x").href).to.equal("https://api.example.com/v1/evil.example.com/x");
    for (const out of [
      "../admin",
      "charges/../../admin",
      "%2e%2e/admin",
      "https://evil.example.com/v1/x",
      "http://api.example.com/v1/x",
      "charges\r\nX-Injected: 1",
      "charges x",
      "charges\u0000",
    ]) {
      expect(
        reasonOf(() => resolveForwardUrl(dest, out)),
        JSON.stringify(out),
      ).to.equal("DESTINATION_NOT_ALLOWED");
    }
  });

  it("refuses headers the gateway owns, the key header in any case, and values that could split a request", function () {
    expect(checkHeaders(dest, [{ name: "Authorization", value: "Bearer sk_test" }])).to.deep.equal([["Authorization", "Bearer sk_test"]]);
    for (const h of [
      { name: "idempotency-KEY", value: "mine" },
      { name: "Host", value: "evil.example.com" },
      { name: "Transfer-Encoding", value: "chunked" },
      { name: "Content-Length", value: "0" },
      { name: "X-A", value: "1\r\nX-B: 2" },
      { name: "X A", value: "1" },
    ]) {
      expect(
        reasonOf(() => checkHeaders(dest, [h])),
        h.name,
      ).to.equal("INVALID_HEADER");
    }
  });

  it("leaves a key retryable on 5xx and the 4xx that mean 'not now'; every other status is final", function () {
    const retryable = [500, 502, 503, 504, 408, 409, 425, 429];
    const final = [200, 201, 204, 301, 400, 401, 402, 403, 404, 410, 422];
    expect(retryable.filter((s) => !isRetryableStatus(s))).to.deep.equal([]);
    expect(final.filter((s) => isRetryableStatus(s))).to.deep.equal([]);
  });

  it("follows 307/308 under the base, keeps 301/302/303 as the answer, refuses any redirect off the base", function () {
    const from = new URL("https://api.example.com/v1/charges");
    expect(decideRedirect(dest, from, 307, "/v1/charges/2")).to.deep.equal({ follow: true, url: new URL("https://api.example.com/v1/charges/2") });
    expect(decideRedirect(dest, from, 308, "charges/3")).to.deep.include({ follow: true });
    expect(decideRedirect(dest, from, 303, "/v1/charges/2")).to.deep.equal({ follow: false, final: true });
    for (const [status, location] of [
      [307, "https://evil.example.com/v1/x"],
      [308, "/v2/charges"],
      [302, "http://169.254.169.254/latest/meta-data"],
    ] as const) {
      const d = decideRedirect(dest, from, status, location);
      expect("refusal" in d && d.refusal.reason, `${status} ${location}`).to.equal("REDIRECT_NOT_ALLOWED");
    }
  });
});

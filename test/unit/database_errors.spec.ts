import { expect } from "chai";
import { MongoNetworkError, MongoServerError } from "mongodb";
import { isDatabaseUnavailable } from "../../services/common/src/mongo";

/** Node's own socket errors as the driver lets them through (not wrapped in MongoNetworkError). */
function socketError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

describe("database errors a client should retry (issue 15)", () => {
  it("counts the driver's network errors as unavailable", () => {
    expect(isDatabaseUnavailable(new MongoNetworkError("connection reset"))).to.equal(true);
  });

  // Seen by the torture test on PostgreSQL: the driver wrote to a socket the killed server had
  // closed, and the bare Node error was answered INTERNAL.
  it("counts a write to a socket the server closed (EPIPE) and other socket failures as unavailable", () => {
    expect(isDatabaseUnavailable(socketError("This socket has been ended by the other party", "EPIPE"))).to.equal(true);
    for (const code of ["ECONNRESET", "ECONNREFUSED", "ETIMEDOUT", "ERR_SOCKET_CLOSED"])
      expect(isDatabaseUnavailable(socketError("x", code)), code).to.equal(true);
  });

  it("does not count other errors", () => {
    expect(isDatabaseUnavailable(new Error("bug"))).to.equal(false);
    expect(isDatabaseUnavailable(socketError("no such file", "ENOENT"))).to.equal(false);
    expect(isDatabaseUnavailable(new MongoServerError({ message: "dup", code: 11000 }))).to.equal(false);
  });
});

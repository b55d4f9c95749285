import { expect } from "chai";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { LogDestination } from "../../services/common/src/log-destination";
import { REDACTED, redactSecrets, registerSecret } from "../../services/common/src/secret-redaction";

describe("secret redaction in log lines (issue 32)", function () {
  it("keeps grpc-js's metadata warning's key and reason but not the value, in plain text and in a JSON line", () => {
    const warning =
      'Failed to add metadata entry authorization: Bearer \tabc.def. Error: Metadata string value "Bearer \tabc.def" contains illegal characters. For more information see https://github.com/grpc/grpc-node/issues/1173';
    for (const text of [warning, JSON.stringify({ msg: warning })]) {
      const out = redactSecrets(text);
      expect(out).to.include("Failed to add metadata entry authorization: <value withheld>. For more information");
      expect(out).not.to.include("abc");
    }
  });

  it("redacts a bearer or basic credential to the end of its string, escapes and tabs included", () => {
    const line = JSON.stringify({ msg: "auth", header: 'Bearer  \tTOPSECRET"x\\y', other: "kept" });
    const out = redactSecrets(line);
    expect(out).not.to.match(/TOPSECRET|x\\\\y/);
    expect(JSON.parse(out)).to.deep.equal({ msg: "auth", header: `Bearer ${REDACTED}`, other: "kept" });
    expect(redactSecrets("Authorization: Basic dXNlcjpwYXNz")).to.equal(`Authorization: Basic ${REDACTED}`);
    // A help text's placeholder is not a credential.
    expect(redactSecrets("present it as authorization: Bearer <token>")).to.equal("present it as authorization: Bearer <token>");
  });

  it("redacts keycap's prefixed secrets and compact JWS capabilities wherever they stand", () => {
    const jws = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    const out = redactSecrets(`token keycap_rt_AbC-123_x and keycap_op_zz9 and ${jws}.`);
    expect(out).to.equal(`token keycap_rt_${REDACTED} and keycap_op_${REDACTED} and ${REDACTED}.`);
  });

  it("redacts a registered secret as is and JSON-escaped, and ignores values too short to be secrets", () => {
    registerSecret('reg"istered-secret-value');
    registerSecret("short");
    expect(redactSecrets('x reg"istered-secret-value y')).to.equal(`x ${REDACTED} y`);
    expect(redactSecrets(JSON.stringify({ v: 'reg"istered-secret-value' }))).to.equal(`{"v":"${REDACTED}"}`);
    expect(redactSecrets("a short word")).to.equal("a short word");
  });

  it("a log destination writes redacted lines, and after its reader is gone (EPIPE) drops lines instead of hanging", () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "keycap-log-")), "out.log");
    const fd = fs.openSync(file, "w");
    const dest = new LogDestination(fd);
    dest.write(JSON.stringify({ msg: "Bearer TOKEN123" }) + "\n");
    fs.closeSync(fd);
    expect(fs.readFileSync(file, "utf8")).to.equal(`{"msg":"Bearer ${REDACTED}"}\n`);

    const [readEnd, writeEnd] = pipePair();
    fs.closeSync(readEnd);
    const broken = new LogDestination(writeEnd);
    const started = Date.now();
    for (let i = 0; i < 5; i++) broken.write('{"msg":"stopped"}\n');
    expect(Date.now() - started, "no retry loop").to.be.below(5000);
    expect(broken.dropped).to.equal(5);
    fs.closeSync(writeEnd);
  });
});

/** A pipe's two ends as file descriptors (Node has no pipe(2); a FIFO gives the same EPIPE). */
function pipePair(): [number, number] {
  const fifo = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "keycap-fifo-")), "p");
  execFileSync("mkfifo", [fifo]);
  const readEnd = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  const writeEnd = fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
  return [readEnd, writeEnd];
}

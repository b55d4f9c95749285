/**
 * Test PKI made with the machine's `openssl` CLI: a CA, a server certificate for
 * 127.0.0.1/localhost, and client certificates (with a SPIFFE-style URI SAN, with a
 * CN only), plus a second, unrelated CA for "wrong CA" tests. Files land in `dir`.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

/** A certificate and its key, as PEM files. */
export interface CertFiles {
  cert: string;
  key: string;
}

/** The files of one test PKI. */
export interface TestPki {
  dir: string;
  ca: CertFiles;
  server: CertFiles;
  /** Client certificate with URI SAN `spiffe://keycap.test/runtime/<name>` and CN `<name>`. */
  clientFor(name: string, opts?: { uri?: boolean; ca?: CertFiles }): CertFiles;
  /** A CA that signed nothing keycap trusts. */
  otherCa: CertFiles;
  /** A server certificate for 127.0.0.1 signed by otherCa (a fake kernel's). */
  otherServer: CertFiles;
}

function openssl(args: string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

function makeCa(dir: string, name: string): CertFiles {
  const key = path.join(dir, `${name}.key`);
  const cert = path.join(dir, `${name}.crt`);
  openssl(
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "2",
      "-subj",
      `/CN=${name}`,
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign",
    ],
    dir,
  );
  return { cert, key };
}

function makeLeaf(dir: string, name: string, ca: CertFiles, subject: string, extensions: string): CertFiles {
  const key = path.join(dir, `${name}.key`);
  const csr = path.join(dir, `${name}.csr`);
  const cert = path.join(dir, `${name}.crt`);
  const ext = path.join(dir, `${name}.ext`);
  fs.writeFileSync(ext, extensions);
  openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr, "-subj", subject], dir);
  openssl(["x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext], dir);
  return { cert, key };
}

const SERVER_EXT =
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";

/** Creates a test PKI under `dir` (which must exist). */
export function createTestPki(dir: string): TestPki {
  const ca = makeCa(dir, "ca");
  const server = makeLeaf(dir, "server", ca, "/CN=keycap-test-server", SERVER_EXT);
  const otherCa = makeCa(dir, "other-ca");
  const otherServer = makeLeaf(dir, "other-server", otherCa, "/CN=fake-kernel", SERVER_EXT);
  return {
    dir,
    ca,
    server,
    otherCa,
    otherServer,
    clientFor(name, opts = {}) {
      const san = opts.uri === false ? "" : `subjectAltName=URI:spiffe://keycap.test/runtime/${name}\n`;
      return makeLeaf(
        dir,
        `client-${name}`,
        opts.ca ?? ca,
        `/CN=${name}`,
        `basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n${san}`,
      );
    },
  };
}

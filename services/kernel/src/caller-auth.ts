/**
 * Who is calling the kernel (DESIGN §9). A caller proves itself with, in this order:
 * `authorization: Bearer <secret>` (a principal's secret, or the admin credential,
 * which is the built-in operator "admin"); else a TLS client certificate that the
 * listener verified against KEYCAP_TLS_CLIENT_CA_FILE and whose identity (URI SAN, or
 * CN when it has none) KEYCAP_CERT_PRINCIPALS maps to a principal. Anything else is
 * UNAUTHENTICATED with a reason. A bearer, when sent, decides: a wrong one is never
 * rescued by a certificate.
 */
import { status } from "@grpc/grpc-js";
import type { PeerCertificate } from "node:tls";
import type { AdminCredential } from "../../common/src/admin-credential";
import { parseBearer } from "../../capability/src";
import { KeycapError } from "../../common/src/errors";
import { certificateIdentities } from "../../common/src/tls";
import { ADMIN_PRINCIPAL, type PrincipalRole, type PrincipalStore } from "./principal-store";

/** An authenticated caller. */
export interface Caller {
  name: string;
  role: PrincipalRole;
  method: "bearer" | "mtls" | "admin";
  /** With mtls: the certificate identity that was mapped. */
  certificateIdentity?: string;
}

/** What the transport tells about a call. */
export interface CallCredentials {
  /** Every `authorization` metadata value. */
  authorization: string[];
  /** The client certificate, only when the TLS layer verified it. */
  peerCertificate: PeerCertificate | undefined;
}

function unauthenticated(reason: string, message: string): KeycapError {
  return new KeycapError(status.UNAUTHENTICATED, reason, message);
}

export class CallerAuthenticator {
  constructor(
    private readonly principals: PrincipalStore,
    private readonly admin: AdminCredential | undefined,
    private readonly certPrincipals: ReadonlyMap<string, string>,
  ) {}

  /** @throws KeycapError UNAUTHENTICATED when the caller cannot be authenticated. */
  async authenticate(c: CallCredentials): Promise<Caller> {
    const values = c.authorization.filter((v) => v.trim() !== "");
    if (values.length > 1) throw unauthenticated("PRINCIPAL_CREDENTIAL_INVALID", "send one authorization value, not several");
    if (values.length === 1) return this.byBearer(values[0] as string);
    if (c.peerCertificate) return this.byCertificate(c.peerCertificate);
    throw unauthenticated(
      "PRINCIPAL_CREDENTIAL_MISSING",
      "the kernel needs a principal: send authorization: Bearer <secret> (the local runtime's is in $KEYCAP_DATA_DIR/runtime-token; operators create more with `keycap principals create`) or a mapped TLS client certificate",
    );
  }

  private async byBearer(value: string): Promise<Caller> {
    const token = parseBearer(value);
    if (token === undefined) throw unauthenticated("PRINCIPAL_CREDENTIAL_INVALID", "authorization must be Bearer <secret>");
    if (this.admin?.matches(token)) return { name: ADMIN_PRINCIPAL, role: "operator", method: "admin" };
    const p = await this.principals.bySecret(token);
    if (!p) throw unauthenticated("PRINCIPAL_CREDENTIAL_INVALID", "the bearer secret belongs to no principal (a capability is not a principal credential)");
    if (p.revoked_at) throw unauthenticated("PRINCIPAL_REVOKED", `principal ${p._id} was revoked`);
    return { name: p._id, role: p.role, method: "bearer" };
  }

  private async byCertificate(cert: PeerCertificate): Promise<Caller> {
    const identities = certificateIdentities(cert);
    for (const identity of identities) {
      const name = this.certPrincipals.get(identity);
      if (name === undefined) continue;
      const p = await this.principals.byName(name);
      if (!p) throw unauthenticated("CERTIFICATE_NOT_MAPPED", `certificate identity ${identity} maps to principal ${name}, which does not exist`);
      if (p.revoked_at) throw unauthenticated("PRINCIPAL_REVOKED", `principal ${p._id} was revoked`);
      return { name: p._id, role: p.role, method: "mtls", certificateIdentity: identity };
    }
    throw unauthenticated(
      "CERTIFICATE_NOT_MAPPED",
      `the client certificate (${identities.join(", ") || "no URI SAN or CN"}) is mapped to no principal (KEYCAP_CERT_PRINCIPALS)`,
    );
  }
}

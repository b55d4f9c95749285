import type { ChannelCredentials } from "@grpc/grpc-js";
import {
  AccessServiceClient,
  PrincipalRole,
  type AddGrantResponse,
  type CreatePrincipalResponse,
  type Grant,
  type Principal,
  type RemoveGrantResponse,
  type RevokePrincipalResponse,
  type WhoAmIResponse,
} from "../gen/keycap/kernel/v1/access";
import { channelCredentials, type TlsOptions } from "./credentials";
import { callUnary, collectPages, type CallSettings } from "./rpc";

export interface AccessClientOptions {
  /** TLS for the kernel channel; default plaintext (loopback only). */
  tls?: TlsOptions;
  /** Channel credentials, overriding `tls`. */
  credentials?: ChannelCredentials;
}

/** A principal's role, as the CLI and the services name it. */
export type RoleName = "runtime" | "operator";

export function roleToProto(role: RoleName): PrincipalRole {
  return role === "runtime" ? PrincipalRole.PRINCIPAL_ROLE_RUNTIME : PrincipalRole.PRINCIPAL_ROLE_OPERATOR;
}

/**
 * Client of keycap.kernel.v1.AccessService: principals and grants (operator
 * credential: the admin token or an operator principal's secret), and WhoAmI
 * (any principal). `token` "" sends no bearer (an mTLS-proven principal).
 */
export class AccessClient {
  readonly raw: AccessServiceClient;
  private readonly bearer: string | undefined;

  constructor(
    readonly address: string,
    token: string,
    opts: AccessClientOptions = {},
  ) {
    this.raw = new AccessServiceClient(address, opts.credentials ?? channelCredentials(opts.tls));
    this.bearer = token === "" ? undefined : token;
  }

  /** Creates a principal; the response's secret is shown only this once. */
  createPrincipal(name: string, role: RoleName, s?: CallSettings): Promise<CreatePrincipalResponse> {
    return callUnary(this.raw.createPrincipal, this.raw, { name, role: roleToProto(role) }, this.bearer, s);
  }

  listPrincipals(s?: CallSettings): Promise<Principal[]> {
    return collectPages(async (pageToken) => {
      const res = await callUnary(this.raw.listPrincipals, this.raw, { pageSize: 1000, pageToken }, this.bearer, s);
      return { items: res.principals, nextPageToken: res.nextPageToken };
    });
  }

  revokePrincipal(name: string, s?: CallSettings): Promise<RevokePrincipalResponse> {
    return callUnary(this.raw.revokePrincipal, this.raw, { name }, this.bearer, s);
  }

  addGrant(toolId: string, principal: string, s?: CallSettings): Promise<AddGrantResponse> {
    return callUnary(this.raw.addGrant, this.raw, { toolId, principal }, this.bearer, s);
  }

  removeGrant(toolId: string, principal: string, s?: CallSettings): Promise<RemoveGrantResponse> {
    return callUnary(this.raw.removeGrant, this.raw, { toolId, principal }, this.bearer, s);
  }

  listGrants(filter: { toolId?: string; principal?: string } = {}, s?: CallSettings): Promise<Grant[]> {
    return collectPages(async (pageToken) => {
      const res = await callUnary(
        this.raw.listGrants,
        this.raw,
        { toolId: filter.toolId ?? "", principal: filter.principal ?? "", pageSize: 1000, pageToken },
        this.bearer,
        s,
      );
      return { items: res.grants, nextPageToken: res.nextPageToken };
    });
  }

  whoAmI(s?: CallSettings): Promise<WhoAmIResponse> {
    return callUnary(this.raw.whoAmI, this.raw, {}, this.bearer, s);
  }

  close(): void {
    this.raw.close();
  }
}

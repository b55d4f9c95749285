/**
 * AccessService: operators manage principals and grants; anyone authenticated may ask
 * who they are. Served on the kernel listener, refusals recorded like every kernel one.
 */
import {
  AuthMethod,
  PrincipalRole,
  type AccessServiceServer,
  type AddGrantRequest,
  type AddGrantResponse,
  type Grant,
  type ListGrantsRequest,
  type ListGrantsResponse,
  type ListPrincipalsRequest,
  type ListPrincipalsResponse,
  type Principal,
  type RemoveGrantRequest,
  type RemoveGrantResponse,
  type RevokePrincipalRequest,
  type RevokePrincipalResponse,
  type CreatePrincipalRequest,
  type CreatePrincipalResponse,
  type WhoAmIResponse,
} from "../../../gen/ts/keycap/kernel/v1/access";
import type { Logger } from "../../common/src/logger";
import { decodePageToken, encodePageToken, pageSize } from "../../common/src/paging";
import type { AccessPolicy } from "./access-policy";
import type { Caller } from "./caller-auth";
import type { GrantDoc, GrantStore } from "./grant-store";
import { kernelHandler, type KernelEdge } from "./kernel-handlers";
import { checkPrincipalName, type PrincipalDoc, type PrincipalRole as RoleName, type PrincipalStore } from "./principal-store";
import { checkToolId } from "./tool-definition";
import type { ToolRegistry } from "./tool-registry";
import { Reasons, refuse } from "../../common/src/refuse";

export interface AccessDeps {
  principals: PrincipalStore;
  grants: GrantStore;
  registry: ToolRegistry;
  policy: AccessPolicy;
  logger: Logger;
}

function roleName(role: PrincipalRole): RoleName {
  if (role === PrincipalRole.PRINCIPAL_ROLE_RUNTIME) return "runtime";
  if (role === PrincipalRole.PRINCIPAL_ROLE_OPERATOR) return "operator";
  throw refuse(Reasons.ROLE_REQUIRED, "role is required: PRINCIPAL_ROLE_RUNTIME or PRINCIPAL_ROLE_OPERATOR", { field: "role" });
}

function roleProto(role: RoleName): PrincipalRole {
  return role === "runtime" ? PrincipalRole.PRINCIPAL_ROLE_RUNTIME : PrincipalRole.PRINCIPAL_ROLE_OPERATOR;
}

function principalToProto(d: PrincipalDoc): Principal {
  return { name: d._id, role: roleProto(d.role), createdAt: d.created_at, createdBy: d.created_by, revokedAt: d.revoked_at, revokedBy: d.revoked_by ?? "" };
}

function grantToProto(g: GrantDoc): Grant {
  return { toolId: g.tool_id, principal: g.principal, grantedAt: g.granted_at, grantedBy: g.granted_by };
}

export class Access {
  constructor(private readonly d: AccessDeps) {}

  async createPrincipal(req: CreatePrincipalRequest, caller: Caller): Promise<CreatePrincipalResponse> {
    this.d.policy.requireOperator(caller, "CreatePrincipal");
    const { doc, secret } = await this.d.principals.create(req.name, roleName(req.role), caller.name);
    this.d.logger.info({ principal: doc._id, role: doc.role, by: caller.name }, "principal created");
    return { principal: principalToProto(doc), secret };
  }

  async listPrincipals(req: ListPrincipalsRequest, caller: Caller): Promise<ListPrincipalsResponse> {
    this.d.policy.requireOperator(caller, "ListPrincipals");
    const limit = pageSize(req.pageSize);
    const cursor = decodePageToken(req.pageToken, { after: "id" });
    const docs = await this.d.principals.list(cursor ? cursor.after : "", limit + 1);
    const page = docs.slice(0, limit);
    const last = page[page.length - 1];
    return { principals: page.map(principalToProto), nextPageToken: docs.length > limit && last ? encodePageToken({ after: last._id }) : "" };
  }

  async revokePrincipal(req: RevokePrincipalRequest, caller: Caller): Promise<RevokePrincipalResponse> {
    this.d.policy.requireOperator(caller, "RevokePrincipal");
    const { doc, alreadyRevoked } = await this.d.principals.revoke(req.name, caller.name);
    if (!alreadyRevoked) this.d.logger.warn({ principal: doc._id, by: caller.name }, "principal revoked");
    return { principal: principalToProto(doc), alreadyRevoked };
  }

  async addGrant(req: AddGrantRequest, caller: Caller): Promise<AddGrantResponse> {
    this.d.policy.requireOperator(caller, "AddGrant");
    checkToolId(req.toolId, "tool_id");
    checkPrincipalName(req.principal, "principal");
    await this.d.registry.require(req.toolId);
    const p = await this.d.principals.byName(req.principal);
    if (!p || p.revoked_at) throw refuse(Reasons.PRINCIPAL_NOT_FOUND, `no active principal named ${req.principal}`, { principal: req.principal });
    if (p.role !== "runtime")
      throw refuse(Reasons.GRANT_NEEDS_RUNTIME, `${req.principal} is an operator; grants are for runtimes`, {
        principal: req.principal,
      });
    const { grant, alreadyGranted } = await this.d.grants.add(req.toolId, req.principal, caller.name);
    if (!alreadyGranted) this.d.logger.info({ tool_id: req.toolId, principal: req.principal, by: caller.name }, "grant added");
    return { grant: grantToProto(grant), alreadyGranted };
  }

  async removeGrant(req: RemoveGrantRequest, caller: Caller): Promise<RemoveGrantResponse> {
    this.d.policy.requireOperator(caller, "RemoveGrant");
    checkToolId(req.toolId, "tool_id");
    checkPrincipalName(req.principal, "principal");
    const removed = await this.d.grants.remove(req.toolId, req.principal);
    if (removed) this.d.logger.info({ tool_id: req.toolId, principal: req.principal, by: caller.name }, "grant removed");
    return { removed };
  }

  async listGrants(req: ListGrantsRequest, caller: Caller): Promise<ListGrantsResponse> {
    this.d.policy.requireOperator(caller, "ListGrants");
    if (req.toolId) checkToolId(req.toolId, "tool_id");
    if (req.principal) checkPrincipalName(req.principal, "principal");
    const limit = pageSize(req.pageSize);
    const cursor = decodePageToken(req.pageToken, { t: "id", p: "id" });
    const docs = await this.d.grants.list(
      { toolId: req.toolId, principal: req.principal },
      cursor ? { toolId: cursor.t, principal: cursor.p } : undefined,
      limit + 1,
    );
    const page = docs.slice(0, limit);
    const last = page[page.length - 1];
    return { grants: page.map(grantToProto), nextPageToken: docs.length > limit && last ? encodePageToken({ t: last.tool_id, p: last.principal }) : "" };
  }

  whoAmI(caller: Caller): WhoAmIResponse {
    return {
      principal: caller.name,
      role: roleProto(caller.role),
      authMethod:
        caller.method === "mtls"
          ? AuthMethod.AUTH_METHOD_MTLS
          : caller.method === "admin"
            ? AuthMethod.AUTH_METHOD_ADMIN_CREDENTIAL
            : AuthMethod.AUTH_METHOD_BEARER,
      certificateIdentity: caller.certificateIdentity ?? "",
    };
  }
}

/** The gRPC binding of AccessService. */
export function accessServiceImpl(access: Access, edge: KernelEdge): AccessServiceServer {
  return {
    createPrincipal: kernelHandler(edge, "CreatePrincipal", (r: CreatePrincipalRequest, c) => access.createPrincipal(r, c)),
    listPrincipals: kernelHandler(edge, "ListPrincipals", (r: ListPrincipalsRequest, c) => access.listPrincipals(r, c)),
    revokePrincipal: kernelHandler(edge, "RevokePrincipal", (r: RevokePrincipalRequest, c) => access.revokePrincipal(r, c)),
    addGrant: kernelHandler(edge, "AddGrant", (r: AddGrantRequest, c) => access.addGrant(r, c)),
    removeGrant: kernelHandler(edge, "RemoveGrant", (r: RemoveGrantRequest, c) => access.removeGrant(r, c)),
    listGrants: kernelHandler(edge, "ListGrants", (r: ListGrantsRequest, c) => access.listGrants(r, c)),
    whoAmI: kernelHandler(edge, "WhoAmI", async (_r: unknown, c) => access.whoAmI(c)),
  };
}

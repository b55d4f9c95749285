/**
 * `keycap principals` and `keycap grants`: who may call the kernel (DESIGN §9). Run
 * with an operator credential (the admin token by default).
 */
import type { Command } from "commander";
import { AccessClient, type RoleName } from "../../../clients/ts/src";
import type { Grant, Principal } from "../../../gen/ts/keycap/kernel/v1/access";
import { PrincipalRole } from "../../../gen/ts/keycap/kernel/v1/access";
import { adminToken, explain, kernelAddress, tlsOptions, UsageError, type OperatorOptions } from "./operator-context";
import { newTable, render, type Print } from "./output";

function time(d: Date | undefined): string {
  return d ? d.toISOString() : "";
}

async function withAccess<T>(o: OperatorOptions, fn: (a: AccessClient) => Promise<T>): Promise<T> {
  const at = kernelAddress(o);
  const tls = tlsOptions(o);
  const access = new AccessClient(at.address, adminToken(o), tls ? { tls } : {});
  try {
    return await fn(access);
  } catch (err) {
    throw explain(err, "kernel", at);
  } finally {
    access.close();
  }
}

function roleOf(p: Principal): string {
  return p.role === PrincipalRole.PRINCIPAL_ROLE_RUNTIME ? "runtime" : p.role === PrincipalRole.PRINCIPAL_ROLE_OPERATOR ? "operator" : "?";
}

function principalJson(p: Principal): Record<string, unknown> {
  return { name: p.name, role: roleOf(p), createdAt: p.createdAt, createdBy: p.createdBy, revokedAt: p.revokedAt ?? null, revokedBy: p.revokedBy || null };
}

function grantsTable(rows: Grant[]): string {
  if (rows.length === 0) return "no grants";
  const t = newTable(["tool", "principal", "granted", "by"]);
  for (const g of rows) t.push([g.toolId, g.principal, time(g.grantedAt), g.grantedBy]);
  return render(t);
}

export function addAccessCommands(program: Command, kernelOperator: (c: Command) => Command, print: Print): void {
  const principals = program.command("principals").description("agent runtimes and operators that may call the kernel");

  kernelOperator(principals.command("create").description("create a principal and print its secret (shown once; only a hash is stored)"))
    .argument("<name>", "1-64 of [A-Za-z0-9._-]")
    .requiredOption("--role <role>", "runtime | operator")
    .action(async (name: string, o: OperatorOptions & { role: string }) => {
      if (o.role !== "runtime" && o.role !== "operator") throw new UsageError(`--role: expected runtime or operator, got ${JSON.stringify(o.role)}`);
      const res = await withAccess(o, (a) => a.createPrincipal(name, o.role as RoleName));
      const p = res.principal;
      if (!p) throw new Error("the kernel answered without the principal");
      print(o, { principal: principalJson(p), secret: res.secret }, () =>
        [
          `created ${roleOf(p)} principal ${p.name}`,
          `secret (shown once; present it as authorization: Bearer <secret>, or KEYCAP_RUNTIME_TOKEN for the clients):`,
          res.secret,
        ].join("\n"),
      );
    });

  kernelOperator(principals.command("list").description("every principal, revoked ones included")).action(async (o: OperatorOptions) => {
    const rows = await withAccess(o, (a) => a.listPrincipals());
    print(o, rows.map(principalJson), () => {
      if (rows.length === 0) return "no principals";
      const t = newTable(["name", "role", "created", "by", "revoked", "by"]);
      for (const p of rows) t.push([p.name, roleOf(p), time(p.createdAt), p.createdBy, time(p.revokedAt), p.revokedBy]);
      return render(t);
    });
  });

  kernelOperator(principals.command("revoke").description("revoke a principal: its secret and certificate mapping stop working within seconds on every kernel"))
    .argument("<name>", "the principal")
    .action(async (name: string, o: OperatorOptions) => {
      const res = await withAccess(o, (a) => a.revokePrincipal(name));
      print(o, { principal: res.principal ? principalJson(res.principal) : null, alreadyRevoked: res.alreadyRevoked }, () =>
        res.alreadyRevoked ? `principal ${name} was already revoked` : `principal ${name} revoked`,
      );
    });

  const grants = program.command("grants").description("which runtime principals may use which tools (besides each tool's owner)");

  kernelOperator(grants.command("add").description("let a runtime principal begin, resume, complete and list a tool's calls"))
    .argument("<tool>", "tool id")
    .argument("<principal>", "runtime principal")
    .action(async (tool: string, principal: string, o: OperatorOptions) => {
      const res = await withAccess(o, (a) => a.addGrant(tool, principal));
      print(o, res, () => (res.alreadyGranted ? `${principal} was already granted ${tool}` : `granted ${tool} to ${principal}`));
    });

  kernelOperator(grants.command("remove").description("remove a grant (a tool's owner keeps its access)"))
    .argument("<tool>", "tool id")
    .argument("<principal>", "principal")
    .action(async (tool: string, principal: string, o: OperatorOptions) => {
      const res = await withAccess(o, (a) => a.removeGrant(tool, principal));
      print(o, res, () => (res.removed ? `removed ${principal}'s grant on ${tool}` : `${principal} had no grant on ${tool}`));
    });

  kernelOperator(grants.command("list").description("grants, by tool or by principal"))
    .option("--tool <id>", "only this tool's grants")
    .option("--principal <name>", "only this principal's grants")
    .action(async (o: OperatorOptions & { tool?: string; principal?: string }) => {
      const rows = await withAccess(o, (a) => a.listGrants({ ...(o.tool ? { toolId: o.tool } : {}), ...(o.principal ? { principal: o.principal } : {}) }));
      print(o, rows, () => grantsTable(rows));
    });
}

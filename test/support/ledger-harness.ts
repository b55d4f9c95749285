/**
 * Helpers for ledger tests: a real kernel and ledger as processes, raw gRPC clients that
 * carry exactly the metadata a test gives them, and capability forgeries.
 */
import { credentials, Metadata, type Client, type ServiceError } from "@grpc/grpc-js";
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import * as path from "node:path";
import type { DeepPartial } from "../../gen/ts/keycap/ledger/v1/ledger";
import {
  BeginCallRequest,
  KernelServiceClient,
  RegisterToolRequest,
  type BeginCallResponse,
  type GetSigningKeysResponse,
  type RegisterToolResponse,
  type Tool,
} from "../../gen/ts/keycap/kernel/v1/kernel";
import { LedgerServiceClient, LookupRequestRequest, WriteRequest, type LookupRequestResponse, type WriteResponse } from "../../gen/ts/keycap/ledger/v1/ledger";
import {
  GetEntryRequest,
  LedgerAdminServiceClient,
  ListEntriesRequest,
  ListRejectionsRequest,
  type GetEntryResponse,
  type GetStatsResponse,
  type ListEntriesResponse,
  type ListRejectionsResponse,
} from "../../gen/ts/keycap/ledger/v1/ledger_admin";
import { CAPABILITY_TYP, type CapabilityClaims } from "../../services/capability/src";
import { readErrorInfo } from "../../clients/ts/src/status-details";
import { CapabilityMinter, type CapabilityMinterOptions } from "../../services/kernel/src/capability-minter";
import { loadOrCreateSigningKeys, type SigningKeys } from "../../services/kernel/src/signing-keys";
import { serviceEnv, startService, TEST_RUNTIME_TOKEN, type ServiceProcess } from "./processes";

const DEADLINE_MS = 15_000;

type Callback<Res> = (err: ServiceError | null, res: Res) => void;
type UnaryMethod<Req, Res> = (req: Req, md: Metadata, opts: { deadline: number }, cb: Callback<Res>) => void;

/** Calls a generated client's unary method with exactly `md`. */
function unary<Req, Res>(client: Client, method: string, req: Req, md = new Metadata()): Promise<Res> {
  const fn = (client as unknown as Record<string, UnaryMethod<Req, Res>>)[method];
  if (!fn) throw new Error(`no method ${method}`);
  return new Promise((resolve, reject) => {
    fn.call(client, req, md, { deadline: Date.now() + DEADLINE_MS }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

/** Metadata with `authorization: <value>`, or none when value is undefined. */
export function auth(value: string | undefined): Metadata {
  const md = new Metadata();
  if (value !== undefined) md.set("authorization", value);
  return md;
}

/** A refused call as a test sees it. */
export interface Refusal {
  code: number;
  reason: string | undefined;
  details: string;
}

/** Awaits a call that must fail; returns its code and ErrorInfo reason. */
export async function refusalOf(p: Promise<unknown>): Promise<Refusal> {
  try {
    await p;
  } catch (err) {
    const e = err as ServiceError;
    return { code: e.code, reason: readErrorInfo(err)?.reason, details: e.details };
  }
  throw new Error("expected the call to be refused, but it succeeded");
}

/** The ledger as a tool calls it. `capability` undefined sends no authorization at all. */
export class LedgerCalls {
  readonly client: LedgerServiceClient;
  constructor(address: string) {
    this.client = new LedgerServiceClient(address, credentials.createInsecure());
  }
  write(capability: string | undefined, req: DeepPartial<WriteRequest>): Promise<WriteResponse> {
    return unary(this.client, "write", WriteRequest.fromPartial(req), auth(capability === undefined ? undefined : `Bearer ${capability}`));
  }
  /** Write with a raw authorization value (not prefixed with Bearer). */
  writeRaw(authorization: string | undefined, req: DeepPartial<WriteRequest>): Promise<WriteResponse> {
    return unary(this.client, "write", WriteRequest.fromPartial(req), auth(authorization));
  }
  lookup(capability: string, requestId: string): Promise<LookupRequestResponse> {
    return unary(this.client, "lookupRequest", LookupRequestRequest.fromPartial({ requestId }), auth(`Bearer ${capability}`));
  }
  close(): void {
    this.client.close();
  }
}

/** The admin API. `authorization` undefined sends none. */
export class AdminCalls {
  readonly client: LedgerAdminServiceClient;
  constructor(
    address: string,
    private readonly authorization: string | undefined,
  ) {
    this.client = new LedgerAdminServiceClient(address, credentials.createInsecure());
  }
  private md(): Metadata {
    return auth(this.authorization);
  }
  listEntries(req: DeepPartial<ListEntriesRequest> = {}): Promise<ListEntriesResponse> {
    return unary(this.client, "listEntries", ListEntriesRequest.fromPartial(req), this.md());
  }
  getEntry(selector: { entryId: string } | { key: string }): Promise<GetEntryResponse> {
    const sel = "entryId" in selector ? { $case: "entryId" as const, value: selector.entryId } : { $case: "key" as const, value: selector.key };
    return unary(this.client, "getEntry", GetEntryRequest.fromPartial({ selector: sel }), this.md());
  }
  listRejections(req: DeepPartial<ListRejectionsRequest> = {}): Promise<ListRejectionsResponse> {
    return unary(this.client, "listRejections", ListRejectionsRequest.fromPartial(req), this.md());
  }
  getStats(): Promise<GetStatsResponse> {
    return unary(this.client, "getStats", {}, this.md());
  }
  close(): void {
    this.client.close();
  }
}

/** The kernel as the agent runtime calls it (as the bootstrap runtime principal unless told otherwise). */
export class KernelCalls {
  readonly client: KernelServiceClient;
  constructor(
    address: string,
    private readonly bearer: string | undefined = TEST_RUNTIME_TOKEN,
  ) {
    this.client = new KernelServiceClient(address, credentials.createInsecure());
  }
  private md(): Metadata {
    return auth(this.bearer === undefined ? undefined : `Bearer ${this.bearer}`);
  }
  registerTool(tool: DeepPartial<Tool>): Promise<RegisterToolResponse> {
    return unary(this.client, "registerTool", RegisterToolRequest.fromPartial({ tool }), this.md());
  }
  /** Registers an Idempotent tool keyed on the given argument fields. */
  registerIdempotent(toolId: string, fields: string[]): Promise<RegisterToolResponse> {
    return this.registerTool({ toolId, effectClass: { kind: { $case: "idempotent", value: { key: { fields, version: 1 } } } } });
  }
  registerQueryable(toolId: string, requestIdField: string): Promise<RegisterToolResponse> {
    return this.registerTool({ toolId, effectClass: { kind: { $case: "queryable", value: { lookup: { requestIdField } } } } });
  }
  registerUnsafe(toolId: string): Promise<RegisterToolResponse> {
    return this.registerTool({ toolId, effectClass: { kind: { $case: "unsafe", value: {} } } });
  }
  beginCall(toolId: string, args: unknown): Promise<BeginCallResponse> {
    return unary(this.client, "beginCall", BeginCallRequest.fromPartial({ toolId, argumentsJson: JSON.stringify(args) }), this.md());
  }
  getSigningKeys(): Promise<GetSigningKeysResponse> {
    return unary(this.client, "getSigningKeys", {});
  }
  close(): void {
    this.client.close();
  }
}

/** A kernel and a ledger on one fresh database, with clients. */
export interface LedgerStack {
  env: Record<string, string>;
  kernel: ServiceProcess;
  ledger: ServiceProcess;
  kernelCalls: KernelCalls;
  ledgerCalls: LedgerCalls;
  admin: AdminCalls;
  adminToken: string;
  /** The kernel's signing keys, read from its key file (to forge and to mint off-line). */
  signingKeys(): Promise<SigningKeys>;
  /** A minter with the kernel's key and the given options (e.g. a clock in the past). */
  minter(opts?: CapabilityMinterOptions): Promise<CapabilityMinter>;
  stop(): Promise<void>;
}

/**
 * Starts `keycap serve kernel` and `keycap serve ledger` as processes on a fresh database
 * and data dir. The admin credential is the one the ledger generated in the data dir.
 */
export async function startLedgerStack(ledgerEnv: Record<string, string> = {}): Promise<LedgerStack> {
  const env = serviceEnv();
  const kernel = await startService("kernel", env);
  let ledger: ServiceProcess;
  try {
    ledger = await startService("ledger", { ...env, KEYCAP_KERNEL_ADDRESS: kernel.endpoints.kernel!, ...ledgerEnv });
  } catch (err) {
    await kernel.stop("SIGKILL").catch(() => undefined);
    throw err;
  }
  const adminToken = (await readFile(path.join(env.KEYCAP_DATA_DIR!, "admin-token"), "utf8")).trim();
  const kernelCalls = new KernelCalls(kernel.endpoints.kernel!);
  const ledgerCalls = new LedgerCalls(ledger.endpoints.ledger!);
  const admin = new AdminCalls(ledger.endpoints.admin!, `Bearer ${adminToken}`);
  const signingKeys = (): Promise<SigningKeys> => loadOrCreateSigningKeys(path.join(env.KEYCAP_DATA_DIR!, "signing-keys.json"), { retiredGraceSeconds: 86400 });
  return {
    env,
    kernel,
    ledger,
    kernelCalls,
    ledgerCalls,
    admin,
    adminToken,
    signingKeys,
    minter: async (opts = {}) => new CapabilityMinter(await signingKeys(), opts),
    stop: async () => {
      kernelCalls.close();
      ledgerCalls.close();
      admin.close();
      await Promise.all([ledger.stop("SIGTERM").catch(() => ledger.stop("SIGKILL")), kernel.stop("SIGTERM").catch(() => kernel.stop("SIGKILL"))]);
    },
  };
}

function b64json(v: unknown): string {
  return Buffer.from(JSON.stringify(v)).toString("base64url");
}

/** Signs any header and payload with an Ed25519 key, bypassing every check of the minter. */
export function signEd25519(header: unknown, payload: unknown, key: KeyObject): string {
  const input = `${b64json(header)}.${b64json(payload)}`;
  return `${input}.${sign(null, Buffer.from(input), key).toString("base64url")}`;
}

/** A header and payload joined with the given signature part (for alg none, HS256...). */
export function unsignedToken(header: unknown, payload: unknown, signature = ""): string {
  return `${b64json(header)}.${b64json(payload)}.${signature}`;
}

/** A fresh Ed25519 key the kernel never published. */
export function foreignKey(): KeyObject {
  return generateKeyPairSync("ed25519").privateKey;
}

/** Well-formed idempotent claims, valid now, for forgeries. */
export function idempotentClaims(toolId: string, key: string, overrides: Partial<Record<keyof CapabilityClaims, unknown>> = {}): Record<string, unknown> {
  const iat = Math.floor(Date.now() / 1000);
  return {
    iss: "keycap-kernel",
    aud: "keycap-ledger",
    sub: "local-runtime",
    tool_id: toolId,
    effect: "idempotent",
    call_id: `call-${toolId}`,
    attempt: 1,
    jti: `jti-${toolId}-${Math.random().toString(36).slice(2)}`,
    iat,
    exp: iat + 300,
    key,
    ...overrides,
  };
}

/** The capability header with the given kid. */
export function capabilityHeader(kid: string, alg = "EdDSA"): Record<string, string> {
  return { alg, typ: CAPABILITY_TYP, kid };
}

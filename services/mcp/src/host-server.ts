/**
 * The MCP server the host talks to. tools/list offers every upstream tool (prefixed with its
 * upstream's name when there is more than one upstream); tools/call of a governed tool goes
 * through the call path; resources and prompts pass through to the upstreams unchanged.
 *
 * Log messages of the upstreams go to every connected host; a host's logging/setLevel goes to
 * every upstream that logs; resource subscriptions go to the upstream and its updates to the
 * hosts that subscribed. An unknown tool is answered as the SDK's McpServer answers it (a tool
 * error).
 *
 * tools/call is answered by the SDK's fallback request handler, which sees the request as the
 * host sent it: the SDK's own tools/call schema would refuse non-object arguments before the
 * gateway saw them, and then the refusal would carry no keycap reason and be recorded nowhere.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CompleteRequestSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  LoggingMessageNotificationSchema,
  McpError,
  PromptListChangedNotificationSchema,
  ReadResourceRequestSchema,
  ResourceListChangedNotificationSchema,
  ToolListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  type JSONRPCRequest,
  type Progress,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type ServerCapabilities,
  type Tool,
} from "@modelcontextprotocol/sdk/types.js";
import type { CallPath } from "./call-path";
import type { GovernedTool } from "./governed-tools";
import { GATEWAY_IMPLEMENTATION, type Upstream } from "./upstream";

export interface HostServerOptions {
  /** Told when an upstream says its tools changed (the gateway does not take them without a restart). */
  logger?: { warn(fields: object, message: string): void };
  tools: readonly GovernedTool[];
  calls: CallPath;
  upstreams: readonly Upstream[];
  separator: string;
  /** The host connections while they are connected (the upstreams' notifications go to them). */
  hosts: ConnectedHosts;
}

/** The host connections' servers while connected, and the resources each subscribed to. */
export class ConnectedHosts {
  readonly servers = new Set<Server>();
  private readonly subscribed = new Map<Server, Set<string>>();

  add(server: Server): void {
    this.servers.add(server);
    this.subscribed.set(server, new Set());
  }

  remove(server: Server): void {
    this.servers.delete(server);
    this.subscribed.delete(server);
  }

  subscribe(server: Server, uri: string, on: boolean): void {
    const uris = this.subscribed.get(server);
    if (on) uris?.add(uri);
    else uris?.delete(uri);
  }

  subscribers(uri: string): Server[] {
    return [...this.subscribed].filter(([, uris]) => uris.has(uri)).map(([server]) => server);
  }
}

/**
 * Relays the upstreams' notifications to the hosts: log messages (`notifications/message`) to
 * every connected host, the upstream's name as the logger when the message names none; a
 * resource's `notifications/resources/updated` to the hosts that subscribed to it; an
 * upstream's resource and prompt `list_changed` to every host (those lists pass through, so
 * the host lists again and sees the upstream's new ones). Tools are governed: the gateway
 * checks them against the policy and registers them with the kernel at start, so an
 * upstream's `tools/list_changed` is not passed on as if the new definitions were in force;
 * it is logged, naming the restart that takes them (a changed governed definition then stops
 * the start, as ADR 0023 and docs/mcp.md say).
 */
export function relayNotifications(upstreams: readonly Upstream[], hosts: ConnectedHosts, logger?: HostServerOptions["logger"]): void {
  for (const u of upstreams) {
    if (u.capabilities?.resources?.listChanged) {
      u.onEachConnect((client) =>
        client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
          for (const server of hosts.servers) void server.sendResourceListChanged().catch(() => undefined);
        }),
      );
    }
    if (u.capabilities?.prompts?.listChanged) {
      u.onEachConnect((client) =>
        client.setNotificationHandler(PromptListChangedNotificationSchema, () => {
          for (const server of hosts.servers) void server.sendPromptListChanged().catch(() => undefined);
        }),
      );
    }
    if (u.capabilities?.tools?.listChanged) {
      u.onEachConnect((client) =>
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
          logger?.warn(
            { upstream: u.name },
            `mcp: upstream ${u.name} says its tools changed; the gateway serves the tools it checked at start: restart keycap mcp to take the new ones (a changed governed tool then stops the start)`,
          );
        }),
      );
    }
    if (u.capabilities?.logging) {
      u.onEachConnect((client) =>
        client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
          const params = { ...n.params, logger: n.params.logger ?? u.name };
          for (const server of hosts.servers) void server.sendLoggingMessage(params).catch(() => undefined);
        }),
      );
    }
    if (u.capabilities?.resources?.subscribe) {
      u.onEachConnect((client) =>
        client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
          for (const server of hosts.subscribers(n.params.uri)) void server.sendResourceUpdated(n.params).catch(() => undefined);
        }),
      );
    }
  }
}

/** A new MCP server for one host connection (stdio: the only one). */
export function createHostServer(opts: HostServerOptions): Server {
  const withResources = opts.upstreams.filter((u) => u.capabilities?.resources);
  const withPrompts = opts.upstreams.filter((u) => u.capabilities?.prompts);
  const withLogging = opts.upstreams.filter((u) => u.capabilities?.logging);
  const capabilities: ServerCapabilities = {
    tools: {},
    ...(withLogging.length ? { logging: {} } : {}),
    ...(opts.upstreams.some((u) => u.capabilities?.completions) ? { completions: {} } : {}),
    ...(withResources.length
      ? {
          resources: {
            ...(withResources.some((u) => u.capabilities?.resources?.subscribe) ? { subscribe: true } : {}),
            ...(withResources.some((u) => u.capabilities?.resources?.listChanged) ? { listChanged: true } : {}),
          },
        }
      : {}),
    ...(withPrompts.length ? { prompts: withPrompts.some((u) => u.capabilities?.prompts?.listChanged) ? { listChanged: true } : {} } : {}),
  };
  const server = new Server(GATEWAY_IMPLEMENTATION, {
    capabilities,
    instructions: "keycap mcp: tool calls are journaled by keycap; an idempotent tool's repeated call gets the stored result (_meta io.keycap/replay).",
  });
  const byName = new Map(opts.tools.map((t) => [t.exposedName, t]));
  const listed: Tool[] = opts.tools.map((t) => ({
    ...t.definition,
    name: t.exposedName,
    _meta: { ...(t.definition._meta ?? {}), "io.keycap/effect-class": t.policy.class, "io.keycap/tool-id": t.toolId },
  }));
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: listed }));
  server.fallbackRequestHandler = async (request: JSONRPCRequest, extra) => {
    if (request.method !== "tools/call") throw new McpError(ErrorCode.MethodNotFound, `Method not found: ${request.method}`);
    const params = (request.params ?? {}) as { name?: unknown; arguments?: unknown; _meta?: unknown };
    const tool = typeof params.name === "string" ? byName.get(params.name) : undefined;
    // As the SDK's McpServer answers it: a tool error, not a JSON-RPC error.
    if (!tool) return { content: [{ type: "text", text: `MCP error -32602: Tool ${String(params.name)} not found` }], isError: true };
    const meta = typeof params._meta === "object" && params._meta !== null ? (params._meta as Record<string, unknown>) : undefined;
    const token = meta?.["progressToken"];
    const onProgress =
      typeof token === "string" || typeof token === "number"
        ? (p: Progress) => void extra.sendNotification({ method: "notifications/progress", params: { ...p, progressToken: token } }).catch(() => undefined)
        : undefined;
    return opts.calls.call(tool, params.arguments, meta, { signal: extra.signal, ...(onProgress ? { onProgress } : {}) });
  };
  if (withLogging.length) {
    server.setRequestHandler(SetLevelRequestSchema, async (req) => {
      await Promise.all(withLogging.map(async (u) => (await u.connected()).setLoggingLevel(req.params.level)));
      return {};
    });
  }
  opts.hosts.add(server);
  server.onclose = () => opts.hosts.remove(server);
  if (withResources.length) addResources(server, withResources, opts.hosts);
  const withCompletions = opts.upstreams.filter((u) => u.capabilities?.completions);
  if (withCompletions.length) addCompletions(server, withCompletions, opts.upstreams.length > 1 ? opts.separator : undefined);
  if (withPrompts.length) addPrompts(server, withPrompts, opts.upstreams.length > 1 ? opts.separator : undefined);
  return server;
}

/** Resources pass through; a read goes to the upstream that listed the URI (else each in turn). */
function addResources(server: Server, upstreams: readonly Upstream[], hosts: ConnectedHosts): void {
  const owner = new Map<string, Upstream>();
  const subscribable = upstreams.filter((u) => u.capabilities?.resources?.subscribe);
  if (subscribable.length) {
    /** A subscription goes to the upstream that listed the URI, else to every upstream that takes subscriptions. */
    const targets = (uri: string): readonly Upstream[] => {
      const o = owner.get(uri);
      return o && subscribable.includes(o) ? [o] : subscribable;
    };
    server.setRequestHandler(SubscribeRequestSchema, async (req) => {
      await Promise.all(targets(req.params.uri).map(async (u) => (await u.connected()).subscribeResource(req.params)));
      hosts.subscribe(server, req.params.uri, true);
      return {};
    });
    server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
      hosts.subscribe(server, req.params.uri, false);
      // The upstream subscription stays while another host holds one.
      if (hosts.subscribers(req.params.uri).length === 0)
        await Promise.all(targets(req.params.uri).map(async (u) => (await u.connected()).unsubscribeResource(req.params)));
      return {};
    });
  }
  const [only] = upstreams.length === 1 ? upstreams : [];
  server.setRequestHandler(ListResourcesRequestSchema, async (req) => {
    // One upstream: its pages as they are (cursor and all). Several: every page of each, merged.
    if (only) return (await only.connected()).listResources(req.params);
    const resources: Resource[] = [];
    for (const u of upstreams) {
      for (const r of await allPages(async (cursor) => {
        const page = await (await u.connected()).listResources(cursor !== undefined ? { cursor } : {});
        return { items: page.resources, next: page.nextCursor };
      })) {
        owner.set(r.uri, u);
        resources.push(r);
      }
    }
    return { resources };
  });
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async (req) => {
    if (only) return (await only.connected()).listResourceTemplates(req.params);
    const resourceTemplates: ResourceTemplate[] = [];
    for (const u of upstreams) {
      resourceTemplates.push(
        ...(await allPages(async (cursor) => {
          const page = await (await u.connected()).listResourceTemplates(cursor !== undefined ? { cursor } : {});
          return { items: page.resourceTemplates, next: page.nextCursor };
        })),
      );
    }
    return { resourceTemplates };
  });
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const first = owner.get(req.params.uri);
    const order = first ? [first, ...upstreams.filter((u) => u !== first)] : upstreams;
    let last: unknown;
    for (const u of order) {
      try {
        return await (await u.connected()).readResource(req.params);
      } catch (err) {
        last = err;
      }
    }
    throw last instanceof McpError ? last : new McpError(ErrorCode.InvalidParams, `Resource ${req.params.uri} not found`);
  });
}

/** Prompts pass through, prefixed with the upstream's name when there is more than one upstream. */
function addPrompts(server: Server, upstreams: readonly Upstream[], separator: string | undefined): void {
  const exposed = (u: Upstream, name: string): string => (separator === undefined ? name : `${u.name}${separator}${name}`);
  server.setRequestHandler(ListPromptsRequestSchema, async (req) => {
    const [only] = upstreams.length === 1 && separator === undefined ? upstreams : [];
    if (only) return (await only.connected()).listPrompts(req.params);
    const prompts: Prompt[] = [];
    for (const u of upstreams) {
      const all = await allPages(async (cursor) => {
        const page = await (await u.connected()).listPrompts(cursor !== undefined ? { cursor } : {});
        return { items: page.prompts, next: page.nextCursor };
      });
      for (const p of all) prompts.push({ ...p, name: exposed(u, p.name) });
    }
    return { prompts };
  });
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    for (const u of upstreams) {
      const prefix = exposed(u, "");
      if (req.params.name.startsWith(prefix)) return (await u.connected()).getPrompt({ ...req.params, name: req.params.name.slice(prefix.length) });
    }
    throw new McpError(ErrorCode.InvalidParams, `Prompt ${req.params.name} not found`);
  });
}

/**
 * completion/complete goes to the upstream the reference belongs to: a prompt's by its
 * (prefixed) name; a resource template's to each upstream that completes, until one answers.
 */
function addCompletions(server: Server, upstreams: readonly Upstream[], separator: string | undefined): void {
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const ref = req.params.ref;
    if (ref.type === "ref/prompt") {
      for (const u of upstreams) {
        const prefix = separator === undefined ? "" : `${u.name}${separator}`;
        if (ref.name.startsWith(prefix)) return (await u.connected()).complete({ ...req.params, ref: { ...ref, name: ref.name.slice(prefix.length) } });
      }
      throw new McpError(ErrorCode.InvalidParams, `Prompt ${ref.name} not found`);
    }
    let last: unknown;
    for (const u of upstreams) {
      try {
        return await (await u.connected()).complete(req.params);
      } catch (err) {
        last = err;
      }
    }
    throw last instanceof McpError ? last : new McpError(ErrorCode.InvalidParams, "no upstream completes this reference");
  });
}

/** Every item of a paged list (at most 100 pages: an upstream that never ends its list is cut there). */
async function allPages<T>(page: (cursor: string | undefined) => Promise<{ items: T[]; next: string | undefined }>): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 100; i++) {
    const p = await page(cursor);
    items.push(...p.items);
    if (p.next === undefined) break;
    cursor = p.next;
  }
  return items;
}

import type { Collection, Db } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";
import { compileStored, type CompiledTool, type ToolDefinition } from "./tool-definition";
import { Reasons, refuse } from "../../common/src/refuse";

interface ToolDoc {
  _id: string;
  definition: ToolDefinition;
  fingerprint: string;
  registered_at: Date;
  /** The principal that registered it; absent on tools registered before principals existed. */
  owner?: string;
}

/** Result of a registration. */
export interface Registration {
  tool: CompiledTool;
  alreadyRegistered: boolean;
}

/**
 * The persisted tool registry. A tool id is bound to one definition for good:
 * changing a derivation silently would re-key the tool's pending calls. Because
 * definitions never change, compiled tools are cached in process memory, which
 * is safe across replicas.
 */
export class ToolRegistry {
  private readonly cache = new Map<string, CompiledTool>();

  private constructor(private readonly tools: Collection<ToolDoc>) {}

  /** Opens the collection; the tool id is the document _id, so it is unique by construction. */
  static async open(db: Db): Promise<ToolRegistry> {
    const tools = db.collection<ToolDoc>("tools");
    await tools.createIndex({ registered_at: 1 });
    await tools.createIndex({ owner: 1 });
    return new ToolRegistry(tools);
  }

  /**
   * Registers `tool` as owned by `owner` (insert first, never find-then-insert); the same
   * definition again is a no-op. When the id exists, `mayUse(existing)` decides first
   * whether this owner may touch it at all (it throws when not), so a principal that may
   * not use a tool learns nothing about its definition. A tool registered before
   * principals existed is adopted by the first principal that registers it again.
   */
  async register(tool: CompiledTool, owner: string, mayUse: (existing: CompiledTool) => Promise<void>): Promise<Registration> {
    const doc: ToolDoc = {
      _id: tool.definition.toolId,
      definition: tool.definition,
      fingerprint: tool.fingerprint,
      registered_at: tool.registeredAt,
      owner,
    };
    try {
      await this.tools.insertOne(doc, { writeConcern: { w: "majority" } });
      const owned = { ...tool, owner };
      this.cache.set(doc._id, owned);
      return { tool: owned, alreadyRegistered: false };
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    let existing = await this.get(tool.definition.toolId);
    if (!existing) throw refuse(Reasons.CONCURRENT_REGISTRATION, "the tool changed during registration; retry");
    if (existing.owner === undefined) existing = await this.adopt(existing, owner);
    await mayUse(existing);
    if (existing.fingerprint !== tool.fingerprint) {
      throw refuse(
        Reasons.TOOL_DEFINITION_CONFLICT,
        `tool ${tool.definition.toolId} is already registered with a different definition; ` +
          "register the new definition under a new tool id (changing it in place would re-key pending calls)",
        { tool_id: tool.definition.toolId },
      );
    }
    return { tool: existing, alreadyRegistered: true };
  }

  /** The tool, or undefined. */
  async get(toolId: string): Promise<CompiledTool | undefined> {
    const cached = this.cache.get(toolId);
    if (cached) return cached;
    const doc = await this.tools.findOne({ _id: toolId });
    if (!doc) return undefined;
    const compiled = { ...compileStored(doc.definition, doc.registered_at), ...(doc.owner !== undefined ? { owner: doc.owner } : {}) };
    this.cache.set(toolId, compiled);
    return compiled;
  }

  /** The ids of the tools `owner` registered. */
  async ownedBy(owner: string): Promise<string[]> {
    return (await this.tools.find({ owner }, { projection: { _id: 1 } }).toArray()).map((d) => d._id);
  }

  private async adopt(tool: CompiledTool, owner: string): Promise<CompiledTool> {
    await this.tools.updateOne({ _id: tool.definition.toolId, owner: { $exists: false } }, { $set: { owner } }, { writeConcern: { w: "majority" } });
    this.cache.delete(tool.definition.toolId);
    const after = await this.get(tool.definition.toolId);
    if (!after) throw refuse(Reasons.CONCURRENT_REGISTRATION, "the tool changed during registration; retry");
    return after;
  }

  /** The tool, or NOT_FOUND. */
  async require(toolId: string): Promise<CompiledTool> {
    const tool = await this.get(toolId);
    if (!tool) {
      throw refuse(Reasons.TOOL_NOT_FOUND, `tool ${JSON.stringify(toolId)} is not registered`, { tool_id: toolId });
    }
    return tool;
  }

  /** The first `limit` of the given tools, ordered by id (a runtime's own and granted ones). */
  async listOf(toolIds: readonly string[], limit: number): Promise<CompiledTool[]> {
    const ids = [...toolIds].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).slice(0, limit);
    const tools = await Promise.all(ids.map((id) => this.get(id)));
    return tools.filter((t): t is CompiledTool => t !== undefined);
  }

  /** A page of tools ordered by id, after `afterId`. */
  async list(afterId: string, limit: number): Promise<CompiledTool[]> {
    const docs = await this.tools
      .find(afterId ? { _id: { $gt: afterId } } : {})
      .sort({ _id: 1 })
      .limit(limit)
      .toArray();
    return docs.map((d) => this.cache.get(d._id) ?? { ...compileStored(d.definition, d.registered_at), ...(d.owner !== undefined ? { owner: d.owner } : {}) });
  }
}

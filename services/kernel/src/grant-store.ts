/**
 * Grants: which principals, besides a tool's owner, may use the tool (begin, resume,
 * complete, list its calls). One document per (tool, principal); its `_id` is the JSON
 * array `[tool_id, principal]`, unambiguous whatever the ids contain. Lookups are cached
 * per replica for `cacheMs`, so removing a grant takes effect everywhere within it.
 */
import type { Collection, Db, Filter } from "mongodb";
import { isDuplicateKey } from "../../common/src/mongo";

export interface GrantDoc {
  _id: string;
  tool_id: string;
  principal: string;
  granted_at: Date;
  granted_by: string;
}

const MAX_CACHED = 10_000;

function grantId(toolId: string, principal: string): string {
  return JSON.stringify([toolId, principal]);
}

export class GrantStore {
  private readonly cache = new Map<string, { granted: boolean; at: number }>();

  private constructor(
    private readonly coll: Collection<GrantDoc>,
    private readonly cacheMs: number,
    private readonly now: () => number,
  ) {}

  static async open(db: Db, opts: { cacheMs: number; now?: () => number }): Promise<GrantStore> {
    const coll = db.collection<GrantDoc>("grants");
    await coll.createIndex({ tool_id: 1, principal: 1 }, { name: "by_tool" });
    await coll.createIndex({ principal: 1, tool_id: 1 }, { name: "by_principal" });
    return new GrantStore(coll, opts.cacheMs, opts.now ?? Date.now);
  }

  /** Whether `principal` is granted `toolId`. Cached. */
  async has(toolId: string, principal: string): Promise<boolean> {
    const id = grantId(toolId, principal);
    const hit = this.cache.get(id);
    const t = this.now();
    if (hit && t - hit.at < this.cacheMs) return hit.granted;
    const granted = (await this.coll.countDocuments({ tool_id: toolId, principal }, { limit: 1 })) > 0;
    if (this.cache.size >= MAX_CACHED) this.cache.clear();
    this.cache.set(id, { granted, at: t });
    return granted;
  }

  /** Adds a grant; @returns it, and whether it existed already. */
  async add(toolId: string, principal: string, by: string): Promise<{ grant: GrantDoc; alreadyGranted: boolean }> {
    const doc: GrantDoc = { _id: grantId(toolId, principal), tool_id: toolId, principal, granted_at: new Date(this.now()), granted_by: by };
    try {
      await this.coll.insertOne(doc, { writeConcern: { w: "majority" } });
      this.cache.delete(doc._id);
      return { grant: doc, alreadyGranted: false };
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
      const existing = await this.coll.findOne({ tool_id: toolId, principal });
      return { grant: existing ?? doc, alreadyGranted: true };
    }
  }

  /** Removes a grant; @returns whether there was one. */
  async remove(toolId: string, principal: string): Promise<boolean> {
    const res = await this.coll.deleteOne({ _id: grantId(toolId, principal) }, { writeConcern: { w: "majority" } });
    this.cache.delete(grantId(toolId, principal));
    return res.deletedCount > 0;
  }

  /** The tools `principal` is granted (not those it owns). */
  async toolsOf(principal: string): Promise<string[]> {
    return (await this.coll.find({ principal }, { projection: { tool_id: 1 } }).toArray()).map((g) => g.tool_id);
  }

  /** A page of grants ordered by (tool, principal), after `after`. */
  list(q: { toolId: string; principal: string }, after: { toolId: string; principal: string } | undefined, limit: number): Promise<GrantDoc[]> {
    const filter: Filter<GrantDoc> = {};
    if (q.toolId) filter.tool_id = q.toolId;
    if (q.principal) filter.principal = q.principal;
    if (after) filter.$or = [{ tool_id: { $gt: after.toolId } }, { tool_id: after.toolId, principal: { $gt: after.principal } }];
    return this.coll.find(filter).sort({ tool_id: 1, principal: 1 }).limit(limit).toArray();
  }
}

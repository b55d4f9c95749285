/**
 * A tool's HTTP destination, read from the kernel's tool registry in the shared database
 * (the gateway has no other source it could trust: the destination is part of the tool's
 * registered definition, which never changes under its id, so a found tool is cached for
 * good; an unknown one is asked again next time).
 */
import type { Collection, Db } from "mongodb";
import type { HttpDestinationSpec } from "../../common/src/domain/http-destination";

interface ToolDocView {
  _id: string;
  definition?: { httpDestination?: HttpDestinationSpec };
}

const MAX_CACHED = 10_000;

export class DestinationLookup {
  private readonly cache = new Map<string, HttpDestinationSpec | null>();
  private readonly tools: Collection<ToolDocView>;

  constructor(db: Db) {
    this.tools = db.collection<ToolDocView>("tools");
  }

  /** The destination; null when the tool has none; undefined when the tool is not registered. */
  async get(toolId: string): Promise<HttpDestinationSpec | null | undefined> {
    const cached = this.cache.get(toolId);
    if (cached !== undefined) return cached;
    const doc = await this.tools.findOne({ _id: toolId }, { projection: { "definition.httpDestination": 1 } });
    if (!doc) return undefined;
    const destination = doc.definition?.httpDestination ?? null;
    if (this.cache.size >= MAX_CACHED) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(toolId, destination);
    return destination;
  }
}

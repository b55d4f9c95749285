/** Reads by `_id` in flight at once for one answer: a page's completions never take the whole connection pool. */
const READS_IN_FLIGHT = 32;

/**
 * Reads each id by equality (FerretDB pushes no `$in` down: it would read the whole
 * collection), at most READS_IN_FLIGHT at once: the documents found, by id.
 */
export async function byId<T>(ids: readonly string[], read: (id: string) => Promise<T | null | undefined>): Promise<Map<string, T>> {
  const out = new Map<string, T>();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < ids.length) {
      const id = ids[next++]!;
      const doc = await read(id);
      if (doc) out.set(id, doc);
    }
  };
  await Promise.all(Array.from({ length: Math.min(READS_IN_FLIGHT, ids.length) }, worker));
  return out;
}

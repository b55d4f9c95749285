/**
 * Round robin for the scale-out scenario (`call-2x2`): one client object per kernel /
 * ledger pair, picked in turn, so consecutive calls alternate kernels and every kernel's
 * capability handles write to every ledger in equal shares.
 */

/** Hands out `items` in turn, forever. */
export class RoundRobin<T> {
  private i = 0;

  constructor(private readonly items: readonly T[]) {
    if (items.length === 0) throw new Error("RoundRobin needs at least one item");
  }

  next(): T {
    const item = this.items[this.i]!;
    this.i = (this.i + 1) % this.items.length;
    return item;
  }

  get size(): number {
    return this.items.length;
  }
}

/**
 * Every kernel × ledger pair, ordered so that a round robin over the list changes kernel
 * on every pick and ledger every `kernels.length` picks: pair j is
 * (kernels[j mod nk], ledgers[floor(j / nk) mod nl]). Over any whole number of rounds
 * each kernel, each ledger and each pair gets the same share.
 */
export function crossPairs<K, L>(kernels: readonly K[], ledgers: readonly L[]): { kernel: K; ledger: L }[] {
  const out: { kernel: K; ledger: L }[] = [];
  for (let j = 0; j < kernels.length * ledgers.length; j++) {
    out.push({ kernel: kernels[j % kernels.length]!, ledger: ledgers[Math.floor(j / kernels.length)]! });
  }
  return out;
}

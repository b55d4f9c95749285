"""Whole calls (begin, write, complete) through the asyncio Python client against a running
kernel and ledger, at one concurrency (tasks), with the client's batching on (the default)
and off (``batching=False``), alternating for the given time; prints one JSON line for
bench/client-calls.ts (``make bench``): each side's rate and the ratio, in the same run.

    python clients/python/bench/call_bench.py KERNEL LEDGER RUNTIME_TOKEN CONCURRENCY SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

from keycap_client import Idempotent, KeyDerivation, KeycapError, ToolDefinition
from keycap_client.aio import AsyncKernelClient


async def _drive(kernel: AsyncKernelClient, tool: str, concurrency: int, seconds: float) -> tuple[int, int]:
    end = time.monotonic() + seconds
    done = 0
    errors = 0

    async def loop() -> None:
        nonlocal done, errors
        while time.monotonic() < end:
            try:
                handle = await kernel.begin(tool, {"order_id": uuid.uuid4().hex})
                await handle.write(b"charged")
                await handle.complete()
                done += 1
            except KeycapError:
                errors += 1

    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return done, errors


async def main(kernel_address: str, ledger_address: str, token: str, concurrency: int, seconds: float) -> dict[str, object]:
    tool = f"bench.python-calls.{uuid.uuid4().hex[:12]}"
    async with AsyncKernelClient(kernel_address, token=token) as setup:
        await setup.register_tool(ToolDefinition(tool, Idempotent(KeyDerivation(["/order_id"]))))
    calls = {True: 0, False: 0}
    errors = 0
    # Two rounds per side, alternating, so drift on a shared machine hits both alike.
    for round_ in range(4):
        batched = round_ % 2 == 0
        async with AsyncKernelClient(kernel_address, ledger_address=ledger_address, token=token, batching=batched) as kernel:
            n, e = await _drive(kernel, tool, concurrency, seconds / 4)
        calls[batched] += n
        errors += e
    per_side = seconds / 2
    batched_per_s, unbatched_per_s = calls[True] / per_side, calls[False] / per_side
    return {
        "language": "python",
        "concurrency": concurrency,
        "batched_per_s": batched_per_s,
        "unbatched_per_s": unbatched_per_s,
        "ratio": batched_per_s / unbatched_per_s if unbatched_per_s else None,
        "errors": errors,
        "seconds_per_side": per_side,
    }


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit("usage: call_bench.py KERNEL LEDGER RUNTIME_TOKEN CONCURRENCY SECONDS")
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))))

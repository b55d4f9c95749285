"""A tool that charges an order, written against keycap.

The runtime part registers the tool and begins the call; the tool part writes
its effect through the capability handle, which always carries the key the
kernel derived from ``order_id``. Running it twice charges once: the second
write comes back with ``duplicate=True``.

    python clients/python/examples/charge_tool.py [KERNEL] [LEDGER] [ORDER_ID]

Addresses not given come from ``KEYCAP_KERNEL_ADDRESS`` and ``KEYCAP_LEDGER_ADDRESS``,
else the defaults of ``make run`` (127.0.0.1:50051 and :50052).
"""

from __future__ import annotations

import json
import os
import sys

from keycap_client import CapabilityHandle, Idempotent, KernelClient, KeyDerivation, KeycapError, ToolDefinition

CHARGE = ToolDefinition(
    "examples.payments.charge",
    Idempotent(KeyDerivation(["/order_id"])),
    arguments_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["order_id", "amount_cents"],
    },
)


def charge(handle: CapabilityHandle, amount_cents: int) -> None:
    """The tool: do the side effect once, recorded under the kernel's key."""
    res = handle.write(json.dumps({"charged_cents": amount_cents}).encode())
    what = "already charged (duplicate)" if res.duplicate else "charged"
    print(f"{what}: entry {res.entry.entry_id} key {res.entry.key}")


def main(argv: list[str]) -> int:
    kernel_address = argv[1] if len(argv) > 1 else os.environ.get("KEYCAP_KERNEL_ADDRESS") or "127.0.0.1:50051"
    ledger_address = argv[2] if len(argv) > 2 else os.environ.get("KEYCAP_LEDGER_ADDRESS") or "127.0.0.1:50052"
    order_id = argv[3] if len(argv) > 3 else "order-42"
    with KernelClient(kernel_address, ledger_address=ledger_address) as kernel:
        try:
            kernel.register_tool(CHARGE)
            handle = kernel.begin(CHARGE.id, {"order_id": order_id, "amount_cents": 500})
            charge(handle, 500)
            handle.complete("succeeded")
        except KeycapError as err:
            print(f"refused: {err.code.name} {err.reason}: {err.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

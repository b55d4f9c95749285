"""A Python MCP host (the official `mcp` SDK's ClientSession over stdio) driving `keycap mcp`.

Usage: python mcp_host.py NODE CLI POLICY ORDER_ID
Launches `NODE CLI mcp --policy POLICY` with this process's environment, then prints one JSON
line: the tools offered, the texts and replay flags of 20 concurrent identical calls of
create_order for ORDER_ID, and the MCP error (code, data) of a call missing its key field.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client


async def main() -> None:
    node, cli, policy, order_id = sys.argv[1:5]
    params = StdioServerParameters(command=node, args=[cli, "mcp", "--policy", policy], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            args = {"order_id": order_id, "amount": 3, "delay_ms": 200}
            results = await asyncio.gather(*(session.call_tool("create_order", args) for _ in range(20)))
            texts = sorted({json.dumps([c.model_dump(mode="json", exclude_none=True) for c in r.content]) for r in results})
            replays = [bool((r.meta or {}).get("io.keycap/replay")) for r in results]
            try:
                await session.call_tool("create_order", {"amount": 3})
                refusal = None
            except MCPError as err:
                refusal = {"code": err.code, "data": err.data}
            print(json.dumps({"tools": [t.name for t in tools], "texts": texts, "replays": replays, "refusal": refusal}), flush=True)


asyncio.run(main())

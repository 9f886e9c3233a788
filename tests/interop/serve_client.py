"""A client written with the Python MCP SDK, driving `demiurge serve` for tests/interop.rs.

Usage: serve_client.py (stdio EXE ARGS... | http URL) -- ANSWER...

Lists the tools, calls `d__echo`, and prints one JSON line: the protocol version, the
tool names, whether the call was an error, its text, and the first line of each
elicitation it was asked (answered in turn with the ANSWERs: once, session, always,
no, or decline).
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

split = sys.argv.index("--")
where, answers = sys.argv[1:split], sys.argv[split + 1 :]
asked = []


async def elicit(ctx, params):
    asked.append(params.message.splitlines()[0])
    answer = answers.pop(0) if answers else "no"
    if answer == "decline":
        return types.ElicitResult(action="decline")
    return types.ElicitResult(action="accept", content={"answer": answer})


async def drive(read, write):
    async with ClientSession(read, write, elicitation_callback=elicit) as session:
        init = await session.initialize()
        tools = await session.list_tools()
        called = await session.call_tool("d__echo", {"message": "through serve"})
        texts = [c.text for c in called.content if getattr(c, "text", None)]
        print(json.dumps({
            "protocol": str(getattr(init, "protocol_version", "")),
            "tools": [t.name for t in tools.tools],
            "is_error": bool(getattr(called, "is_error", getattr(called, "isError", False))),
            "text": " ".join(texts),
            "asked": asked,
        }))


async def main():
    if where[0] == "stdio":
        params = StdioServerParameters(command=where[1], args=where[2:])
        async with stdio_client(params) as (read, write):
            await drive(read, write)
    else:
        async with streamable_http_client(where[1]) as streams:
            await drive(streams[0], streams[1])


asyncio.run(main())

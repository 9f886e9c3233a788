"""An echo server on the Python MCP SDK (PyPI `mcp`), in its default mode: it speaks
both protocol eras. `tests/interop.rs` runs it with the runtime as its client, over
stdio, or with `--http PORT` over streamable HTTP on 127.0.0.1."""

import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("sdk-echo")


@app.tool()
def echo(message: str) -> str:
    """Returns the message."""
    return message


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        app.run("streamable-http", host="127.0.0.1", port=port)
    else:
        app.run()

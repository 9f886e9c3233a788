"""An echo server on the Python MCP SDK (PyPI `mcp`), in its default mode: it speaks
both protocol eras. `tests/interop.rs` runs it with the runtime as its client."""

from mcp.server.mcpserver import MCPServer

app = MCPServer("sdk-echo")


@app.tool()
def echo(message: str) -> str:
    """Returns the message."""
    return message


if __name__ == "__main__":
    app.run()

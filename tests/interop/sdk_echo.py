"""An echo server on the Python MCP SDK (PyPI `mcp`), in its default mode: it speaks
both protocol eras. `tests/interop.rs` runs it with the runtime as its client, over
stdio, or with `--http PORT` over streamable HTTP on 127.0.0.1. Beside `echo`, two
tools ask the client for input through the SDK's resolvers: `favourite` elicits a
colour, `root_uris` lists the client's roots (in the 2026-07-28 era as `input_required`
rounds, in the 2025-11-25 era as requests of the server's own)."""

import sys
from typing import Annotated

from mcp_types import ListRootsResult
from pydantic import BaseModel

from mcp.server.mcpserver import Elicit, ListRoots, MCPServer, Resolve

app = MCPServer("sdk-echo")


class Colour(BaseModel):
    color: str


def ask_colour() -> Elicit[Colour]:
    return Elicit("Which colour?", Colour)


def client_roots() -> ListRoots:
    return ListRoots()


@app.tool()
def echo(message: str) -> str:
    """Returns the message."""
    return message


@app.tool()
def favourite(colour: Annotated[Colour, Resolve(ask_colour)]) -> str:
    """Asks the user for a colour and returns it."""
    return colour.color


@app.tool()
def root_uris(found: Annotated[ListRootsResult, Resolve(client_roots)]) -> str:
    """Returns the client's roots, one per line."""
    return "\n".join(str(root.uri) for root in found.roots)


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        app.run("streamable-http", host="127.0.0.1", port=port)
    else:
        app.run()

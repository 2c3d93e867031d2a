"""A small MCP server (stdio) whose tool list changes at run time, for haip's
MCP import tests (tests/tests/mcp_import.rs). Built with the Python `mcp` SDK
2.3.0 (`MCPServer`, the v2 name of FastMCP).

Tools:
- `add_tool(name)` registers a tool `name` (it echoes `{"tool": name, "text": text}`)
  and sends `notifications/tools/list_changed`;
- `remove_tool(name)` removes it again and sends the same notification;
- `fail(message)` answers with an `isError: true` result whose text is `message`;
- `progress()` reports progress 1/4 "step 1", 2 without a total "total unknown",
  3/4 "step 3", 4/4 "step 4" (50 ms apart), then returns "done";
- `wait()` reports progress "waiting", then sleeps 30 s; when the call is
  cancelled (`notifications/cancelled`) it counts it, and `cancelled()` returns
  that count.
"""

from typing import Any

import anyio
from mcp.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server

# WARNING keeps the SDK's per-call INFO lines (e.g. "Tool 'fail' failed") out of
# the test output: the child's stderr is the test's.
server = MCPServer("haip-dynamic-test-server", log_level="WARNING")


def make_tool(name: str):
    def dynamic(text: str = "") -> dict[str, Any]:
        """A tool added at run time: echoes its name and `text`."""
        return {"tool": name, "text": text}

    return dynamic


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Registers a tool called `name` and announces the new tool list."""
    server.add_tool(make_tool(name), name=name, description=f"Added at run time as {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def remove_tool(name: str, ctx: Context) -> str:
    """Removes the tool called `name` and announces the new tool list."""
    server.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


@server.tool()
def fail(message: str) -> str:
    """Always fails: the result has `isError: true` and `message` as its text."""
    raise ToolError(message)


@server.tool()
async def progress(ctx: Context) -> str:
    """Reports four progress notifications, one of them without a total."""
    steps = [(1, 4, "step 1"), (2, None, "total unknown"), (3, 4, "step 3"), (4, 4, "step 4")]
    for done, total, message in steps:
        await ctx.report_progress(done, total, message)
        await anyio.sleep(0.05)
    return "done"


cancelled_waits = 0


@server.tool()
async def wait(ctx: Context) -> str:
    """Reports "waiting", then sleeps 30 s unless cancelled (which is counted)."""
    global cancelled_waits
    await ctx.report_progress(0, None, "waiting")
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        cancelled_waits += 1
        raise
    return "waited"


@server.tool()
def cancelled() -> int:
    """How many `wait` calls were cancelled."""
    return cancelled_waits


async def main() -> None:
    # `server.run()` would advertise `tools.listChanged: false`; this server does
    # send the notification, so it runs the low-level server with that capability.
    lowlevel = server._lowlevel_server
    options = lowlevel.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(main)

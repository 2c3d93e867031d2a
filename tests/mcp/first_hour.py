"""The official Python MCP SDK's client, with its `initialize` handshake (MCP
2025-11-25), against a haip server with the default `/mcp` settings.

    python first_hour.py <url>

Run by `tests/tests/mcp_first_hour.rs`. With `mcp.ClientSession` over
Streamable HTTP and an elicitation callback (so the client declares
elicitation):

- the handshake negotiates 2025-11-25 and the server opens a session
  (an answer carries `Mcp-Session-Id`);
- `delete_files` asks `ctx.confirm(...)`; the question reaches the callback
  (a form of one boolean, `confirm`), which accepts with `{"confirm": true}`,
  and the tool answers `{"confirmed": true}`;
- leaving the client ends the session with a `DELETE`, answered 200 or 204:
  the SDK logs no "Session termination failed".

Exits 0 and prints a summary when every check holds; prints the failed check
to stderr and exits 1 otherwise.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Warnings(logging.Handler):
    """Every warning the SDK logs (they still reach stderr too)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def run(url: str, warnings: Warnings) -> str:
    questions: list[Any] = []
    exchanges: list[tuple[str, int, str | None]] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        questions.append(params)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def record(response: httpx2.Response) -> None:
        exchanges.append(
            (response.request.method, response.status_code, response.headers.get("mcp-session-id"))
        )

    http = create_mcp_http_client()
    http.event_hooks["response"].append(record)
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicit) as session:
                with anyio.fail_after(10):
                    init = await session.initialize()
                check(
                    init.protocol_version == "2025-11-25",
                    f"negotiated {init.protocol_version}, not 2025-11-25",
                )
                with anyio.fail_after(10):
                    result = await session.call_tool("delete_files", {})
                check(not result.is_error, f"delete_files failed: {result}")
                check(
                    result.structured_content == {"confirmed": True},
                    f"delete_files did not see the confirmation: {result}",
                )
                check(len(questions) == 1, f"expected one question, got {questions}")
                asked = questions[0]
                check(asked.message == "Delete 3 files?", f"the question: {asked}")
                schema = asked.requested_schema
                check(
                    schema["properties"]["confirm"]["type"] == "boolean",
                    f"the question's form: {schema}",
                )
        # The transport has sent its DELETE by now.
    check(
        any(session_id for _, _, session_id in exchanges),
        f"no answer carried Mcp-Session-Id: {exchanges}",
    )
    deletes = [status for method, status, _ in exchanges if method == "DELETE"]
    check(len(deletes) == 1, f"expected one DELETE, got {exchanges}")
    check(deletes[0] in (200, 204), f"DELETE answered {deletes[0]}")
    failed = [m for m in warnings.messages if "Session termination failed" in m]
    check(not failed, f"the SDK logged {failed}")
    return (
        f"ok: MCP {init.protocol_version} session with {init.server_info.name}; "
        f"confirm answered ({result.structured_content}); DELETE {deletes[0]}"
    )


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: first_hour.py <url>", file=sys.stderr)
        return 2
    # Warnings go to stderr as they would without this script's handler,
    # which the Rust test reads too.
    logging.basicConfig(level=logging.WARNING)
    warnings = Warnings()
    logging.getLogger().addHandler(warnings)
    try:
        summary = anyio.run(run, sys.argv[1], warnings)
    except CheckFailed as failed:
        print(f"check failed: {failed}", file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

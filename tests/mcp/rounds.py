"""The official Python MCP SDK (2.x) speaking MCP 2026-07-28 to stateless haip.

    python rounds.py <url>

`<url>` is a round-robin proxy (run by `tests/tests/mcp_rounds.rs`) in front
of two haip instances that share a `request_state_key`: every POST goes to
the other instance than the one before. The client is `mcp.Client` pinned to
2026-07-28 with an elicitation callback:

- `book_table` asks how many people and when: the server answers the call
  with `input_required` (the question), the SDK asks the callback, retries
  the call with the answer and the `requestState`, and the retry, served by
  the other instance, books the table;
- the callback saw exactly one question, with the form `book_table` asks.

Exits 0 and prints a summary when every check holds; prints the failed
check to stderr and exits 1 otherwise.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import anyio
import mcp_types as types
from mcp import Client


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


async def run(url: str) -> str:
    asked: list[Any] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"party_size": 4, "time": "19:00"})

    async with Client(url, mode="2026-07-28", elicitation_callback=elicit) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("book_table", {"restaurant": "Luigi"})
    check(not result.is_error, f"book_table failed: {result}")
    structured = result.structured_content or {}
    check(structured.get("booked") is True, f"not booked: {structured}")
    check(structured.get("party_size") == 4, f"party size: {structured}")
    check(structured.get("time") == "19:00", f"time: {structured}")
    check(len(asked) == 1, f"asked {len(asked)} questions: {asked}")
    message = getattr(asked[0], "message", None)
    check(message == "How many people, and when?", f"the question: {asked[0]}")
    schema = getattr(asked[0], "requested_schema", None) or {}
    if not isinstance(schema, dict):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    check(set(schema.get("properties", {})) == {"party_size", "time"}, f"the form: {schema}")
    return f"booked {structured['party_size']} at {structured['time']} after {len(asked)} question"


def main() -> int:
    try:
        summary = anyio.run(run, sys.argv[1])
    except CheckFailed as e:
        print(f"check failed: {e}", file=sys.stderr)
        return 1
    except Exception:  # the SDK's own errors, with their traceback
        traceback.print_exc()
        return 1
    print(f"ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

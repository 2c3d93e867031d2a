"""The official Python MCP SDK's client against two stateless haip instances
(`mcp_sessions(false)`).

    python stateless.py <url>

`<url>` is a round-robin proxy (run by `tests/tests/mcp_stateless.rs`) that
sends each POST to the other instance than the one before, A first: the
client initializes on A, its `notifications/initialized` goes to B, and then
`tools/list` to A, `tools/list` to B, `add` to A, `calculator` to B, and so
on. With `mcp.ClientSession` over Streamable HTTP (SDK 2.x, the `initialize`
handshake):

- the `tools` capability does not promise `listChanged` (stateless: nothing
  to announce it on; the proxy checks that no answer has `Mcp-Session-Id`);
- `tools/list` has the quickstart tools (and `instance`) on both instances,
  `add` and `calculator` answer;
- `process_file`'s progress arrives on its own response stream;
- `book_table` logs a line (which arrives) and asks a question, which fails
  at once (the tool's error says the client has no session and names
  `mcp_sessions`) and
  never reaches the elicitation callback: the answer would come back as a
  new POST that no instance waits for;
- `instance` (which names the server that runs it), called four times in a
  row, alternates between the two: the requests really went to both.

Exits 0 and prints a summary when every check holds; prints the failed check
to stderr and exits 1 otherwise.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

QUICKSTART = ["echo", "add", "weather", "calculator", "process_file", "create_user", "book_table"]


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Recorder:
    """Records what the server sends the client outside results."""

    def __init__(self) -> None:
        self.questions: list[Any] = []
        self.logs: list[Any] = []

    async def elicit(self, context: Any, params: Any) -> types.ElicitResult:
        self.questions.append(params)
        return types.ElicitResult(action="decline")

    async def log(self, params: Any) -> None:
        self.logs.append(params)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if b.type == "text")


async def run(url: str) -> str:
    recorder = Recorder()
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(
            read, write, elicitation_callback=recorder.elicit, logging_callback=recorder.log
        ) as session:
            with anyio.fail_after(10):
                init = await session.initialize()
            tools_capability = init.capabilities.tools
            check(tools_capability is not None, f"no tools capability: {init.capabilities}")
            check(not tools_capability.list_changed, f"stateless, yet listChanged: {tools_capability}")

            # Twice: the SDK's `notifications/initialized` took B's turn, so
            # the first list is A's and the second B's (which never saw
            # `initialize`). Both list the same tools.
            for _ in range(2):
                with anyio.fail_after(10):
                    listed = [t.name for t in (await session.list_tools()).tools]
                check(listed == QUICKSTART + ["instance"], f"tools/list: {listed}")

            with anyio.fail_after(10):
                added = await session.call_tool("add", {"a": 2, "b": 3})
            check(not added.is_error, f"add failed: {added}")
            check(added.structured_content == {"result": 5}, f"add: {added}")

            with anyio.fail_after(10):
                calc = await session.call_tool("calculator", {"operation": "multiply", "a": 6, "b": 7})
            check(not calc.is_error, f"calculator failed: {calc}")
            check(
                calc.structured_content == {"result": 42.0, "operation": "multiply"},
                f"calculator: {calc}",
            )

            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            with anyio.fail_after(10):
                processed = await session.call_tool(
                    "process_file", {"filename": "a.txt", "operation": "read"}, progress_callback=on_progress
                )
            check(not processed.is_error, f"process_file failed: {processed}")
            check(processed.structured_content == {"processed": True, "lines": 150}, f"process_file: {processed}")
            check(len(progress) >= 3 and progress[-1] == 100.0, f"progress: {progress}")
            check(progress == sorted(progress), f"progress goes up: {progress}")

            started = time.monotonic()
            with anyio.fail_after(10):
                booked = await session.call_tool("book_table", {"restaurant": "Luigi"})
            asked_for = time.monotonic() - started
            check(booked.is_error, f"book_table asked and got an answer: {booked}")
            # The client declared elicitation: the error names what is missing, a session.
            check("mcp_sessions" in text_of(booked), f"book_table's error: {booked}")
            check(not recorder.questions, f"the question reached the client: {recorder.questions}")
            check(asked_for < 5, f"book_table took {asked_for:.1f} s to fail")
            lines = [getattr(p, "data", None) for p in recorder.logs]
            check("checking availability at Luigi" in lines, f"book_table's log line: {recorder.logs}")

            served_by = []
            for _ in range(4):
                with anyio.fail_after(10):
                    answer = await session.call_tool("instance", {})
                check(not answer.is_error, f"instance failed: {answer}")
                served_by.append(answer.structured_content["instance"])
            check(set(served_by) == {"A", "B"}, f"instance answered by {served_by}")
            check(
                all(a != b for a, b in zip(served_by, served_by[1:])),
                f"consecutive calls were served by the same instance: {served_by}",
            )
    return (
        f"ok: initialized once, then 2 tools/list and {4 + len(served_by)} tools/call alternated between "
        f"instances ({'/'.join(served_by)}); {len(progress)} progress notifications; book_table's "
        f"question failed at once ({asked_for * 1000:.0f} ms), its log line arrived"
    )


def failures(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in failures(inner)]
    return [exc]


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} <url>", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        summary = anyio.run(run, sys.argv[1])
    except BaseException as exc:  # report everything, then fail
        for leaf in failures(exc):
            if isinstance(leaf, CheckFailed):
                print(f"FAILED: {leaf}", file=sys.stderr)
            else:
                print("FAILED with an exception:", file=sys.stderr)
                traceback.print_exception(leaf, file=sys.stderr)
        return 1
    print(f"{summary} [{time.monotonic() - started:.2f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

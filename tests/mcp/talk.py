"""The official Python MCP SDK's client answering haip tools that talk to people.

    python talk.py <path-to-mcp_export-binary> <path-to-conformance-binary>

Over stdio, with `mcp.ClientSession` (SDK 2.x):

- `book_table` on the `mcp_export` example (the quickstart's tools): its log
  line arrives as `notifications/message`, its question as
  `elicitation/create` (form mode), which this client answers; once accepted
  (a table for 2 at 18:00), once declined.
- `test_image_content` on the `conformance` example (`--stdio`): the image
  block round-trips (base64 of a PNG, `image/png`).

Exits 0 and prints a summary when every check holds; prints the failed check
to stderr and exits 1 otherwise.
"""

from __future__ import annotations

import base64
import sys
import time
import traceback
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

SERVER_ENV = {"HAIP_LOG": "warn", "NO_COLOR": "1"}


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Person:
    """Answers questions as told, and remembers what it was asked and told."""

    def __init__(self) -> None:
        self.answer: types.ElicitResult | None = None
        self.questions: list[Any] = []
        self.logs: list[Any] = []

    async def elicit(self, context: Any, params: Any) -> types.ElicitResult:
        self.questions.append(params)
        assert self.answer is not None
        return self.answer

    async def log(self, params: Any) -> None:
        self.logs.append(params)


async def book(session: ClientSession, person: Person, answer: types.ElicitResult) -> dict[str, Any]:
    person.answer = answer
    person.questions.clear()
    person.logs.clear()
    with anyio.fail_after(10):
        result = await session.call_tool("book_table", {"restaurant": "Luigi"})
    check(not result.is_error, f"book_table failed: {result}")
    check(len(person.questions) == 1, f"expected one question, got {person.questions}")
    question = person.questions[0]
    check(question.message == "How many people, and when?", f"question: {question}")
    schema = question.requested_schema
    props = schema.get("properties", {}) if isinstance(schema, dict) else schema.properties
    check({"party_size", "time"} <= set(props), f"question schema: {schema}")
    messages = [getattr(p, "data", None) for p in person.logs]
    check(
        "checking availability at Luigi" in messages,
        f"no log line 'checking availability at Luigi' before the result: {person.logs}",
    )
    level = person.logs[0].level
    check(level == "info", f"log level: {level}")
    structured = result.structured_content
    check(isinstance(structured, dict), f"no structuredContent: {result}")
    return structured


async def talk(binary: str) -> str:
    person = Person()
    params = StdioServerParameters(command=binary, args=[], env=SERVER_ENV)
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, elicitation_callback=person.elicit, logging_callback=person.log
        ) as session:
            with anyio.fail_after(10):
                await session.initialize()
                await session.set_logging_level("info")
            booked = await book(
                session,
                person,
                types.ElicitResult(action="accept", content={"party_size": 2, "time": "18:00"}),
            )
            check(
                booked == {"booked": True, "restaurant": "Luigi", "party_size": 2, "time": "18:00"},
                f"accepted: {booked}",
            )
            declined = await book(session, person, types.ElicitResult(action="decline"))
            check(declined == {"booked": False, "restaurant": "Luigi"}, f"declined: {declined}")
    return "book_table asked over elicitation (accepted, declined), its log line arrived as notifications/message"


async def image(binary: str) -> str:
    params = StdioServerParameters(command=binary, args=["--stdio"], env=SERVER_ENV)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(10):
                await session.initialize()
                result = await session.call_tool("test_image_content", {})
    check(not result.is_error, f"test_image_content failed: {result}")
    blocks = [b for b in result.content if b.type == "image"]
    check(len(blocks) == 1, f"expected one image block: {result.content}")
    block = blocks[0]
    check(block.mime_type == "image/png", f"mimeType: {block.mime_type}")
    data = block.data if isinstance(block.data, bytes) else base64.b64decode(block.data)
    check(data.startswith(b"\x89PNG\r\n\x1a\n"), f"not a PNG: {data[:16]!r}")
    return f"an image block round-tripped ({len(data)} bytes of PNG)"


async def run(export: str, conformance: str) -> str:
    return f"ok: {await talk(export)}; {await image(conformance)}"


def failures(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in failures(inner)]
    return [exc]


def main() -> int:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} <mcp_export-binary> <conformance-binary>", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        summary = anyio.run(run, sys.argv[1], sys.argv[2])
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

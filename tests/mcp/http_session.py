"""The official Python MCP SDK's client over Streamable HTTP, with its
`initialize` handshake (MCP 2025-11-25), against a haip server serving the
quickstart's tools at `<url>`.

    python http_session.py <url>

Run by `tests/tests/embedded_external.rs` against haip nested in an axum
application (`<url>` is `http://ADDR/agent/mcp`). With `mcp.ClientSession`
and an elicitation callback:

- the server opens a session (an answer carries `Mcp-Session-Id`), and every
  request the SDK sends (its POSTs, its `GET` stream, its `DELETE`) goes to
  `<url>` itself;
- `tools/list` lists the quickstart's tools; `echo` answers;
- `process_file` reports progress (several notifications, increasing, the
  last 100) before its result;
- `book_table` asks how many people and when (`elicitation/create`); the
  callback accepts 2 at 18:00, and the table is booked;
- a second `process_file` is cancelled once it has reported progress: the
  SDK POSTs `notifications/cancelled` for it (answered 202), no result
  arrives for it, and the session still answers (`add`);
- leaving the client ends the session with a `DELETE`, answered 200 or 204.

Exits 0 and prints a summary starting with "ok:" when every check holds;
prints the failed check to stderr and exits 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

QUICKSTART = ["echo", "add", "weather", "calculator", "process_file", "create_user", "book_table"]
PROCESS_ARGS = {"filename": "data.csv", "operation": "read"}


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Exchanges:
    """Every HTTP exchange of the client: method, path, status, session id and
    the JSON-RPC method of a POSTed message."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, str | None, str | None]] = []

    async def record(self, response: httpx2.Response) -> None:
        request = response.request
        method = None
        if request.method == "POST":
            try:
                method = json.loads(request.content).get("method")
            except Exception:  # a body that is not one JSON object
                method = None
        self.seen.append(
            (
                request.method,
                request.url.path,
                response.status_code,
                response.headers.get("mcp-session-id"),
                method,
            )
        )

    def posted(self, rpc_method: str) -> list[int]:
        return [status for m, _, status, _, rm in self.seen if m == "POST" and rm == rpc_method]


async def check_progress(session: ClientSession) -> list[float]:
    seen: list[float] = []
    done = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if progress >= 100:
            done.set()

    with anyio.fail_after(15):
        result = await session.call_tool("process_file", PROCESS_ARGS, progress_callback=on_progress)
        # Progress callbacks run as tasks of their own: the last may land just
        # after the result.
        await done.wait()
    check(not result.is_error, f"process_file failed: {result}")
    check(
        result.structured_content == {"processed": True, "lines": 150},
        f"process_file: {result.structured_content!r}",
    )
    check(len(seen) >= 3, f"expected several progress notifications, got {seen}")
    check(all(a < b for a, b in zip(seen, seen[1:])), f"progress does not increase: {seen}")
    check(seen[-1] == 100, f"the last progress is not 100: {seen}")
    return seen


async def check_question(session: ClientSession, questions: list[Any]) -> None:
    with anyio.fail_after(10):
        booked = await session.call_tool("book_table", {"restaurant": "Chez Haip"})
    check(not booked.is_error, f"book_table failed: {booked}")
    check(
        booked.structured_content
        == {"booked": True, "restaurant": "Chez Haip", "party_size": 2, "time": "18:00"},
        f"book_table: {booked.structured_content!r}",
    )
    check(len(questions) == 1, f"expected one question, got {questions}")
    check(questions[0].message == "How many people, and when?", f"the question: {questions[0]}")
    schema = questions[0].requested_schema
    check(set(schema.get("properties", {})) == {"party_size", "time"}, f"the form: {schema}")


async def check_cancel(session: ClientSession, exchanges: Exchanges) -> float:
    first_progress = anyio.Event()
    outcome: dict[str, Any] = {}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        first_progress.set()

    async def call() -> None:
        try:
            outcome["result"] = await session.call_tool(
                "process_file", PROCESS_ARGS, progress_callback=on_progress
            )
        except anyio.get_cancelled_exc_class():
            outcome["cancelled"] = True
            raise

    started = time.monotonic()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await first_progress.wait()
            # SDK 2.x has no cancel API: cancelling the awaiting task is it.
            tg.cancel_scope.cancel()
    check(
        outcome.get("cancelled") and "result" not in outcome,
        f"the process_file call was not cancelled: {outcome}",
    )
    # The SDK sends notifications/cancelled by itself, as a POST of its own.
    with anyio.fail_after(5):
        while not exchanges.posted("notifications/cancelled"):
            await anyio.sleep(0.02)
    statuses = exchanges.posted("notifications/cancelled")
    check(statuses == [202], f"notifications/cancelled was answered {statuses}")

    # The session still answers.
    with anyio.fail_after(10):
        added = await session.call_tool("add", {"a": 2, "b": 3})
    check(not added.is_error and added.structured_content == {"result": 5}, f"add: {added}")
    # Past when process_file would have finished had it run on (five 200 ms
    # steps): the Rust test then checks that the server counted it cancelled.
    await anyio.sleep(max(0.0, started + 1.4 - time.monotonic()))
    return time.monotonic() - started


async def run(url: str) -> str:
    questions: list[Any] = []
    exchanges = Exchanges()

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        questions.append(params)
        return types.ElicitResult(action="accept", content={"party_size": 2, "time": "18:00"})

    http = create_mcp_http_client()
    http.event_hooks["response"].append(exchanges.record)
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
                    listed = [t.name for t in (await session.list_tools()).tools]
                check(listed == QUICKSTART, f"tools/list: {listed}")
                with anyio.fail_after(10):
                    echoed = await session.call_tool("echo", {"message": "nested"})
                check(
                    not echoed.is_error and echoed.structured_content == {"echoed": "nested"},
                    f"echo: {echoed}",
                )
                progress = await check_progress(session)
                await check_question(session, questions)
                cancel_took = await check_cancel(session, exchanges)
        # The transport has sent its DELETE by now.
    path = urlsplit(url).path
    elsewhere = [e for e in exchanges.seen if e[1] != path]
    check(not elsewhere, f"requests went elsewhere than {path}: {elsewhere}")
    check(any(e[3] for e in exchanges.seen), f"no answer carried Mcp-Session-Id: {exchanges.seen}")
    gets = [status for m, _, status, _, _ in exchanges.seen if m == "GET"]
    deletes = [status for m, _, status, _, _ in exchanges.seen if m == "DELETE"]
    check(len(deletes) == 1 and deletes[0] in (200, 204), f"the DELETE: {exchanges.seen}")
    return (
        f"ok: MCP {init.protocol_version} session with {init.server_info.name} at {path}; "
        f"{len(listed)} tools listed; echo; process_file progress {progress}; "
        f"book_table asked once and booked; a process_file cancelled ({cancel_took:.2f} s); "
        f"GET stream {gets}; DELETE {deletes[0]}; {len(exchanges.seen)} exchanges"
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
                print(f"check failed: {leaf}", file=sys.stderr)
            else:
                what = "a step timed out" if isinstance(leaf, TimeoutError) else "an exception"
                print(f"FAILED with {what}:", file=sys.stderr)
                traceback.print_exception(leaf, file=sys.stderr)
        return 1
    print(f"{summary} [{time.monotonic() - started:.2f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

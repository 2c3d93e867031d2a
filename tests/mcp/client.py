"""The official Python MCP SDK's client against haip's `mcp_export` example.

    python client.py <path-to-mcp_export-binary>

Runs the binary over stdio with `mcp.ClientSession` (SDK 2.x) and checks that
the client can list the quickstart tools with their schemas, call them, get
progress, and cancel `process_file`. Exits 0 and prints a short summary when
every check holds; prints the failed check (and the server's log) to stderr
and exits 1 otherwise.

Cancellation: `ClientSession` has no explicit cancel API in SDK 2.x. A call
is abandoned by cancelling the task (cancel scope) awaiting it; the SDK's
dispatcher then sends `notifications/cancelled` with the request id by itself
(`JSONRPCDispatcher.send_raw_request`, "courtesy cancel"). The script records
the raw JSON-RPC traffic to verify that, and reads the server's rmcp debug log
(stderr, `HAIP_LOG`) to verify that the tool itself stopped.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage

EXPECTED_TOOLS = ["echo", "add", "weather", "calculator", "process_file", "create_user", "book_table"]
PROCESS_ARGS = {"filename": "data.csv", "operation": "read"}
# The server's log: haip's MCP cancellation lines, no colours.
SERVER_ENV = {"HAIP_LOG": "warn,haip::mcp=debug", "NO_COLOR": "1"}


class CheckFailed(Exception):
    """A check of this script did not hold."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --- raw traffic recording ---------------------------------------------------


class Wire:
    """Every JSON-RPC message the session sent and received, with timestamps."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.received: list[tuple[float, dict[str, Any]]] = []

    @staticmethod
    def as_dict(item: object) -> dict[str, Any] | None:
        if isinstance(item, SessionMessage):
            return item.message.model_dump(by_alias=True, mode="json", exclude_none=True)
        return None

    def responses_to(self, request_id: Any) -> list[dict[str, Any]]:
        return [
            m for _, m in self.received if m.get("id") == request_id and ("result" in m or "error" in m)
        ]

    def progress_for(self, token: Any, since: float = 0.0) -> list[float]:
        return [
            m["params"]["progress"]
            for t, m in self.received
            if t >= since
            and m.get("method") == "notifications/progress"
            and m.get("params", {}).get("progressToken") == token
        ]

    def last_call_id(self, tool: str) -> Any:
        ids = [
            m["id"]
            for _, m in self.sent
            if m.get("method") == "tools/call" and m.get("params", {}).get("name") == tool
        ]
        check(ids, f"no tools/call request for {tool} was sent")
        return ids[-1]


class RecordingWriteStream:
    """Forwards the session's outgoing messages, recording them."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    async def send(self, item: Any, /) -> None:
        if (message := Wire.as_dict(item)) is not None:
            self._wire.sent.append((time.monotonic(), message))
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> RecordingWriteStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


class RecordingReadStream:
    """Forwards the server's incoming messages, recording them."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    def _record(self, item: Any) -> Any:
        if (message := Wire.as_dict(item)) is not None:
            self._wire.received.append((time.monotonic(), message))
        return item

    async def receive(self) -> Any:
        return self._record(await self._inner.receive())

    def __aiter__(self) -> RecordingReadStream:
        return self

    async def __anext__(self) -> Any:
        return self._record(await self._inner.__anext__())

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> RecordingReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


# --- the checks ----------------------------------------------------------------


async def check_tools(session: ClientSession) -> None:
    with anyio.fail_after(10):
        listing = await session.list_tools()
    names = [t.name for t in listing.tools]
    check(names == EXPECTED_TOOLS, f"tools/list: expected {EXPECTED_TOOLS}, got {names}")
    tools = {t.name: t for t in listing.tools}

    calc = tools["calculator"]
    required = calc.input_schema.get("required", [])
    check(
        sorted(required) == ["a", "b", "operation"],
        f"calculator inputSchema must require operation, a, b; required = {required}",
    )
    props = calc.input_schema.get("properties", {})
    check(
        {"operation", "a", "b"} <= set(props),
        f"calculator inputSchema properties lack operation/a/b: {sorted(props)}",
    )
    check(calc.output_schema is not None, "calculator has no outputSchema")
    assert calc.output_schema is not None
    check(
        "result" in calc.output_schema.get("properties", {}),
        f"calculator outputSchema has no `result` property: {calc.output_schema}",
    )

    # Annotations declared with #[haip_tool(title = .., read_only, idempotent)].
    check(calc.title == "Calculator", f"calculator title: {calc.title!r}")
    hints = calc.annotations
    check(hints is not None, "calculator has no annotations")
    assert hints is not None
    check(
        (hints.read_only_hint, hints.idempotent_hint, hints.destructive_hint) == (True, True, None),
        f"calculator annotations: {hints}",
    )
    check(tools["echo"].annotations is None, f"echo declares no annotations: {tools['echo'].annotations}")

    username = tools["create_user"].input_schema.get("properties", {}).get("username", {})
    check(username.get("minLength") == 3, f"create_user username minLength != 3: {username}")
    check(username.get("maxLength") == 20, f"create_user username maxLength != 20: {username}")
    check(
        username.get("pattern") == "^[a-zA-Z0-9_]+$",
        f"create_user username pattern missing or changed: {username}",
    )


async def check_calculator(session: ClientSession) -> None:
    with anyio.fail_after(10):
        result = await session.call_tool("calculator", {"operation": "add", "a": 2, "b": 3})
    check(not result.is_error, f"calculator add 2 3 returned an error: {result}")
    check(
        result.structured_content == {"result": 5.0, "operation": "add"},
        f"calculator add 2 3: structuredContent = {result.structured_content!r}, "
        "expected {'result': 5.0, 'operation': 'add'}",
    )
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(texts, f"calculator result has no text content block: {result.content}")


async def check_invalid_params(session: ClientSession) -> None:
    with anyio.fail_after(10):
        result = await session.call_tool(
            "create_user", {"username": "x!", "email": "someone@example.com", "age": 30}
        )
    check(result.is_error, f"create_user with username 'x!' did not fail: {result}")
    text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    check("/username" in text, f"the invalid-params error text does not mention /username: {text!r}")


async def check_progress(session: ClientSession, wire: Wire) -> list[float]:
    seen: list[tuple[float, float | None, str | None]] = []
    done = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))
        if progress >= 100:
            done.set()

    with anyio.fail_after(15):
        result = await session.call_tool("process_file", PROCESS_ARGS, progress_callback=on_progress)
        # Progress callbacks run as their own tasks: the last one may land
        # just after the result.
        await done.wait()
    check(not result.is_error, f"process_file returned an error: {result}")
    check(
        result.structured_content == {"processed": True, "lines": 150},
        f"process_file: structuredContent = {result.structured_content!r}",
    )
    progress = [p for p, _, _ in seen]
    check(len(seen) >= 3, f"expected several progress notifications, got {seen}")
    check(all(t == 100 for _, t, _ in seen), f"progress total is not always 100: {seen}")
    check(
        all(a < b for a, b in zip(progress, progress[1:])),
        f"progress is not increasing: {progress}",
    )
    check(progress[-1] == 100, f"the last progress is not 100: {progress}")
    # On the wire, every progress notification precedes the result.
    rid = wire.last_call_id("process_file")
    arrival = [t for t, m in wire.received if m.get("id") == rid and "result" in m]
    check(arrival, "the process_file result was not seen on the wire")
    on_wire = wire.progress_for(rid)
    check(on_wire == progress, f"progress on the wire {on_wire} != progress delivered {progress}")
    check(
        not wire.progress_for(rid, since=arrival[0]),
        "progress notifications for process_file arrived after its result",
    )
    return progress


def server_log(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


async def check_cancel(session: ClientSession, wire: Wire, log_path: str) -> dict[str, Any]:
    first_progress = anyio.Event()
    outcome: dict[str, Any] = {}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        first_progress.set()

    async def call() -> None:
        outcome["started"] = time.monotonic()
        try:
            outcome["result"] = await session.call_tool(
                "process_file", PROCESS_ARGS, progress_callback=on_progress
            )
        except anyio.get_cancelled_exc_class():
            outcome["cancelled"] = True
            raise

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await first_progress.wait()
            cancelled_at = time.monotonic()
            # SDK 2.x has no cancel API: cancelling the awaiting task is it.
            tg.cancel_scope.cancel()
    check(
        outcome.get("cancelled") and "result" not in outcome,
        f"the process_file call was not cancelled: {outcome}",
    )

    # The SDK sent notifications/cancelled for that request by itself.
    rid = wire.last_call_id("process_file")
    cancels = [
        (t, m)
        for t, m in wire.sent
        if m.get("method") == "notifications/cancelled" and m.get("params", {}).get("requestId") == rid
    ]
    check(
        len(cancels) == 1,
        f"expected exactly one notifications/cancelled for request {rid!r} from the SDK, got {cancels}",
    )
    cancel_sent_at = cancels[0][0]

    # The session stays usable.
    with anyio.fail_after(10):
        after = await session.call_tool("calculator", {"operation": "multiply", "a": 6, "b": 7})
    check(
        not after.is_error and after.structured_content == {"result": 42.0, "operation": "multiply"},
        f"calculator after the cancellation: {after}",
    )

    # Wait past when process_file would have finished had it run on
    # (five 200 ms steps), then check that no result for it ever came.
    await anyio.sleep(max(0.0, outcome["started"] + 1.6 - time.monotonic()))
    late = wire.responses_to(rid)
    check(not late, f"a response for the cancelled request {rid!r} arrived: {late}")
    late_progress = wire.progress_for(rid, since=cancel_sent_at)
    check(100 not in late_progress, f"process_file kept reporting after cancellation: {late_progress}")

    # The server side (haip's debug log on stderr): it saw the cancellation,
    # and the call ended with haip's "was cancelled" result -- which it then
    # does not send -- rather than with the tool's normal result.
    received = f"notifications/cancelled for request id={rid}"
    dropped = f"request id={rid} was cancelled by its client: its answer is not sent"
    with anyio.move_on_after(5):
        while dropped not in server_log(log_path):
            await anyio.sleep(0.05)
    log = server_log(log_path)
    check(received in log, "the server log does not show it received notifications/cancelled")
    handler_end = [line for line in log.splitlines() if dropped in line]
    check(handler_end, f"the server log does not show it dropped the answer to {rid}")
    check(
        "Tool process_file was cancelled" in handler_end[0] and "processed" not in handler_end[0],
        f"the cancelled call {rid} did not end as cancelled on the server: {handler_end[0]}",
    )
    return {
        "id": rid,
        "cancel_after_ms": round((cancels[0][0] - cancelled_at) * 1000, 1),
        "late_progress": late_progress,
    }


async def run(binary: str, log_path: str) -> str:
    wire = Wire()
    params = StdioServerParameters(command=binary, args=[], env=SERVER_ENV)
    with open(log_path, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(RecordingReadStream(read, wire), RecordingWriteStream(write, wire)) as session:
                with anyio.fail_after(10):
                    init = await session.initialize()
                check(init.server_info.name == "haip", f"server name: {init.server_info}")
                await check_tools(session)
                await check_calculator(session)
                await check_invalid_params(session)
                progress = await check_progress(session, wire)
                cancel = await check_cancel(session, wire, log_path)
    return (
        f"ok: MCP {init.protocol_version} with {init.server_info.name} {init.server_info.version}; "
        f"{len(EXPECTED_TOOLS)} tools listed with schemas; calculator, invalid create_user; "
        f"process_file progress {progress}; "
        f"cancelled request {cancel['id']} (notifications/cancelled sent {cancel['cancel_after_ms']} ms "
        f"after the cancel, no result, progress after it: {cancel['late_progress']}, server ended the call as cancelled)"
    )


def failures(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in failures(inner)]
    return [exc]


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} <path-to-mcp_export-binary>", file=sys.stderr)
        return 2
    fd, log_path = tempfile.mkstemp(prefix="haip-mcp-export-", suffix=".log")
    os.close(fd)
    started = time.monotonic()
    try:
        summary = anyio.run(run, sys.argv[1], log_path)
    except BaseException as exc:  # report everything, then fail
        for leaf in failures(exc):
            if isinstance(leaf, CheckFailed):
                print(f"FAILED: {leaf}", file=sys.stderr)
            else:
                what = "a step timed out" if isinstance(leaf, TimeoutError) else "an exception"
                print(f"FAILED with {what}:", file=sys.stderr)
                traceback.print_exception(leaf, file=sys.stderr)
        print("--- server log (stderr, last 20000 characters) ---", file=sys.stderr)
        print(server_log(log_path)[-20000:], file=sys.stderr)
        return 1
    finally:
        os.unlink(log_path)
    print(f"{summary} [{time.monotonic() - started:.2f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

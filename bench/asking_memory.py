#!/usr/bin/env python3
"""What a call that asks a question costs the server while it waits for the
answer, over MCP: without sessions (MCP 2026-07-28 rounds: the call answers
`input_required` and the server keeps nothing) and with sessions (the call
waits in the server for the client's answer to `elicitation/create`).

Starts the release quickstart (built by `bash bench/asking_memory.sh`) twice
on a free 127.0.0.1 port: stateless (`HAIP_MCP_SESSIONS=0`; 2026-07-28
requests are served so with sessions on too) and with MCP sessions (the
default, `HAIP_MCP_SESSIONS=1`). For each, warms it up, reads its VmRSS, puts N
`book_table` calls in the state between question and answer, reads VmRSS
again, and prints the difference per call. Only 127.0.0.1 is contacted;
everything is bounded in count and time.

    python3 bench/asking_memory.py target/release/examples/quickstart [N]
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

DEADLINE = 120  # seconds for the whole measurement of one mode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def http(port, body, headers=(), keep=False):
    """One POST /mcp on a new connection; the status, headers and either the
    whole body (JSON) or, with `keep`, the open stream (SSE)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    head = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(data)}",
    ] + [f"{k}: {v}" for k, v in headers]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    hdrs = {}
    while True:
        line = (await reader.readline()).decode().strip()
        if not line:
            break
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if keep:
        return status, hdrs, reader, writer
    if "content-length" in hdrs:
        payload = await reader.readexactly(int(hdrs["content-length"]))
    else:
        payload = await read_chunked(reader)
    writer.close()
    return status, hdrs, payload


async def read_chunked(reader):
    out = b""
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            return out
        out += await reader.readexactly(size)
        await reader.readline()


def modern(method, params, i):
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


async def stateless_round(port, i):
    body = modern("tools/call", {"name": "book_table", "arguments": {"restaurant": f"R{i}"}}, i)
    status, _, payload = await http(
        port, body, [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "book_table")]
    )
    text = payload.decode()
    if text.lstrip().startswith("{"):
        message = json.loads(text)
    else:
        # SSE: the log line first, the response last.
        data = [l[5:].strip() for l in text.splitlines() if l.startswith("data:") and l[5:].strip()]
        message = json.loads(data[-1])
    result = message["result"]
    assert status == 200 and result["resultType"] == "input_required", payload[:300]


async def waiting_session_call(port, i):
    """A 2025-11-25 session whose `book_table` call waits for its answer;
    returns the open stream (kept open: the call waits)."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "asking-memory", "version": "1"},
        },
    }
    status, hdrs, reader, writer = await http(port, init, keep=True)
    assert status == 200, status
    session = hdrs["mcp-session-id"]
    await reader.read(65536)
    writer.close()
    common = [("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-11-25")]
    status, _, _ = await http(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, common)
    assert status in (200, 202), status
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "book_table", "arguments": {"restaurant": f"R{i}"}}}
    status, _, reader, writer = await http(port, call, common, keep=True)
    assert status == 200, status
    seen = b""
    while b"elicitation/create" not in seen:
        chunk = await reader.read(65536)
        if not chunk:
            raise RuntimeError("the stream ended before the question")
        seen += chunk
    return reader, writer


async def measure(binary, n, sessions):
    port = free_port()
    env = dict(os.environ, HAIP_ADDR=f"127.0.0.1:{port}", HAIP_LOG="error")
    env["HAIP_MCP_SESSIONS"] = "1" if sessions else "0"
    server = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        held = []
        # Warm up: the same work, then let it go.
        if sessions:
            for i in range(50):
                held.append(await waiting_session_call(port, i))
            for _, w in held:
                w.close()
            held.clear()
        else:
            await asyncio.gather(*(stateless_round(port, i) for i in range(200)))
        await asyncio.sleep(2)
        before = rss_kib(server.pid)
        if sessions:
            for batch in range(0, n, 50):
                held += await asyncio.gather(
                    *(waiting_session_call(port, i) for i in range(batch, min(n, batch + 50)))
                )
        else:
            for batch in range(0, n, 100):
                await asyncio.gather(*(stateless_round(port, i) for i in range(batch, min(n, batch + 100))))
        await asyncio.sleep(2)
        after = rss_kib(server.pid)
        for _, w in held:
            w.close()
        return before, after
    finally:
        server.kill()
        server.wait()


async def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    rows = []
    for sessions in (False, True):
        before, after = await asyncio.wait_for(measure(binary, n, sessions), DEADLINE)
        per_call = (after - before) * 1024 / n
        rows.append((sessions, before, after, per_call))
    print(f"| `/mcp` | {n} calls between question and answer | RSS before | RSS after | per call |")
    print("|---|---|---|---|---|")
    for sessions, before, after, per_call in rows:
        mode = "sessions (default, 2025-11-25 clients), the calls wait in the server" if sessions \
            else "stateless (2026-07-28 rounds), each call answered `input_required`"
        print(f"| {mode} | {n} | {before / 1024:.1f} MiB | {after / 1024:.1f} MiB | {per_call / 1024:.1f} KiB |")


if __name__ == "__main__":
    asyncio.run(main())

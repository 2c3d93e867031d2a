#!/usr/bin/env python3
"""Writes RELIABILITY.md (to standard output) from what bench/reliability.sh collected.

    python3 bench/reliability.py target/reliability-results > RELIABILITY.md

Also the script's sampler: prints one JSON line per sample of a process's
VmRSS, VmHWM (KiB) and open file descriptors, every INTERVAL seconds, for at
most MAX_SECONDS or until the process ends:

    python3 bench/reliability.py --sample PID INTERVAL MAX_SECONDS

Standard library only.
"""

import json
import math
import os
import sys
import time

ATTACKS = [
    ("1", "Flood, never read",
     "3 WebSocket clients send `echo` calls with 900 KB messages as fast as they can for 30 s and never read."),
    ("2", "Slow and absurd POST bodies",
     "With an SSE session open: (a) a POST to `/haip/message` whose 1000-byte body trickles at 1 byte/s;"
     " (b) 200 POSTs announcing `Content-Length: 10485760` that then send nothing; (c) `Content-Length:"
     " 99999999999999` with no body. Afterwards a PING is POSTed and its PONG looked for on the stream."),
    ("3", "Huge violation lists, huge results",
     "(a) `create_user` with 125 000 unknown params (≈1 MB), once beside valid fields and once alone;"
     " (b) `blob` results of 3, 10 and 20 MiB, one at a time; PING→PONG afterwards."),
    ("4", "Replay, resumption, batched POST",
     "A client that reads everything: (a) 5000 PINGs one by one, then `REPLAY_REQUEST {\"from_seq\":\"1\"}`;"
     " (b) 5000 PINGs, then a second client resumes the session with `last_rx_seq` 1 while the first is"
     " connected, then vanishes, and a third resumes again; (c) one upstream POST of a JSON array of"
     " 5000 PINGs to an SSE session."),
    ("5", "~1 MB params, continuously",
     "4 clients × 4 calls in flight for 20 s: `create_user` with a 1 000 000-character username, or with"
     " 60 000 unknown keys (≈1 MB), reading every reply."),
    ("6", "Silent connections",
     "10 050 WebSocket connections (64 opening at a time, 10 s each, at most 120 s in all) that send"
     " nothing, held 5 s, then closed."),
    ("7", "Replay windows of vanished sessions",
     "400 sessions (16 at a time) each exchange ~1 MiB of PINGs/PONGs with 2 KB nonces, then drop"
     " the TCP connection without a WebSocket close; `/stats` sampled every 250 ms."),
    ("8", "Small ones",
     "(a) `bin_len` 99 999 999 without `payload.data`; (b) `bin_len` 10, then a text PING instead of the"
     " binary frame; (c) `bin_len` 2⁶⁴−1, and FLOW_UPDATE with `add_messages`/`add_bytes` 2⁶⁴−1 twice, then"
     " PING; (d) raw frames after a hand-made handshake: invalid UTF-8 in a text frame, reserved opcode"
     " 0x3, RSV bits set; (e) attack 1's traffic for 10 s, but read, then stopped."),
]

EXPECTED = {
    "1": "each client's sends stall once about 4 MiB of replies wait for it (half of `max_outbound_bytes`,"
         " TCP back-pressure); no close before `idle_timeout` (5 min, 1001 `idle`); RSS stays small.",
    "2": "(a) `408` after about 10 s and the connection closed; (b) about 12 bodies fit the 128 MiB"
         " `max_inflight_body_bytes` and get `408` after about 10 s, the rest `503` with `Retry-After` at once;"
         " (c) `413` at once; the stream unaffected.",
    "3": "(a) `TOOL_DONE ERROR INVALID_PARAMS` with at most 20 details and `total` (or `total_at_least`), a small"
         " reply, the connection open; (b) `OK` for 3 and 10 MiB, `ERROR RESULT_TOO_LARGE` with `details {size,"
         " limit}` for 20 MiB; exactly one `TOOL_DONE` per call.",
    "4": "(a) every kept envelope, ascending, byte-identical; (b) the old connection closed 1000, the ~5000"
         " missed envelopes, then a `HAI` with `last_rx_seq`, both times; (c) `200 {\"status\":\"ok\"}` and 5000"
         " PONGs on the stream.",
    "5": "every call answered `INVALID_PARAMS` (params > 64 KiB are validated off the session task, calls beyond"
         " the validators wait `QUEUED`); the canary's p99 ≤ 100 ms.",
    "6": "`max_sessions` (10 000, the canary included) get a `HAI`, the rest close 1013; the canary keeps working.",
    "7": "`/stats` `replayBytes` ≤ 256 MiB (`replay_budget_bytes`; detached sessions evicted oldest first); RSS"
         " well under 512 MiB.",
    "8": "(a) `ERROR MESSAGE_TOO_LARGE`, close 1009; (b) `ERROR BINARY_FRAME_ERROR {\"reason\":\"missing binary"
         " frame\"}`, then the PING answered; (c) no crash, the connection usable; (d) close 1007, then 1002 twice;"
         " (e) every call answered, RSS back down 10 s later.",
}

# The /mcp door: (mode, title, what it does), in the order the script runs them.
MCP_ATTACKS = [
    ("mcp-stalled-bodies", "Stalled bodies",
     "600 POSTs at once announcing `Content-Length: 10485760` (over the 1 MiB `max_message_bytes`), each"
     " sending all but 1 KiB of an `echo` call as fast as it can, then 1 byte/s; then 600 at once announcing"
     " 1 048 000 bytes (within it) that send all but 100 of them, then 1 byte/s."),
    ("mcp-stall", "One stalled body of each kind",
     "Four POSTs at once: a 1000-byte body trickling 1 byte/s; `Content-Length: 1000` and nothing after the"
     " headers; the same with `Expect: 100-continue`; `Transfer-Encoding: chunked` and no chunk."),
    ("mcp-big-params", "Arrays of millions of zeros",
     "(a) an `echo` `tools/call` of 10 MB whose arguments hold a 5 000 000-element `[0,0,…]` beside the"
     " message, once, then 4 at once; (b) the same shape at 1 000 108 bytes (500 000 zeros, under 1 MiB;"
     " `echo`'s schema is open), 4 at once, then continuously from 4 keep-alive connections for 15 s,"
     " reading every answer."),
    ("mcp-unread-answers", "Answers never read",
     "100 connections, each with a 4 KiB receive buffer, pipeline 4 `echo` calls with a 1 040 000-character"
     " message (~2 MiB answers: text and `structuredContent`) and read nothing; `/stats` sampled every"
     " 500 ms for up to 40 s; then each connection is read, to see whether the server closed it. (On"
     " loopback the kernel takes about 1 MiB of a connection's answers: one unread answer alone would"
     " leave the server holding nothing.)"),
    ("mcp-progress-token", "Progress tokens",
     "20 `echo` calls at once with a 9 MB `_meta.progressToken`; 20 with a 300-byte one; 20 `process_file`"
     " calls (`{\"filename\":\"a.txt\",\"operation\":\"count\"}`: 1 s, 6 progress reports) with a 200-byte one, left"
     " unread for 5 s, then read."),
    ("mcp-origin", "Browser origins",
     "An `echo` call with `Origin: http://evil.example`, with `Origin: null`, with `Origin: http://localhost:6274`"
     " and with no `Origin`; the canary paused meanwhile, so that `/stats` `toolExecutions.total` counts"
     " only these."),
    ("mcp-log-flood", "1 MB names",
     "From 4 keep-alive connections: 100 requests whose method name has 1 000 000 characters; 100"
     " `tools/call`s of a tool whose name has 1 000 000 characters; 100 `initialize` requests whose"
     " `clientInfo.name` has 1 000 000 characters. The server's log is measured."),
    ("mcp-errors", "Malformed messages",
     "One request each: invalid JSON, an empty body, a batch, a number, a string, no `jsonrpc`, an id of"
     " 300 bytes, a method of 1000 bytes, `tools/call` with `arguments` a number, a string and an array,"
     " `logging/setLevel` with level `loud`, an unknown tool, `Content-Type: text/plain`,"
     " `Accept: application/json` alone, `Content-Length: abc`; and a valid `ping`."),
]

MCP_EXPECTED = {
    "mcp-stalled-bodies": "the 10 MiB ones `413` at once, connection closed; of the others, 128 fit the 128 MiB"
        " `max_inflight_body_bytes` (declared lengths are reserved up front) and get `408` after 30 s"
        " (`body_read_timeout`; their average rate stays above 1 KiB/s), connection closed; the rest `503` with"
        " `Retry-After` at once, connection closed.",
    "mcp-stall": "`408` after about 10 s each (less than 1 KiB/s after the first 10 s), connection closed; the"
        " third gets a `100 Continue` first, once the server starts reading its body.",
    "mcp-big-params": "(a) `413` at once; (b) every call answered `200` with `echo`'s result: large messages are"
        " checked and parsed off the runtime's workers, `max(1, cores / 2)` at a time, each counted in"
        " `max_inflight_body_bytes` at up to 17 times its length; the canary's p99 ≤ 100 ms.",
    "mcp-unread-answers": "the server holds about one answer per connection in `outboundBytes` (about 100 MiB,"
        " under the 128 MiB `max_inflight_answer_bytes`), and closes each connection once its client has taken"
        " nothing for 30 s (`write_timeout`; after 1 s were the server over its budget), counted in"
        " `connectionsClosed.tooSlow`; `outboundBytes` back to 0.",
    "mcp-progress-token": "`413` (over 1 MiB); `200` with JSON-RPC `-32602` (a token is repeated in every"
        " progress notification: at most 256 bytes); the 200-byte ones answered as SSE, progress notifications"
        " then the result, with nothing held by the server while they wait.",
    "mcp-origin": "`403` with a JSON-RPC error and the tool not run, twice; `200` with the result and the tool run,"
        " twice (a loopback origin on a loopback `Host`; no origin: not a browser).",
    "mcp-log-flood": "`-32601` and `-32602` quoting at most 40 characters of the name (small answers);"
        " `initialize` answered; at most a short line per request in the log, never a name (under 1 MB in all"
        " for the 300 MB of names).",
    "mcp-errors": "`400` `-32700` for what is not JSON; `400` `-32600` for what is not one JSON-RPC request;"
        " `200` `-32601` for the long method; `200` `-32602` for the bad params, level and unknown tool; `415`,"
        " `406` and `400` for the HTTP ones; `200` and a result for the ping.",
}

RSS_LIMIT_MIB = 512
# The steady state starts one minute after `replay_window_time` (5 min): the
# first walked-away sessions are parked a few seconds into the soak and expire
# 5 min later, and the level they leave takes a little longer to settle.
# Fixed before measuring (a run at 616fc53 showed the tail of the climb still
# inside a window that started at 5 min).
STEADY_AFTER_MIN = 6.0
CANARY_P99_LIMIT_MS = 100


def sample(pid, interval, max_seconds):
    start = time.monotonic()
    next_at = start
    while time.monotonic() - start < max_seconds:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            break
        fields = {}
        for line in status.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0])
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            fds = None
        print(json.dumps({
            "t": round(time.monotonic() - start, 3),
            "rss_kib": fields.get("VmRSS"),
            "hwm_kib": fields.get("VmHWM"),
            "fds": fds,
        }), flush=True)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def load(directory, name):
    """The JSON in DIRECTORY/NAME, or None."""
    try:
        with open(os.path.join(directory, name)) as f:
            text = f.read().strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def load_text(directory, name):
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read().strip()
    except OSError:
        return ""


def load_samples(directory, name):
    samples = []
    try:
        with open(os.path.join(directory, name)) as f:
            for line in f:
                try:
                    samples.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return samples


def mib(kib):
    return None if kib is None else kib / 1024


def fmt(value, digits=1):
    if value is None:
        return "—"
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def t_quantile_975(df):
    """The 97.5 % quantile of Student's t with DF degrees of freedom."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
             9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}
    if df in table:
        return table[df]
    z = 1.959964
    # Cornish-Fisher expansion; good to three decimals from df = 10 on.
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def slope(points):
    """Least-squares slope of (x, y) points with its 95 % confidence interval, or None."""
    n = len(points)
    if n < 3:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    b = sxy / sxx
    a = my - b * mx
    sse = sum((y - a - b * x) ** 2 for x, y in points)
    se = math.sqrt(sse / (n - 2) / sxx)
    half = t_quantile_975(n - 2) * se
    return {"slope": b, "low": b - half, "high": b + half, "n": n, "zero_inside": b - half <= 0 <= b + half}


def describe_slope(s, unit):
    if s is None:
        return "not enough samples"
    verdict = "indistinguishable from zero" if s["zero_inside"] else "**distinguishable from zero**"
    return (f"{s['slope']:+.1f} {unit} (95 % CI {s['low']:+.1f} … {s['high']:+.1f}, {s['n']} samples):"
            f" {verdict}")


def canary_cell(c):
    if not c:
        return "—"
    if c.get("error"):
        return f"canary failed: {c['error']}"
    cell = f"{fmt(c.get('p50_ms'), 2)} / {fmt(c.get('p99_ms'), 2)}"
    extra = []
    if c.get("failed"):
        extra.append(f"**{c['failed']} failed**")
    if c.get("reconnects"):
        extra.append(f"{c['reconnects']} reconnects")
    if c.get("calls") is not None:
        extra.insert(0, f"{c['calls']} calls")
    if extra:
        cell += " (" + ", ".join(extra) + ")"
    return cell


def cell_text(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--sample":
        sample(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
        return
    directory = sys.argv[1] if len(sys.argv) > 1 else "target/reliability-results"
    meta = load(directory, "meta.json") or {}
    only = meta.get("only", "1,2,3,4,5,6,7,8,soak").split(",")

    mcp = mcp_selected(meta, only)
    haip_ran = any(x in only for x in ("1", "2", "3", "4", "5", "6", "7", "8", "soak"))

    out = []
    w = out.append
    w("# Reliability")
    w("")
    if haip_ran:
        w("How the `haip` server holds up against hostile and slow clients. The server is the quickstart")
        w("(`examples/hostile/`, `serve` mode: built-in and annotated tools plus a `blob` tool that returns")
        w("`{\"data\": \"<n × 'x'>\"}`) with **default settings**; the attacks are `examples/hostile/` too, raw")
        w("WebSocket and raw TCP clients on loopback. Every attack gets a fresh server process.")
        if mcp:
            w("The `/mcp` door is measured the same way, [at the end](#the-mcp-door).")
    else:
        w("How the `haip` server's `/mcp` door (MCP Streamable HTTP) holds up against hostile and slow")
        w("clients. The server is the quickstart (`examples/quickstart.rs`) with **default settings**; the")
        w("attacks are `examples/hostile/` (`mcp-*` modes), raw HTTP/1.1 clients on loopback. Every attack")
        w("gets a fresh server process. The HAIP attacks and the soak were not run.")
    w("Generated by `bench/reliability.sh`; do not edit by hand.")
    w("")
    w("| | |")
    w("|---|---|")
    w(f"| Machine | {meta.get('nproc', '?')} CPUs, {meta.get('cpu_model', '?')}, "
      f"{fmt(mib(mib(meta.get('memory_kib'))), 1)} GiB, {meta.get('kernel', '?')} |")
    w(f"| Pinning | {meta.get('pinning', '?')} |")
    w(f"| Date | {meta.get('date', '?')} |")
    w(f"| Toolchain | {meta.get('rustc', '?')}, release profile, mimalloc |")
    w(f"| Commit | {meta.get('commit', '?')} |")
    w(f"| Command | `{meta.get('command', 'bash bench/reliability.sh')}` |")
    if not mcp:
        w("| Settings | defaults (docs/protocol.md §18, §18.1); `HAIP_LOG=warn` |")
    elif haip_ran:
        w("| Settings | defaults (docs/protocol.md §18, §18.1); `HAIP_LOG=warn` for the HAIP attacks; for `/mcp`, the"
          " quickstart's own logging (`info`, `HAIP_LOG` unset) |")
    else:
        w("| Settings | defaults (docs/protocol.md §18, §18.1); the quickstart's own logging (`info`, `HAIP_LOG` unset) |")
    w(f"| Load average (1, 5, 15 min) | {meta.get('loadavg_before', '?')} before, {meta.get('loadavg_after', '?')} after |")
    w("")

    if haip_ran:
        haip_sections(w, directory, meta, only)
    if mcp:
        mcp_sections(w, directory, mcp)
    print("\n".join(out))


def haip_sections(w, directory, meta, only):
    """The HAIP attacks, their deviations, and the soak."""
    rows = []
    problems = []
    for number, title, _ in ATTACKS:
        if number not in only:
            rows.append((number, title, None, None, None))
            continue
        report = load(directory, f"attack{number}.json")
        server = load(directory, f"attack{number}-server.json")
        samples = load_samples(directory, f"attack{number}-samples.jsonl")
        if report is None:
            err = load_text(directory, f"attack{number}.err")
            problems.append(f"attack {number}: no report" + (f" — `{err[:300]}`" if err else ""))
        elif report.get("error"):
            problems.append(f"attack {number}: the attack tool failed: `{report['error']}`")
        rows.append((number, title, report, server, samples))

    # Targets first.
    verdicts = []
    survived_all = True
    worst_peak = None
    lost_total = 0
    lost_known = True
    canary_failed = 0
    worst_p99 = None
    for number, title, report, server, samples in rows:
        if report is None and server is None:
            continue
        survived = bool(server and server.get("alive") and server.get("health_ok"))
        survived_all = survived_all and survived
        peak = peak_kib(server, samples)
        if peak is not None:
            worst_peak = peak if worst_peak is None else max(worst_peak, peak)
        if report:
            lost = report.get("lost_tool_dones")
            if isinstance(lost, int):
                lost_total += lost
            c = report.get("canary") or {}
            canary_failed += c.get("failed") or 0
            p99 = c.get("p99_ms")
            if p99 is not None:
                worst_p99 = p99 if worst_p99 is None else max(worst_p99, p99)
            elif "canary" not in report or c.get("error"):
                lost_known = False
    soak = load(directory, "soak.json") if "soak" in only else None
    soak_samples = load_samples(directory, "soak-samples.jsonl") if "soak" in only else []
    soak_server = load(directory, "soak-server.json") if "soak" in only else None
    if soak:
        if isinstance(soak.get("lost_tool_dones"), int):
            lost_total += soak["lost_tool_dones"]
        canary_failed += (soak.get("canary") or {}).get("failed") or 0
    # Only the samples taken while the soak's calls ran (the sampler starts just
    # before it; at the end the clients drain and close).
    soak_end = meta.get("soak_seconds") or (soak or {}).get("seconds") or 0
    if soak:
        soak_samples = [x for x in soak_samples if x.get("t") is not None and x["t"] < soak_end - 1]
    rss_points = [(s["t"] / 60, s["rss_kib"]) for s in soak_samples if s.get("rss_kib") is not None]
    fd_points = [(s["t"] / 60, s["fds"]) for s in soak_samples if s.get("fds") is not None]
    # Steady state: from one minute after the first replay_window_time (5 min),
    # once the sessions walked away from at the start have begun to expire; in
    # a shorter soak, its second half.
    end_min = rss_points[-1][0] if rss_points else 0
    warm_min = STEADY_AFTER_MIN if end_min >= 2 * STEADY_AFTER_MIN * 0.9 else end_min / 2
    steady_rss = [p for p in rss_points if p[0] >= warm_min]
    steady_fd = [p for p in fd_points if p[0] >= warm_min]
    rss_slope = slope(steady_rss)
    fd_slope = slope(steady_fd)
    rss_slope_all = slope(rss_points)
    fd_slope_all = slope(fd_points)

    w("## Targets")
    w("")
    w("| Target | Measured | |")
    w("|---|---|---|")

    def target(name, measured, met):
        verdicts.append((name, met))
        verdict = "not measured" if met is None else ("met" if met else "**missed**")
        w(f"| {name} | {measured} | {verdict} |")

    ran = [r for r in rows if r[2] is not None or r[3] is not None]
    target("Every attack survived (process alive, `/health` 200), default settings",
           f"{sum(1 for r in ran if r[3] and r[3].get('alive') and r[3].get('health_ok'))} of {len(ran)}",
           survived_all if ran else None)
    target(f"Peak RSS ≤ {RSS_LIMIT_MIB} MiB in the worst row", f"{fmt(mib(worst_peak))} MiB",
           None if worst_peak is None else mib(worst_peak) <= RSS_LIMIT_MIB)
    target("No lost `TOOL_DONE` (attackers that read, the soak, the canaries)",
           f"{lost_total} lost; {canary_failed} canary calls without a `TOOL_DONE` within 5 s",
           (lost_total == 0 and canary_failed == 0) if (ran or soak) and lost_known else None)
    target(f"Canary p99 ≤ {CANARY_P99_LIMIT_MS} ms under each attack", f"worst {fmt(worst_p99, 2)} ms",
           None if worst_p99 is None else worst_p99 <= CANARY_P99_LIMIT_MS)
    window = f"from {warm_min * 60:.0f} s on" if rss_points else "soak not run"
    target(f"Soak RSS slope indistinguishable from zero (steady state, {window})",
           describe_slope(rss_slope, "KiB/min") + f"; whole soak: {describe_slope(rss_slope_all, 'KiB/min')}",
           None if rss_slope is None else rss_slope["zero_inside"])
    target(f"Soak open-fd slope indistinguishable from zero (steady state, {window})",
           describe_slope(fd_slope, "fds/min") + f"; whole soak: {describe_slope(fd_slope_all, 'fds/min')}",
           None if fd_slope is None else fd_slope["zero_inside"])
    w("")
    if problems:
        w("**Problems during the run:**")
        w("")
        for p in problems:
            w(f"- {p}")
        w("")

    w("## Attacks")
    w("")
    w("RSS is the server's: *before* once `/health` answers, *peak* its `VmHWM` (the high-water mark,")
    w("which a 100 ms sampler of `VmRSS` confirms), *after* 10 s after the attacker exited. The canary is a")
    w("separate client, connected before the attack starts, calling `echo` one call at a time every")
    w("20 ms; its latency is from sending `TOOL_CALL` to receiving the `TOOL_DONE`. *Lost* counts accepted")
    w("calls of the attacker that never got their `TOOL_DONE` (— where the attacker never reads).")
    w("")
    w("| # | Attack | Survived | What the attacker got | RSS MiB before / peak / 10 s after | Canary p50 / p99 ms | Lost `TOOL_DONE`s |")
    w("|---|---|---|---|---|---|---:|")
    for number, title, report, server, samples in rows:
        if report is None and server is None:
            w(f"| {number} | {title} | not run | | | | |")
            continue
        survived = "yes" if server and server.get("alive") and server.get("health_ok") else "**no**"
        got = report.get("attacker_got") or report.get("error") or "—" if report else "no report"
        before = mib(server.get("rss_before_kib")) if server else None
        after = mib(server.get("rss_after_kib")) if server else None
        peak = mib(peak_kib(server, samples))
        lost = report.get("lost_tool_dones") if report else None
        lost_cell = "—" if lost is None else str(lost)
        w(f"| {number} | {title} | {survived} | {cell_text(got)} | {fmt(before)} / {fmt(peak)} / {fmt(after)}"
          f" | {canary_cell(report.get('canary') if report else None)} | {lost_cell} |")
    w("")
    w("What each attack does:")
    w("")
    for number, title, text in ATTACKS:
        w(f"{number}. **{title}.** {text} *Expected:* {EXPECTED[number]}")
    w("")
    w("## Deviations from the expected behaviour")
    w("")
    w("Checked by `bench/reliability.py` against the raw results (docs/protocol.md §18.1 and the expectations above):")
    w("")
    deviations = []
    for number, title, report, server, samples in rows:
        if report is None and server is None:
            continue
        probe = load(directory, f"attack{number}-canary-after.json")
        for d in check_attack(number, report or {}, server, samples, probe):
            deviations.append(f"attack {number} ({title}): {d}")
    if soak is not None:
        for d in check_common(soak, soak_server, soak_samples, canary_limit=None):
            deviations.append(f"soak: {d}")
    if deviations:
        for d in deviations:
            w(f"- {d}")
    else:
        w("None: every attack that ran behaved as expected.")
    w("")
    w("What the server still held: `/stats` 1 s after each attack (the canary still connected), and")
    w("its RSS once more after the 10 s of quiet plus 5 s of canary calls. The RSS *after* column above")
    w("is read from an idle server: mimalloc returns freed pages to the system lazily, when the process")
    w("allocates again, so a little traffic brings an idle server's RSS down to what it really holds.")
    w("Detached sessions (closed or vanished connections) are kept with their replay windows for")
    w("`replay_window_time`, 5 min (docs/protocol.md §11.3), within `replay_budget_bytes`.")
    w("")
    w("| # | replayBytes MiB | detachedSessions | outboundBytes | connections closed (too slow / idle / body timeout / per-peer cap) | RSS MiB after 10 s + 5 s of canary calls | those canary calls |")
    w("|---|---:|---:|---:|---|---:|---|")
    for number, title, report, server, samples in rows:
        st = (report or {}).get("stats_after")
        if not st:
            continue
        cc = st.get("connectionsClosed") or {}
        rb = st.get("replayBytes")
        after_traffic = mib((server or {}).get("rss_after_traffic_kib"))
        probe = load(directory, f"attack{number}-canary-after.json") or {}
        pc = probe.get("canary") or {}
        probe_cell = (f"{pc.get('ok')} of {pc.get('calls')} OK, p99 {fmt(pc.get('p99_ms'), 2)} ms"
                      if pc.get("calls") is not None else "—")
        w(f"| {number} | {fmt(rb / 1048576 if isinstance(rb, (int, float)) else None)} | {st.get('detachedSessions', '—')}"
          f" | {st.get('outboundBytes', '—')} | {cc.get('tooSlow', '—')} / {cc.get('idle', '—')} /"
          f" {cc.get('bodyTimeout', '—')} / {cc.get('perPeerCap', '—')} | {fmt(after_traffic)} | {probe_cell} |")
    w("")
    w("Raw results, with every count and the server's `/stats` where taken, are in")
    w("`target/reliability-results/attackN.json`; the RSS and fd samples in `attackN-samples.jsonl`.")
    w("")

    # Soak.
    w("## Soak")
    w("")
    if "soak" not in only:
        w("Not run.")
        w("")
    elif soak is None:
        err = load_text(directory, "soak.err")
        w("No soak report" + (f": `{err[:300]}`" if err else "."))
        w("")
    else:
        bench = load(directory, "soak-bench.json") or {}
        workers = soak.get("workers")
        turn = f"{90 / workers:.1f} s" if isinstance(workers, int) and workers > 0 else "90 s / clients"
        w(f"A fresh server measured with `haip bench` (50 connections × 8 calls in flight, 5 s):"
          f" {fmt(bench.get('calls_per_second'))} `echo` calls/s. Another fresh server then got half of"
          f" that, {fmt(soak.get('target_rate'))} calls/s (achieved {fmt(soak.get('achieved_rate'))}), for"
          f" {fmt(soak.get('seconds'), 0)} s from {soak.get('workers')} client sessions: mostly `echo`, about"
          " 20 `process_file` calls a second (1 s each) of which half are cancelled (`TOOL_CANCEL`) after"
          " a random 0–1.2 s, every client vanishing without a close every 9 s (± 1 s, on a fixed schedule"
          " staggered across the clients) and reconnecting after up to 0.5 s: it resumes (`HAI` with"
          " `last_rx_seq`) and expects the missed envelopes, the `TOOL_DONE`s of calls that ran meanwhile"
          " among them, except on every tenth disconnect, when it walks away and starts a new session; the"
          f" clients take turns, so one session is walked away from every {turn}. Each client never has"
          " more than 48 calls out.")
        w("")
        c = soak.get("canary") or {}
        w("| | |")
        w("|---|---|")
        w(f"| Calls accepted | {soak.get('accepted_calls')} ({soak.get('undelivered_calls', 0)} more were sent but"
          " never processed before a disconnect, as the resumed `last_rx_seq` showed) |")
        w(f"| `TOOL_DONE`s received | {soak.get('tool_dones')}, by status: "
          + ", ".join(f"{v} {k.replace('TOOL_DONE ', '')}" for k, v in (soak.get("statuses") or {}).items()) + " |")
        w(f"| Lost `TOOL_DONE`s | **{soak.get('lost_tool_dones')}** ({soak.get('lost_to_failed_resume', 0)} in failed"
          f" resumptions); duplicates {soak.get('duplicate_tool_dones')} |")
        w(f"| Left to walked-away sessions | {soak.get('abandoned_calls')} calls in {soak.get('abandons')} sessions |")
        w(f"| Cancels sent | {soak.get('cancels_sent')} (of {soak.get('slow_calls')} `process_file` calls) |")
        w(f"| Disconnects / resumptions / resume failures | {soak.get('disconnects')} / {soak.get('resumptions')}"
          f" / {soak.get('resume_failures')}; {soak.get('outstanding_at_disconnect', '?')} calls were outstanding at"
          f" the disconnects; {soak.get('replayed_envelopes')} envelopes replayed on resumption, among them"
          f" {soak.get('tool_dones_replayed', '?')} `TOOL_DONE`s |")
        w(f"| Unexpected closes | {soak.get('unexpected_closes')} |")
        w(f"| Canary p50 / p99 ms | {canary_cell(c)} |")
        if soak_server:
            w(f"| Server RSS before / peak / 10 s after (MiB) | {fmt(mib(soak_server.get('rss_before_kib')))} /"
              f" {fmt(mib(peak_kib(soak_server, soak_samples)))} / {fmt(mib(soak_server.get('rss_after_kib')))};"
              f" survived: {'yes' if soak_server.get('alive') and soak_server.get('health_ok') else '**no**'} |")
        w("")
        if soak.get("first_problems"):
            w("First problems the soak clients noted:")
            w("")
            for p in soak["first_problems"]:
                w(f"- `{cell_text(p)}`")
            w("")
        w("Server samples (every 5 s; shown about every minute), with the server's `/stats` taken by the")
        w("soak client at the nearest time:")
        w("")
        w("| t (s) | RSS MiB | open fds | replayBytes MiB | detachedSessions | activeConnections |")
        w("|---:|---:|---:|---:|---:|---:|")
        stats_samples = soak.get("stats_samples") or []
        shown = pick_every(soak_samples, 60)
        for s in shown:
            st = nearest(stats_samples, s["t"])
            rb = st.get("replayBytes") if st else None
            w(f"| {s['t']:.0f} | {fmt(mib(s.get('rss_kib')))} | {s.get('fds', '—')} |"
              f" {fmt(rb / 1048576 if isinstance(rb, (int, float)) else None)} |"
              f" {st.get('detachedSessions', '—') if st else '—'} | {st.get('activeConnections', '—') if st else '—'} |")
        w("")
        if rss_points:
            rss = [y for _, y in rss_points]
            fds = [y for _, y in fd_points]
            w(f"RSS over {len(rss)} samples: min {fmt(mib(min(rss)))}, max {fmt(mib(max(rss)))}, mean"
              f" {fmt(mib(sum(rss) / len(rss)))} MiB. Open fds: min {min(fds) if fds else '—'}, max"
              f" {max(fds) if fds else '—'}.")
            w("")
        w("Least-squares slopes (95 % confidence intervals):")
        w("")
        w("| Window | RSS | open fds |")
        w("|---|---|---|")
        w(f"| whole soak | {describe_slope(rss_slope_all, 'KiB/min')} | {describe_slope(fd_slope_all, 'fds/min')} |")
        w(f"| steady state, {window} | {describe_slope(rss_slope, 'KiB/min')} | {describe_slope(fd_slope, 'fds/min')} |")
        w("")
        # What the server says it holds, from the soak client's /stats samples.
        held = [x for x in stats_samples if isinstance(x.get("replayBytes"), (int, float)) and x["t"] / 60 >= warm_min
                and x["t"] < soak_end - 1]
        replay_pts = [(x["t"] / 60, x["replayBytes"] / 1024) for x in held]
        detached_pts = [(x["t"] / 60, x["detachedSessions"]) for x in held if isinstance(x.get("detachedSessions"), int)]
        rest_pts = []
        for x in held:
            near = min(soak_samples, key=lambda y: abs(y["t"] - x["t"])) if soak_samples else None
            if near and near.get("rss_kib") is not None and abs(near["t"] - x["t"]) <= 2.5:
                rest_pts.append((x["t"] / 60, near["rss_kib"] - x["replayBytes"] / 1024))
        w(f"In the same steady-state window, what the server says it holds (`/stats`, every 5 s):")
        w("")
        w(f"- `replayBytes`: {describe_slope(slope(replay_pts), 'KiB/min')}")
        w(f"- `detachedSessions`: {describe_slope(slope(detached_pts), 'sessions/min')}")
        w(f"- RSS minus `replayBytes`: {describe_slope(slope(rest_pts), 'KiB/min')}")
        w("")
        w("Why a steady-state window: a session that walks away keeps its replay window (up to about 1 MiB")
        w("here) for `replay_window_time`, 5 min (docs/protocol.md §11.3), by design, so memory climbs during the")
        w("first 5 minutes and levels off once the first of them expire (a few seconds later, and a little")
        w("longer to settle: the window starts at 6 min); a leak would keep climbing after that. A soak")
        w("shorter than 12 minutes has no such plateau and uses its second half instead, which still")
        w("contains the climb. The intervals assume independent samples; consecutive samples are")
        w("correlated, so they are, if anything, too narrow.")
        w("")
        w("How to read a rising steady-state RSS: the walk-aways are regular, so once the first parked")
        w("sessions expire the number of them (`detachedSessions`) and their replay windows (`replayBytes`)")
        w("stay level. RSS can still step up: it tends to follow the *highest* level of live memory reached")
        w("so far, because the allocator keeps pages it once needed while the process stays busy. Flat")
        w("`replayBytes` and `detachedSessions` with an RSS that rises in steps point to that; a leak would")
        w("show as RSS minus `replayBytes` rising steadily and without steps, in longer soaks too.")
        w("")


def mcp_selected(meta, only):
    """The /mcp attacks the run selected, in the order they ran."""
    names = [n for n, _, _ in MCP_ATTACKS]
    if meta.get("mcp") is not None:
        chosen = [x for x in meta["mcp"].split(",") if x]
    else:
        chosen = [n for n in names if n in only or "mcp" in only]
    return [n for n in names if n in chosen]


def log_written(server):
    """Bytes the server logged while the attack ran, or None."""
    server = server or {}
    before, after = server.get("log_bytes_before"), server.get("log_bytes_after_attack")
    if isinstance(before, int) and isinstance(after, int):
        return after - before
    return None


def mcp_deadline_issues(name, r):
    """Connections the server held past its deadlines, as texts."""
    out = []
    if name == "mcp-stalled-bodies":
        for part, wait in (("over_limit", 12), ("within_limit", 38)):
            for code, v in ((r.get(part) or {}).get("statuses") or {}).items():
                if code == "none":
                    out.append(f"{v.get('count')} {part.replace('_', ' ')} bodies got no answer within {wait} s")
                    continue
                if code == "408" and (v.get("max_s") or 0) > 32:
                    out.append(f"`408` after up to {v['max_s']:.1f} s (`body_read_timeout` 30 s)")
                if v.get("connection_closed") != v.get("count"):
                    out.append(f"{part.replace('_', ' ')}: {v.get('count')} × {code}, only"
                               f" {v.get('connection_closed')} connections closed after it")
    elif name == "mcp-stall":
        for case, c in (r.get("cases") or {}).items():
            if c.get("status") != 408 or (c.get("after_s") or 99) > 12 or not c.get("connection_closed"):
                out.append(f"{case.replace('_', ' ')}: {c.get('status')} after {c.get('after_s')} s,"
                           f" closed: {c.get('connection_closed')}")
    elif name == "mcp-unread-answers":
        zero = r.get("outbound_zero_at_s")
        if zero is None or zero > 36:
            out.append(f"`outboundBytes` back under 64 KiB at {zero} s (expected by about 32 s:"
                       " `write_timeout` 30 s after the answers were made)")
        if r.get("ended_by_server") != r.get("connections"):
            out.append(f"{r.get('ended_by_server')} of {r.get('connections')} unread connections closed by the server")
    return out


def check_mcp(name, r, server, samples, probe):
    """Deviations of one /mcp attack from what is expected of it."""
    out = []
    if server is not None and not (server.get("alive") and server.get("health_ok")):
        out.append(f"the server did not survive (alive: {server.get('alive')}, /health 200: {server.get('health_ok')})")
    if not r:
        return out + ["no report"]
    if r.get("error"):
        return out + [f"the attack tool failed: {r['error']}"]
    peak = peak_kib(server, samples)
    if peak is not None and mib(peak) > RSS_LIMIT_MIB:
        out.append(f"peak RSS {mib(peak):.1f} MiB > {RSS_LIMIT_MIB} MiB")
    c = r.get("canary") or {}
    if c.get("error"):
        out.append(f"the canary failed: {c['error']}")
    if c.get("failed"):
        out.append(f"{c['failed']} canary calls got no `200` with a result within 5 s: {c.get('first_failures')}")
    if (c.get("p99_ms") or 0) > CANARY_P99_LIMIT_MS:
        slow = ", ".join(f"{x['ms']:.0f} ms at {x['at_s']:.2f} s" for x in c.get("slowest") or [])
        out.append(f"canary p99 {c['p99_ms']:.1f} ms > {CANARY_P99_LIMIT_MS} ms over {c.get('calls')} calls"
                   f" (slowest: {slow}; attack started at {r.get('attack_started_at_s', '?')} s)")
    pc = (probe or {}).get("canary") or {}
    if server and server.get("alive") and (pc.get("failed") or not pc.get("ok")):
        out.append(f"after the attack, the server did not answer every canary call: {pc or 'no report'}")
    refused, answered = r.get("refused_requests"), r.get("refused_answered")
    if isinstance(refused, int) and answered != refused:
        out.append(f"{answered} of {refused} refused requests got a clear 4xx/5xx or JSON-RPC error")
    if r.get("unanswered"):
        out.append(f"{r['unanswered']} requests got no answer")
    out += mcp_deadline_issues(name, r)

    def labels(statuses):
        return set((statuses or {}).keys())

    if name == "mcp-stalled-bodies":
        over = (r.get("over_limit") or {}).get("statuses") or {}
        if labels(over) != {"413"} or (over.get("413") or {}).get("max_s", 99) > 1:
            out.append(f"Content-Length 10 MiB: {over} (expected `413` at once)")
        under = (r.get("within_limit") or {}).get("statuses") or {}
        if labels(under) - {"408", "503"}:
            out.append(f"Content-Length 1 048 000: {under} (expected `408` and `503` only)")
        n408 = (under.get("408") or {}).get("count", 0)
        if not 120 <= n408 <= 128:
            out.append(f"{n408} bodies of 1 048 000 bytes admitted (expected about 128 = 128 MiB / 1 048 000 B)")
        if n408 and (under["408"].get("min_s") or 0) < 28:
            out.append(f"`408` after {under['408']['min_s']:.1f} s (expected 30 s, `body_read_timeout`)")
        b = under.get("503") or {}
        if b and (b.get("max_s", 99) > 1 or b.get("with_retry_after") != b.get("count")):
            out.append(f"`503`: {b} (expected at once, each with `Retry-After`)")
    elif name == "mcp-stall":
        ec = (r.get("cases") or {}).get("expect_continue") or {}
        if ec and ec.get("continue_after_s") is None:
            out.append("`Expect: 100-continue`: no `100 Continue` before the `408`")
    elif name == "mcp-big-params":
        over = r.get("over_limit") or {}
        for a in (over.get("one") or []) + (over.get("four_at_once") or []):
            if a.get("status") != 413 or (a.get("ms") or 0) > 1000:
                out.append(f"10 MB call: {a.get('label')} after {a.get('ms')} ms (expected `413` at once)")
        under = r.get("under_limit") or {}
        for a in under.get("four_at_once") or []:
            if a.get("label") != "200 result":
                out.append(f"~1 MB call, 4 at once: {a.get('label')} {a.get('message') or ''}")
        cont = under.get("continuous") or {}
        if labels(cont.get("statuses")) - {"200 result"} or not cont.get("answers"):
            out.append(f"~1 MB calls continuously: {cont.get('statuses')} {cont.get('failures') or ''}")
    elif name == "mcp-unread-answers":
        if not r.get("outbound_peak_bytes"):
            out.append("`/stats` `outboundBytes` never grew: the kernel took every answer, nothing was held")
        if (r.get("closed_too_slow") or 0) < (r.get("connections") or 0):
            out.append(f"{r.get('closed_too_slow')} of {r.get('connections')} connections closed as too slow")
    elif name == "mcp-progress-token":
        if labels((r.get("token_9mb") or {}).get("statuses")) != {"413 -32600"}:
            out.append(f"9 MB token: {(r.get('token_9mb') or {}).get('statuses')} (expected `413`)")
        if labels((r.get("token_300") or {}).get("statuses")) != {"200 -32602"}:
            out.append(f"300-byte token: {(r.get('token_300') or {}).get('statuses')} (expected `-32602`)")
        u = r.get("token_200_unread") or {}
        if labels(u.get("statuses")) != {"200 result (SSE)"} or not all(u.get("progress_notifications") or [0]):
            out.append(f"200-byte token on process_file: {u.get('statuses')}, progress"
                       f" notifications {u.get('progress_notifications')}")
    elif name == "mcp-origin":
        for case, v in (r.get("cases") or {}).items():
            if not v.get("as_expected"):
                a = v.get("answer") or {}
                out.append(f"Origin {v.get('origin')}: {a.get('label') or v.get('error')}, tool ran"
                           f" {v.get('tool_executions')}× (expected {v.get('expected_status')})")
        if not r.get("canary_paused"):
            out.append("the canary could not be paused: the tool counts may include its calls")
    elif name == "mcp-log-flood":
        expected = {"method_name": "200 -32601", "tool_name": "200 -32602", "initialize_client_name": "200 result"}
        for group, label in expected.items():
            g = (r.get("groups") or {}).get(group) or {}
            if labels(g.get("statuses")) != {label}:
                out.append(f"{group.replace('_', ' ')}: {g.get('statuses')} (expected `{label}`)")
            if (g.get("largest_answer_bytes") or 0) > 4096:
                out.append(f"{group.replace('_', ' ')}: an answer of {g['largest_answer_bytes']} bytes")
        logged = log_written(server)
        if logged is not None and logged >= 1_000_000:
            out.append(f"the server logged {logged} bytes (a 1 MB name may have reached the log)")
    elif name == "mcp-errors":
        for case in r.get("cases") or []:
            if not case.get("as_expected"):
                a = case.get("answer") or {}
                out.append(f"{case.get('case')}: {a.get('label') or case.get('error')}"
                           f" (expected {case.get('expected_status')} {case.get('expected_code') or ''})".rstrip())
    return out


def mcp_sections(w, directory, selected):
    """The `/mcp` door: targets, attacks, deviations, what the server held."""
    rows = []
    problems = []
    for name, title, _ in MCP_ATTACKS:
        if name not in selected:
            continue
        report = load(directory, f"{name}.json")
        server = load(directory, f"{name}-server.json")
        samples = load_samples(directory, f"{name}-samples.jsonl")
        probe = load(directory, f"{name}-canary-after.json")
        if report is None:
            err = load_text(directory, f"{name}.err")
            problems.append(f"{name}: no report" + (f" — `{err[:300]}`" if err else ""))
        elif report.get("error"):
            problems.append(f"{name}: the attack tool failed: `{report['error']}`")
        rows.append((name, title, report or {}, server, samples, probe))

    w("## The `/mcp` door")
    w("")
    w("The same server answers MCP Streamable HTTP at `/mcp` (feature `mcp`), on the HAIP port. Here")
    w("the server is the quickstart itself (`target/release/examples/quickstart`: built-in and annotated")
    w("tools, no `blob`) at **default settings** and with its default logging (`info`, `HAIP_LOG` unset),")
    w("except that `/mcp` serves every request on its own (`HAIP_MCP_SESSIONS=0`: each attack and canary")
    w("call is a plain POST, no `initialize`; the front door they meet is the same with sessions),")
    w("a fresh process per attack, pinned as above; the attacks are `examples/hostile/` `mcp-*` modes, raw")
    w("HTTP/1.1 clients on loopback. The MCP canary is a separate client on its own keep-alive connection,")
    w("connected before the attack starts, calling `echo` on `/mcp` every 100 ms, one call at a time; its")
    w("latency is from the first byte of the POST to the last byte of the answer, and a call fails unless")
    w("it gets a `200` with a JSON-RPC `result` within 5 s.")
    w("")
    if problems:
        w("**Problems during the run:**")
        w("")
        for p in problems:
            w(f"- {p}")
        w("")

    def target(name, measured, met):
        verdict = "not measured" if met is None else ("met" if met else "**missed**")
        w(f"| {name} | {measured} | {verdict} |")

    ran = [x for x in rows if x[2] or x[3]]
    survived = [x for x in ran if x[3] and x[3].get("alive") and x[3].get("health_ok")]
    peaks = [(peak_kib(x[3], x[4]), x[0]) for x in ran if peak_kib(x[3], x[4]) is not None]
    worst_peak = max(peaks) if peaks else None
    p99s = [((x[2].get("canary") or {}).get("p99_ms"), x[0]) for x in ran
            if (x[2].get("canary") or {}).get("p99_ms") is not None]
    worst_p99 = max(p99s) if p99s else None
    failed = sum((x[2].get("canary") or {}).get("failed") or 0 for x in ran)
    canary_missing = [x[0] for x in ran if (x[2].get("canary") or {}).get("p99_ms") is None]
    refused = sum(x[2].get("refused_requests") or 0 for x in ran)
    answered = sum(x[2].get("refused_answered") or 0 for x in ran)
    unanswered = sum(x[2].get("unanswered") or 0 for x in ran)
    held = [f"{x[0]}: {d}" for x in ran for d in mcp_deadline_issues(x[0], x[2])]
    w("### Targets")
    w("")
    w("| Target | Measured | |")
    w("|---|---|---|")
    target("Every attack survived (process alive, `/health` 200), default settings",
           f"{len(survived)} of {len(ran)}", len(survived) == len(ran) if ran else None)
    target(f"Peak RSS ≤ {RSS_LIMIT_MIB} MiB in the worst row",
           f"{fmt(mib(worst_peak[0]))} MiB ({worst_peak[1]})" if worst_peak else "—",
           None if worst_peak is None else mib(worst_peak[0]) <= RSS_LIMIT_MIB)
    target(f"Canary p99 ≤ {CANARY_P99_LIMIT_MS} ms under each attack, and no failed canary call",
           (f"worst p99 {fmt(worst_p99[0], 2)} ms ({worst_p99[1]}); {failed} failed calls" if worst_p99 else "—")
           + (f"; no canary report for {', '.join(canary_missing)}" if canary_missing else ""),
           None if worst_p99 is None or canary_missing
           else worst_p99[0] <= CANARY_P99_LIMIT_MS and failed == 0)
    target("Every refused request got a clear 4xx/5xx or JSON-RPC error",
           f"{answered} of {refused}" + (f"; {unanswered} requests without an answer" if unanswered else ""),
           (answered == refused and unanswered == 0) if refused else None)
    held_ok = not held
    target("No connection held past the deadlines (`408` by `body_read_timeout`, 30 s; unread answers let"
           " go by `write_timeout`, 30 s; refused connections closed)",
           "none" if held_ok else "; ".join(cell_text(h) for h in held),
           held_ok if any(x[0] in ("mcp-stalled-bodies", "mcp-stall", "mcp-unread-answers") for x in ran) else None)
    w("")

    w("### Attacks")
    w("")
    w("RSS as above: *before* once `/health` answers, *peak* its `VmHWM`, *after* 10 s after the attacker")
    w("exited. *Log* is what the server wrote to its log (stderr) while the attack ran. *Closed* are the")
    w("server's `/stats` `connectionsClosed` counters 1 s after the attack: `tooSlow` (a client that took")
    w("nothing of its answers) and `bodyTimeout` (`408`s).")
    w("")
    w("| Attack | Survived | What the attacker got | RSS MiB before / peak / 10 s after | Canary p50 / p99 ms | Log bytes | Closed too slow / body timeout |")
    w("|---|---|---|---|---|---:|---|")
    for name, title, report, server, samples, probe in rows:
        survived_cell = "yes" if server and server.get("alive") and server.get("health_ok") else "**no**"
        got = report.get("attacker_got") or report.get("error") or "no report"
        before = mib((server or {}).get("rss_before_kib"))
        after = mib((server or {}).get("rss_after_kib"))
        peak = mib(peak_kib(server, samples))
        logged = log_written(server)
        cc = ((report.get("stats_after") or {}).get("connectionsClosed")) or {}
        w(f"| `{name}` {title} | {survived_cell} | {cell_text(got)} | {fmt(before)} / {fmt(peak)} / {fmt(after)}"
          f" | {canary_cell(report.get('canary'))} | {'—' if logged is None else logged}"
          f" | {cc.get('tooSlow', '—')} / {cc.get('bodyTimeout', '—')} |")
    w("")
    w("What each attack does:")
    w("")
    for name, title, text in MCP_ATTACKS:
        if name in selected:
            w(f"- **{title}** (`{name}`). {text} *Expected:* {MCP_EXPECTED[name]}")
    w("")
    w("### Deviations from the expected behaviour")
    w("")
    w("Checked by `bench/reliability.py` against the raw results and the expectations above:")
    w("")
    deviations = [f"`{name}` ({title}): {d}" for name, title, report, server, samples, probe in rows
                  for d in check_mcp(name, report, server, samples, probe)]
    if deviations:
        for d in deviations:
            w(f"- {cell_text(d)}")
    else:
        w("None: every `/mcp` attack that ran behaved as expected.")
    w("")
    w("What the server still held: `/stats` 1 s after each attack (the canary still connected), and its")
    w("RSS once more after the 10 s of quiet plus 5 s of MCP canary calls.")
    w("")
    w("| Attack | outboundBytes | tool calls (total / failed) | RSS MiB after 10 s + 5 s of canary calls | those canary calls | log bytes in all |")
    w("|---|---:|---|---:|---|---:|")
    for name, title, report, server, samples, probe in rows:
        st = report.get("stats_after") or {}
        te = st.get("toolExecutions") or {}
        pc = (probe or {}).get("canary") or {}
        probe_cell = (f"{pc.get('ok')} of {pc.get('calls')} OK, p99 {fmt(pc.get('p99_ms'), 2)} ms"
                      if pc.get("calls") is not None else "—")
        w(f"| `{name}` | {st.get('outboundBytes', '—')} | {te.get('total', '—')} / {te.get('failed', '—')}"
          f" | {fmt(mib((server or {}).get('rss_after_traffic_kib')))} | {probe_cell}"
          f" | {(server or {}).get('log_bytes_end', '—')} |")
    w("")
    w("Raw results are in `target/reliability-results/mcp-*.json` (the server's log in `mcp-*-server.log`,")
    w("the RSS and fd samples in `mcp-*-samples.jsonl`).")
    w("")


def check_common(report, server, samples, canary_limit=CANARY_P99_LIMIT_MS):
    out = []
    if server is not None and not (server.get("alive") and server.get("health_ok")):
        out.append(f"the server did not survive (alive: {server.get('alive')}, /health 200: {server.get('health_ok')})")
    if report.get("error"):
        out.append(f"the attack tool failed: {report['error']}")
    peak = peak_kib(server, samples)
    if peak is not None and mib(peak) > RSS_LIMIT_MIB:
        out.append(f"peak RSS {mib(peak):.1f} MiB > {RSS_LIMIT_MIB} MiB")
    c = report.get("canary") or {}
    if c.get("failed"):
        out.append(f"{c['failed']} canary calls got no `TOOL_DONE` within 5 s: {c.get('first_failures')}")
    if canary_limit is not None and (c.get("p99_ms") or 0) > canary_limit:
        slow = ", ".join(f"{x['ms']:.0f} ms at {x['at_s']:.2f} s" for x in c.get("slowest") or [])
        calls = [x for x in (report.get("validation") or []) + (report.get("blobs") or []) if x.get("at_s") is not None]
        sent = "; attack calls sent at " + ", ".join(f"{x['call_id']} {x['at_s']:.2f} s" for x in calls) if calls else ""
        out.append(f"canary p99 {c['p99_ms']:.1f} ms > {canary_limit} ms over {c.get('calls')} calls"
                   f" (slowest: {slow}; attack started at {report.get('attack_started_at_s', '?')} s{sent})")
    if isinstance(report.get("lost_tool_dones"), int) and report["lost_tool_dones"] > 0:
        out.append(f"{report['lost_tool_dones']} accepted calls got no `TOOL_DONE`")
    if report.get("duplicate_tool_dones"):
        out.append(f"{report['duplicate_tool_dones']} duplicate `TOOL_DONE`s")
    if report.get("active_connections_after") not in (None, 1):
        out.append(f"{report['active_connections_after']} connections still active 1 s after the attack"
                   " (expected 1, the canary)")
    return out


def check_attack(number, r, server, samples, probe=None):
    out = check_common(r, server, samples)
    pc = (probe or {}).get("canary") or {}
    probed = server and server.get("alive") and server.get("rss_after_traffic_kib") is not None
    if probed and (pc.get("failed") or not pc.get("ok")):
        out.append(f"after the attack, the server did not answer every canary call: {pc or 'no report'}")
    if not r or r.get("error"):
        return out
    if number == "1":
        if not all(r.get("stalled") or [False]):
            out.append(f"not every client's sends stalled: sent {r.get('sent_per_client')}, stalled {r.get('stalled')}")
        if r.get("send_errors"):
            out.append(f"send errors: {r['send_errors']}")
        ob = r.get("server_outbound_bytes_at_end")
        if isinstance(ob, int) and ob > 3 * 8 * 1048576:
            out.append(f"`outboundBytes` {ob} exceeds 3 × `max_outbound_bytes`")
    elif number == "2":
        t = r.get("trickle") or {}
        if t.get("status") != 408 or not 8 <= (t.get("after_s") or 0) <= 15 or not t.get("connection_closed"):
            out.append(f"trickled body: {t}")
        st = (r.get("stalled") or {}).get("statuses") or {}
        for code, v in st.items():
            if code == "408":
                if not (9 <= v.get("min_s", 0) and v.get("max_s", 99) <= 15):
                    out.append(f"stalled bodies: 408 after {v.get('min_s')}–{v.get('max_s')} s")
            elif code == "503":
                if v.get("max_s", 99) > 1 or v.get("with_retry_after") != v.get("count"):
                    out.append(f"stalled bodies: 503 {v}")
            else:
                out.append(f"stalled bodies: {v.get('count')} answered {code}")
        n408 = (st.get("408") or {}).get("count", 0)
        if not 10 <= n408 <= 13:
            out.append(f"{n408} stalled bodies admitted (expected about 12 = 128 MiB / 10 MiB)")
        h = r.get("huge_length") or {}
        if h.get("status") != 413 or (h.get("after_ms") or 0) > 1000:
            out.append(f"huge Content-Length: {h}")
        if not r.get("stream_pong_after"):
            out.append("the SSE stream did not deliver the PONG of a POST after the attack")
    elif number == "3":
        for call, total in zip(r.get("validation") or [], (125000, 125003)):
            if call.get("status") != "ERROR" or call.get("code") != "INVALID_PARAMS":
                out.append(f"{call.get('call_id')}: {call}")
                continue
            if (call.get("details_len") or 0) > 20:
                out.append(f"{call['call_id']}: {call['details_len']} details (max_violations 20)")
            if call.get("total") != total and call.get("total_at_least") is None:
                out.append(f"{call['call_id']}: total {call.get('total')} (expected {total} or total_at_least)")
            if (call.get("reply_bytes") or 0) > 8192:
                out.append(f"{call['call_id']}: reply of {call['reply_bytes']} bytes")
        blobs = {b.get("call_id"): b for b in r.get("blobs") or []}
        for cid, size in (("b-3MiB", 3 << 20), ("b-10MiB", 10 << 20)):
            b = blobs.get(cid) or {}
            if b.get("status") != "OK" or b.get("data_len") != size:
                out.append(f"{cid}: {b or 'not sent'}")
        b = blobs.get("b-20MiB") or {}
        details = b.get("details") or {}
        if b.get("status") != "ERROR" or b.get("code") != "RESULT_TOO_LARGE" or "size" not in details or "limit" not in details:
            out.append(f"b-20MiB: {b or 'not sent'}")
        if r.get("unexpected_tool_dones"):
            out.append(f"{r['unexpected_tool_dones']} extra `TOOL_DONE`s")
        if r.get("open_at_end") != "yes":
            out.append(f"connection not usable at the end: {r.get('open_at_end')}")
    elif number == "4":
        a = r.get("replay_request") or {}
        rp = a.get("replay") or {}
        if a.get("error") or rp.get("received") != a.get("expected") or not (rp.get("ascending") and rp.get("contiguous") and rp.get("byte_identical")):
            out.append(f"REPLAY_REQUEST: {a}")
        if a.get("replay_too_old"):
            out.append(f"REPLAY_REQUEST from 1: REPLAY_TOO_OLD {a['replay_too_old']} after 5000 PINGs")
        b = r.get("resumption") or {}
        for key, expected in (("while_connected", b.get("expected_missed")), ("after_disconnect", b.get("expected_missed_after_disconnect"))):
            x = b.get(key) or {}
            if x.get("error") or x.get("received") != expected or not str(x.get("ended_with", "")).startswith("HAI"):
                out.append(f"resumption {key.replace('_', ' ')}: {x} (expected {expected} missed envelopes, then HAI)")
        if b and not str(b.get("old_connection_got", "")).startswith("close 1000"):
            out.append(f"the resumed connection got {b.get('old_connection_got')} (expected close 1000)")
        c = r.get("sse_batch") or {}
        if c.get("post_status") != 200 or c.get("pongs") != 5000 or not c.get("in_order"):
            out.append(f"SSE batch: {c}")
    elif number == "5":
        other = {k: v for k, v in (r.get("statuses") or {}).items() if k != "TOOL_DONE ERROR INVALID_PARAMS"}
        if other:
            out.append(f"besides `INVALID_PARAMS`: {other}, with only 4 calls in flight per session"
                       f" ({r.get('statuses')})")
        if r.get("connections_ended"):
            out.append(f"connections ended: {r['connections_ended']}")
    elif number == "6":
        hai = r.get("got_hai") or 0
        closes = r.get("closes") or {}
        if hai + 1 != 10000:
            out.append(f"{hai} attacker sessions + the canary got `HAI` (expected max_sessions = 10 000)")
        bad = {k: v for k, v in closes.items() if not k.startswith("1013")}
        if bad or r.get("failures") or r.get("unfinished"):
            out.append(f"closes {closes}, failures {r.get('failures')}, unfinished {r.get('unfinished')}")
    elif number == "7":
        peak = r.get("replay_bytes_peak") or 0
        if peak == 0:
            out.append("`/stats` `replayBytes` never grew")
        elif peak > 256 * 1048576:
            out.append(f"`replayBytes` peaked at {peak} > 256 MiB")
        if r.get("filled") != r.get("sessions"):
            out.append(f"{r.get('filled')} of {r.get('sessions')} sessions filled: {r.get('errors')}")
    elif number == "8":
        def seq(v):
            return " → ".join(v) if isinstance(v, list) else str(v)
        a = (r.get("huge_bin_len") or {}).get("got") or []
        if not (a and a[0].startswith("ERROR MESSAGE_TOO_LARGE") and any(x.startswith("close 1009") for x in a)):
            out.append(f"(a) bin_len 99 999 999: {seq(a)}")
        b = (r.get("missing_binary_frame") or {}).get("got") or []
        if not (b and "BINARY_FRAME_ERROR" in b[0] and "missing binary frame" in b[0] and "PONG after-b" in b):
            out.append(f"(b) missing binary frame: {seq(b)}")
        c = r.get("overflows") or {}
        flow = c.get("flow_update_u64_max_twice")
        if not (isinstance(flow, list) and flow and flow[-1] == "PING→PONG ok"):
            out.append(f"(c) FLOW_UPDATE 2^64-1: {seq(flow)}")
        binc = c.get("bin_len_u64_max")
        if not (isinstance(binc, list) and binc and binc[0].startswith("ERROR")):
            out.append(f"(c) bin_len 2^64-1: {seq(binc)}")
        for key, code in (("invalid_utf8", "close 1007"), ("reserved_opcode", "close 1002"), ("rsv_bits", "close 1002")):
            if not str(r.get(key, "")).startswith(code):
                out.append(f"(d) {key.replace('_', ' ')}: {r.get(key)} (expected {code})")
        if server and server.get("rss_before_kib") and server.get("rss_after_kib"):
            if server["rss_after_kib"] > 2 * server["rss_before_kib"] + 32 * 1024:
                out.append(f"(e) RSS 10 s after is {mib(server['rss_after_kib']):.1f} MiB"
                           f" (before: {mib(server['rss_before_kib']):.1f} MiB)")
    return out


def peak_kib(server, samples):
    values = [s.get("rss_kib") for s in samples or [] if s.get("rss_kib") is not None]
    values += [s.get("hwm_kib") for s in samples or [] if s.get("hwm_kib") is not None]
    if server and server.get("hwm_kib") is not None:
        values.append(server["hwm_kib"])
    return max(values) if values else None


def pick_every(samples, seconds):
    shown = []
    next_t = 0.0
    for s in samples:
        if s.get("t") is None:
            continue
        if s["t"] >= next_t or s is samples[-1]:
            shown.append(s)
            next_t = s["t"] + seconds - 2.5
    return shown


def nearest(samples, t):
    best = None
    for s in samples:
        if best is None or abs(s.get("t", 0) - t) < abs(best.get("t", 0) - t):
            best = s
    return best


if __name__ == "__main__":
    main()

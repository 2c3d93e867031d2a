#!/usr/bin/env bash
# The MCP door: server CPU per `tools/call` of `echo` over MCP Streamable
# HTTP (HTTP/1.1 keep-alive), for three servers:
#   floor  bench/mcp-door/src/bin/floor.rs: bare hyper + serde_json, one
#          JSON-RPC message per POST answered with application/json, the
#          least an MCP server must do;
#   rmcp   bench/mcp-door/src/bin/rmcp_server.rs: a bare rmcp Streamable HTTP
#          server with one `echo` tool, served by axum;
#   haip   examples/embed_bench.rs `serve standalone`: haip's `/mcp` door
#          with the built-in `echo`.
# Each on both revisions: 2025-11-25 (a session per connection, opened by
# `initialize`) and 2026-07-28 (stateless requests). The load is
# bench/mcp-door/src/bin/load.rs, which checks every answer is echo's result.
# Writes the "MCP door" section of BENCHMARKS.md (between its markers).
#
#   bash bench/mcp.sh
#   BENCH_SECONDS=5 BENCH_REPEAT=5 bash bench/mcp.sh
#
# Scenarios c32 (32 connections × 1 call in flight) and c1. BENCH_REPEAT
# rounds; each round runs every server and revision once per scenario, in
# turn (the order reversed every other round), BENCH_SECONDS each after 1 s of
# warm-up; the run with the median CPU per call is shown. Servers on CPU 0,
# load on CPU 1 (taskset) when there are two CPUs. Only 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_RUN=${BENCH_SECONDS:-3}
REPEAT=${BENCH_REPEAT:-5}
WARMUP=1
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
# The mcp-door crate is its own workspace with its own target directory.
DOOR_TARGET=$ROOT/bench/mcp-door/target
OUT=$DOOR_TARGET/bench-results
for n in "$SECONDS_PER_RUN" "$REPEAT"; do
    case $n in '' | *[!0-9]*) echo "settings must be whole numbers" >&2; exit 2 ;; esac
done
((SECONDS_PER_RUN >= 1 && SECONDS_PER_RUN <= 60)) || { echo "BENCH_SECONDS: 1 to 60" >&2; exit 2; }
((REPEAT >= 1 && REPEAT <= 9)) || { echo "BENCH_REPEAT: 1 to 9" >&2; exit 2; }
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_SERVER=(taskset -c 0)
    PIN_LOAD=(taskset -c 1)
    PINNING="servers on CPU 0, load on CPU 1 (taskset)"
else
    PIN_SERVER=()
    PIN_LOAD=()
    PINNING="not pinned"
fi

echo "== building (release): the mcp-door crate (floor, rmcp_server, load) and embed_bench"
build_started=$SECONDS
CARGO_TARGET_DIR=$DOOR_TARGET cargo build --release --quiet --locked \
    --manifest-path bench/mcp-door/Cargo.toml
cargo build --release --quiet -p haip-examples --example embed_bench
echo "   built in $((SECONDS - build_started)) s"
DOOR=$DOOR_TARGET/release
BENCH=$TARGET/release/examples/embed_bench

rm -rf "$OUT"
mkdir -p "$OUT"

PIDS=()
# stop PID: SIGTERM, then SIGKILL if it is still there after 10 s.
stop() {
    local pid=$1 i
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do stop "$pid"; done
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_port PORT PID NAME
wait_port() {
    local port=$1 pid=$2 name=$3 deadline=$((SECONDS + 20))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited before accepting connections; its log:" >&2
            cat "$OUT/$name.log" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "nothing listens on $port after 20 s" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# start NAME COMMAND...: starts it on a free port; sets PID_NAME and PORT_NAME.
start() {
    local name=$1 port
    shift
    port=$(free_port)
    env HAIP_ADDR=127.0.0.1:$port HAIP_LOG=warn "${PIN_SERVER[@]}" "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=("$!")
    declare -g "PID_$name=$!" "PORT_$name=$port"
    wait_port "$port" "$!" "$name"
}

start floor "$DOOR/floor"
start rmcp "$DOOR/rmcp_server"
start haip "$BENCH" serve standalone

# server:revision, in the order of a round. The floor does not look at the
# revision, but a 2026-07-28 request is longer and its answer carries
# `resultType`, so it is measured on both.
RUNS=(floor:2025-11-25 floor:2026-07-28 rmcp:2025-11-25 rmcp:2026-07-28 haip:2025-11-25 haip:2026-07-28)
SCENARIOS=("c32 32" "c1 1")
FAILED=0
LOADAVG_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for ((rep = 1; rep <= REPEAT; rep++)); do
    order=("${RUNS[@]}")
    if ((rep % 2 == 0)); then
        order=()
        for ((i = ${#RUNS[@]} - 1; i >= 0; i--)); do order+=("${RUNS[i]}"); done
    fi
    for scenario in "${SCENARIOS[@]}"; do
        read -r label connections <<<"$scenario"
        for run in "${order[@]}"; do
            server=${run%%:*} revision=${run#*:}
            pid_var=PID_$server port_var=PORT_$server
            name=$server-$revision-$label-run$rep
            echo "== $server $revision $label (run $rep/$REPEAT)"
            status=0
            timeout $((SECONDS_PER_RUN + WARMUP + 60)) "${PIN_LOAD[@]}" "$DOOR/load" \
                --url "http://127.0.0.1:${!port_var}/mcp" --revision "$revision" \
                --connections "$connections" --seconds "$SECONDS_PER_RUN" --warmup "$WARMUP" \
                --pid "${!pid_var}" >"$OUT/$name.json" 2>"$OUT/$name.err" || status=$?
            if ((status != 0)); then
                FAILED=1
                echo "   FAILED (status $status): $(head -c 300 "$OUT/$name.json") $(head -c 300 "$OUT/$name.err")" >&2
                if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$OUT/$name.json" 2>/dev/null; then
                    python3 -c 'import json, sys; print(json.dumps({"failed": True, "first_error": sys.argv[1]}))' \
                        "exit status $status: $(head -c 300 "$OUT/$name.err")" >"$OUT/$name.json"
                fi
            fi
            if ! kill -0 "${!pid_var}" 2>/dev/null; then
                echo "$server died; see $OUT/$server.log" >&2
                exit 1
            fi
        done
    done
done
LOADAVG_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# Idle sessions (2025-11-25): per server a fresh process; IDLE_SESSIONS
# sessions opened (initialize + notifications/initialized, each on a
# connection closed after), the server's VmRSS read before and after.
IDLE_SESSIONS=${IDLE_SESSIONS:-5000}
case $IDLE_SESSIONS in '' | *[!0-9]*) echo "IDLE_SESSIONS must be a whole number" >&2; exit 2 ;; esac
((IDLE_SESSIONS >= 1 && IDLE_SESSIONS <= 9000)) || { echo "IDLE_SESSIONS: 1 to 9000" >&2; exit 2; }
for server in rmcp haip; do
    pid_var=PID_$server
    kill "${!pid_var}" 2>/dev/null || true
    wait "${!pid_var}" 2>/dev/null || true
    case $server in
        rmcp) start rmcp_idle "$DOOR/rmcp_server" ;;
        haip) start haip_idle "$BENCH" serve standalone ;;
    esac
    pid_var=PID_${server}_idle port_var=PORT_${server}_idle
    echo "== $server: $IDLE_SESSIONS idle 2025-11-25 sessions (fresh process)"
    status=0
    timeout 300 "${PIN_LOAD[@]}" "$DOOR/load" --url "http://127.0.0.1:${!port_var}/mcp" \
        --revision 2025-11-25 --idle "$IDLE_SESSIONS" --pid "${!pid_var}" \
        >"$OUT/$server-idle.json" 2>"$OUT/$server-idle.err" || status=$?
    if ((status != 0)); then
        FAILED=1
        echo "   FAILED (status $status): $(head -c 300 "$OUT/$server-idle.err")" >&2
    fi
    kill "${!pid_var}" 2>/dev/null || true
done

COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- haip examples 2>/dev/null || echo ' (haip with uncommitted changes)')"
CPU_MODEL=$(python3 -c 'print(next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown"))')
python3 -B - "$OUT" "$PINNING" "$COMMIT" "$SECONDS_PER_RUN" "$REPEAT" "$WARMUP" "$(nproc)" \
    "$CPU_MODEL" "$LOADAVG_BEFORE" "$LOADAVG_AFTER" <<'PY' >"$OUT/section.md"
import json, os, sys, datetime, statistics
out, pinning, commit, seconds, repeat, warmup, nproc, cpu, load_before, load_after = sys.argv[1:11]
repeat = int(repeat)
servers = ["floor", "rmcp", "haip"]
revisions = ["2025-11-25", "2026-07-28"]
scenarios = [("c32", "32 connections × 1 call in flight"), ("c1", "1 connection × 1 call in flight")]

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"failed": True, "first_error": str(e)}

def fmt(x, digits=1):
    return "—" if x is None else f"{x:.{digits}f}"

rows, failures = [], []
for scenario, _ in scenarios:
    medians = {}
    for server in servers:
        for revision in revisions:
            runs = [load(f"{server}-{revision}-{scenario}-run{r}.json") for r in range(1, repeat + 1)]
            good = [r for r in runs if not r.get("failed") and r.get("server_cpu_us_per_call")]
            bad = len(runs) - len(good)
            if bad:
                failures.append(f"{server} {revision} {scenario}: {bad} of {len(runs)} runs failed "
                                f"({next((r.get('first_error') for r in runs if r.get('failed')), '')})")
            if not good:
                rows.append((scenario, server, revision, None, None, bad))
                continue
            good.sort(key=lambda r: r["server_cpu_us_per_call"])
            median = good[len(good) // 2]
            medians[(server, revision)] = median["server_cpu_us_per_call"]
            rows.append((scenario, server, revision, median, good, bad))
    for i, row in enumerate(rows):
        if row[0] == scenario:
            floor = medians.get(("floor", row[2]))
            rows[i] = row + (floor,)

print("<!-- mcp-door:begin -->")
print("## MCP door")
print()
print("Generated by `bench/mcp.sh`; do not edit by hand. "
      f"Commit {commit}, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, "
      f"{nproc} CPUs ({cpu}), {pinning}; load average {load_before} before, {load_after} after. "
      f"`BENCH_SECONDS={seconds} BENCH_REPEAT={repeat}`: each row the run with the median server CPU "
      f"per call of {repeat} runs of {seconds} s (after {warmup} s of warm-up), every server and "
      "revision running in turn in each round.")
print()
print("Server CPU (user + system, from `/proc/PID/stat`) per `tools/call` of `echo` "
      "`{\"message\":\"hello\"}` over MCP Streamable HTTP, HTTP/1.1 keep-alive, each connection "
      "with one call in flight; every answer is checked to be echo's result. "
      "**floor** (`bench/mcp-door/src/bin/floor.rs`): bare hyper 1 + serde_json, the least an MCP "
      "server must do — parse the JSON-RPC message, answer `application/json` with the very body "
      "haip gives; it ignores the revision, but a 2026-07-28 request is longer and its result "
      "carries `resultType`, so it runs on both. **rmcp** (`bench/mcp-door/src/bin/rmcp_server.rs`): "
      "a bare rmcp Streamable HTTP server with one `echo` tool, in axum, sessions for 2025-11-25 "
      "(answers are event streams), stateless `application/json` answers for 2026-07-28. "
      "**haip**: `/mcp` of `examples/embed_bench.rs serve standalone` with the built-in `echo`. "
      "2025-11-25: each connection opens its session (`initialize`, `notifications/initialized`) "
      "before the run and calls with `Mcp-Session-Id`; 2026-07-28: every call stands alone "
      "(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` headers, `_meta` protocol version and "
      "client capabilities). The three servers use mimalloc. × floor: CPU per call over the "
      "floor's, same scenario and revision.")
print()
print("| server | revision | scenario | server CPU µs/call | min–max | × floor | calls/s | p50 ms | p99 ms |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for scenario, server, revision, median, good, bad, floor in rows:
    if median is None:
        print(f"| {server} | {revision} | {scenario} | failed | | | | | |")
        continue
    cpu = median["server_cpu_us_per_call"]
    cpus = [r["server_cpu_us_per_call"] for r in good]
    ratio = f"{cpu / floor:.2f}×" if floor else "—"
    note = f" ({bad} failed)" if bad else ""
    print(f"| {server} | {revision} | {scenario} | {cpu:.1f}{note} | {min(cpus):.1f}–{max(cpus):.1f} | "
          f"{ratio} | {median['calls_per_second']:.0f} | {median['latency_ms']['p50']:.3f} | "
          f"{median['latency_ms']['p99']:.3f} |")
print()
for scenario, text in scenarios:
    print(f"- {scenario}: {text}.")
for failure in failures:
    print(f"- **failed**: {failure}")
print()
print("### Idle MCP sessions (2025-11-25)")
print()
print("Per server a fresh process: `load --idle N` opens one session, waits 0.5 s, reads the "
      "server's `VmRSS`, opens N more sessions (`initialize` and `notifications/initialized`, each "
      "on a connection of its own, closed once the session is initialized: an idle session holds no "
      "connection), waits 0.5 s and reads `VmRSS` again; then it ends every session (`DELETE`).")
print()
print("| server | sessions | opened in s | RSS before MiB | RSS after MiB | RSS per idle session KiB |")
print("|---|---:|---:|---:|---:|---:|")
for server in ["rmcp", "haip"]:
    idle = load(f"{server}-idle.json")
    if idle.get("failed") or "rss_per_session_bytes" not in idle:
        print(f"| {server} | failed: {idle.get('first_error', '')} | | | | |")
        continue
    print(f"| {server} | {idle['sessions']} | {idle['seconds_to_open']:.1f} | "
          f"{idle['rss_before_bytes'] / 2**20:.1f} | {idle['rss_after_bytes'] / 2**20:.1f} | "
          f"{idle['rss_per_session_bytes'] / 1024:.1f} |")
print("<!-- mcp-door:end -->")
PY
python3 -B - "$OUT/section.md" <<'PY'
import sys, re
section = open(sys.argv[1]).read().strip()
text = open("BENCHMARKS.md").read()
pattern = re.compile(r"<!-- mcp-door:begin -->.*?<!-- mcp-door:end -->", re.S)
if pattern.search(text):
    text = pattern.sub(lambda _: section, text)
elif "<!-- embedded:end -->" in text:
    # Its place: right after the "Embedded" section.
    text = text.replace("<!-- embedded:end -->", "<!-- embedded:end -->\n\n" + section, 1)
else:
    text = text.rstrip() + "\n\n" + section + "\n"
open("BENCHMARKS.md", "w").write(text)
PY
cat "$OUT/section.md"
echo "== wrote the 'MCP door' section of BENCHMARKS.md (raw results in ${OUT#"$ROOT"/})"
if ((FAILED)); then
    echo "error: some runs failed (see the section and ${OUT#"$ROOT"/})" >&2
    exit 1
fi

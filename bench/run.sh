#!/usr/bin/env bash
# The haip benchmark suite: the quickstart server (the `haip` runtime) against
# the FLOOR (examples/floor.rs, the least a HAIP server must do), both serving
# the `echo` tool, measured by `haip bench` on this machine's loopback.
#
#   bash bench/run.sh                                  # 5 s per run, 3 runs per scenario
#   BENCH_SECONDS=10 BENCH_REPEAT=5 bash bench/run.sh
#
# Phase 1: both servers started, each pinned to CPU 0 on a free 127.0.0.1 port;
# the load (`haip bench`) pinned to CPU 1. Scenarios 1x1, 1x32, 50x8
# (connections x calls in flight), each BENCH_SECONDS long, BENCH_REPEAT times,
# alternating the servers so a disturbance of the machine hits both alike; the
# run with the median calls/s is reported. Only one server is under load at a
# time; the other sits idle.
# Phase 2: per server a fresh process, IDLE_SESSIONS idle WebSocket sessions
# (examples/idle_sessions.rs) for the RSS per session.
# Writes BENCHMARKS.md and bench/plot.svg; raw JSON goes to target/bench-results/.
# Everything is bounded in time and count; only 127.0.0.1 is ever contacted.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_SCENARIO=${BENCH_SECONDS:-5}
REPEAT=${BENCH_REPEAT:-3}
IDLE_SESSIONS=${IDLE_SESSIONS:-1000}
IDLE_HOLD=3
OUT=$ROOT/target/bench-results
BIN=$ROOT/target/release
SERVERS=(quickstart floor)
SCENARIOS=("1 1" "1 32" "50 8")

# check_number NAME VALUE MIN MAX
check_number() {
    case $2 in
        '' | *[!0-9]*) echo "$1 must be a whole number" >&2; exit 2 ;;
    esac
    if (($2 < $3 || $2 > $4)); then
        echo "$1 must be between $3 and $4" >&2
        exit 2
    fi
}
check_number BENCH_SECONDS "$SECONDS_PER_SCENARIO" 1 120
check_number BENCH_REPEAT "$REPEAT" 1 9
check_number IDLE_SESSIONS "$IDLE_SESSIONS" 1 10000
COMMAND="BENCH_SECONDS=$SECONDS_PER_SCENARIO BENCH_REPEAT=$REPEAT IDLE_SESSIONS=$IDLE_SESSIONS bash bench/run.sh"

# Pinning needs two CPUs; with fewer, server and load share what there is.
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_SERVER=(taskset -c 0)
    PIN_LOAD=(taskset -c 1)
    PINNING="servers on CPU 0, load on CPU 1 (taskset)"
else
    PIN_SERVER=()
    PIN_LOAD=()
    PINNING="not pinned (fewer than 2 CPUs or no taskset)"
fi

echo "== building (release)"
cargo build --release --quiet -p haip-examples --example quickstart --example floor --example idle_sessions
cargo build --release --quiet -p haip --features cli --bin haip

rm -rf "$OUT"
mkdir -p "$OUT"

# Every server this script started and has not stopped yet, by pid.
declare -A RUNNING=()
stop_all() {
    local pid
    for pid in "${!RUNNING[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    RUNNING=()
}
trap stop_all EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_server NAME LOGNAME: starts the server NAME on a free port and waits
# until it accepts; sets PID and URL.
start_server() {
    local name=$1 log=$OUT/$2.log port deadline
    port=$(free_port)
    HAIP_ADDR=127.0.0.1:$port HAIP_LOG=warn "${PIN_SERVER[@]}" "$BIN/examples/$name" >"$log" 2>&1 &
    PID=$!
    RUNNING[$PID]=$name
    URL=ws://127.0.0.1:$port/haip
    deadline=$((SECONDS + 20))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ! kill -0 "$PID" 2>/dev/null; then
            echo "error: $name exited before accepting connections; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "error: $name does not accept connections on port $port after 20 s" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# stop_server PID: stops it and reports if it had already ended on its own.
stop_server() {
    local pid=$1 status=0 name=${RUNNING[$1]}
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || status=$?
    unset "RUNNING[$pid]"
    # 0: a graceful exit on SIGTERM; 143: ended by SIGTERM. Else it had died.
    if ((status != 143 && status != 0)); then
        echo "warning: $name ($pid) ended with status $status before it was stopped" >&2
    fi
}

# check_alive NAME PID SCENARIO: records a crash of the server, if any.
check_alive() {
    if ! kill -0 "$2" 2>/dev/null; then
        echo "error: $1 died during $3; see ${OUT#"$ROOT"/}/$1.log" >&2
        echo "{\"server\":\"$1\",\"scenario\":\"$3\",\"crashed\":true}" >"$OUT/$1-crash.json"
        return 1
    fi
}

# Phase 1: the scenarios, both servers up.
declare -A PIDS=() URLS=() CRASHED=()
for server in "${SERVERS[@]}"; do
    start_server "$server" "$server"
    PIDS[$server]=$PID
    URLS[$server]=$URL
done
LOADAVG_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for scenario in "${SCENARIOS[@]}"; do
    read -r connections in_flight <<<"$scenario"
    label=${connections}x${in_flight}
    for ((rep = 1; rep <= REPEAT; rep++)); do
        for server in "${SERVERS[@]}"; do
            [[ -n ${CRASHED[$server]:-} ]] && continue
            name=$server-$label-run$rep
            echo "== $server $label: $connections connection(s) x $in_flight in flight, ${SECONDS_PER_SCENARIO} s (run $rep/$REPEAT)"
            status=0
            timeout $((SECONDS_PER_SCENARIO + 60)) "${PIN_LOAD[@]}" "$BIN/haip" bench "${URLS[$server]}" \
                --tool echo --params '{"message":"hello"}' \
                --connections "$connections" --in-flight "$in_flight" \
                --duration "${SECONDS_PER_SCENARIO}s" --server-pid "${PIDS[$server]}" --json \
                >"$OUT/$name.json" 2>"$OUT/$name.err" || status=$?
            if ((status != 0)); then
                echo "   error: haip bench exited with status $status: $(cat "$OUT/$name.err")" >&2
            fi
            check_alive "$server" "${PIDS[$server]}" "$label" || CRASHED[$server]=1
        done
    done
done
LOADAVG_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
for server in "${SERVERS[@]}"; do
    stop_server "${PIDS[$server]}"
done

# Phase 2: idle sessions, each server a fresh process, one at a time.
for server in "${SERVERS[@]}"; do
    echo "== $server: $IDLE_SESSIONS idle sessions (fresh process)"
    start_server "$server" "$server-idle"
    status=0
    timeout 150 "${PIN_LOAD[@]}" "$BIN/examples/idle_sessions" "$URL" \
        --count "$IDLE_SESSIONS" --hold "$IDLE_HOLD" --server-pid "$PID" \
        >"$OUT/$server-idle.json" 2>"$OUT/$server-idle.err" || status=$?
    if ((status != 0)); then
        echo "   error: idle_sessions exited with status $status: $(cat "$OUT/$server-idle.err")" >&2
    fi
    check_alive "$server" "$PID" idle || true
    stop_server "$PID"
done

cat >"$OUT/meta.json" <<EOF
{
  "nproc": $(nproc),
  "cpu_model": $(python3 -c 'import json; print(json.dumps(next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")))'),
  "kernel": "$(uname -sr)",
  "rustc": "$(rustc --version)",
  "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "seconds_per_scenario": $SECONDS_PER_SCENARIO,
  "repeat": $REPEAT,
  "idle_sessions": $IDLE_SESSIONS,
  "loadavg_before": "$LOADAVG_BEFORE",
  "loadavg_after": "$LOADAVG_AFTER",
  "pinning": "$PINNING",
  "command": "$COMMAND"
}
EOF

# The sections bench/cluster.sh, bench/metrics.sh and bench/layers.sh write are kept.
CLUSTER_SECTION=$(sed -n '/<!-- cluster:begin -->/,/<!-- cluster:end -->/p' BENCHMARKS.md 2>/dev/null || true)
METRICS_SECTION=$(sed -n '/<!-- metrics:begin -->/,/<!-- metrics:end -->/p' BENCHMARKS.md 2>/dev/null || true)
LAYERS_SECTION=$(sed -n '/<!-- layers:begin -->/,/<!-- layers:end -->/p' BENCHMARKS.md 2>/dev/null || true)
EMBEDDED_SECTION=$(sed -n '/<!-- embedded:begin -->/,/<!-- embedded:end -->/p' BENCHMARKS.md 2>/dev/null || true)
MCP_DOOR_SECTION=$(sed -n '/<!-- mcp-door:begin -->/,/<!-- mcp-door:end -->/p' BENCHMARKS.md 2>/dev/null || true)
python3 -B bench/report.py "$OUT" >BENCHMARKS.md
if [[ -n $CLUSTER_SECTION ]]; then
    printf '\n%s\n' "$CLUSTER_SECTION" >>BENCHMARKS.md
fi
if [[ -n $METRICS_SECTION ]]; then
    printf '\n%s\n' "$METRICS_SECTION" >>BENCHMARKS.md
fi
if [[ -n $LAYERS_SECTION ]]; then
    printf '\n%s\n' "$LAYERS_SECTION" >>BENCHMARKS.md
fi
if [[ -n $EMBEDDED_SECTION ]]; then
    printf '\n%s\n' "$EMBEDDED_SECTION" >>BENCHMARKS.md
fi
[[ -z $MCP_DOOR_SECTION ]] || printf '\n%s\n' "$MCP_DOOR_SECTION" >>BENCHMARKS.md
python3 -B bench/plot.py "$OUT" >bench/plot.svg
echo "== wrote BENCHMARKS.md and bench/plot.svg (raw results in ${OUT#"$ROOT"/})"

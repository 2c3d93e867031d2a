#!/usr/bin/env bash
# The haip reliability measurement: the quickstart server (plus a `blob` tool,
# examples/hostile/ `serve`, default settings) against hostile and slow
# clients (examples/hostile/), on this machine's loopback; and the same for
# the `/mcp` door, against the quickstart itself.
#
#   bash bench/reliability.sh                          # attacks 1-8, the /mcp attacks, a 10-minute soak
#   SOAK_SECONDS=60 bash bench/reliability.sh          # a short soak
#   RELIABILITY_ONLY=1,4 bash bench/reliability.sh     # a subset (numbers and/or `soak`)
#   RELIABILITY_ONLY=mcp bash bench/reliability.sh     # the /mcp attacks (or some: mcp-stall,mcp-origin)
#
# Per attack 1-8: a fresh server pinned to CPU 0 on a free 127.0.0.1 port; its
# VmRSS before; a sampler reading VmRSS every 100 ms (and VmHWM at the end)
# while the attack runs, pinned with the attacker and its canary client to
# CPU 1; then 10 s of quiet and VmRSS again; the server survived if its
# process is alive and GET /health answers 200. Then 5 s of canary calls and
# VmRSS once more (the allocator returns freed memory when it is used again).
# Soak: `haip bench` measures the maximum echo call rate of a fresh server
# (50 connections x 8 in flight, 5 s); then another fresh server gets half that
# rate for SOAK_SECONDS (default 600, at most 900) of calls, cancels, abrupt
# disconnects and resumptions, its VmRSS and open fds sampled every 5 s.
# Per /mcp attack (mcp-stalled-bodies ... mcp-errors): the same, but the
# server is a fresh target/release/examples/quickstart with its default
# logging (HAIP_LOG unset: info), the attack and canary modes are hostile's
# `mcp-*`, and the byte size of the server's log (stderr) is recorded before
# and after the attack.
# Raw JSON goes to target/reliability-results/; bench/reliability.py writes
# RELIABILITY.md. Everything is bounded in time and count; only 127.0.0.1 is
# ever contacted.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=$ROOT/target/reliability-results
BIN=$ROOT/target/release
SOAK_SECONDS=${SOAK_SECONDS:-600}
ONLY=${RELIABILITY_ONLY:-1,2,3,4,5,6,7,8,mcp,soak}
AFTER_SECONDS=10
# The /mcp attacks, in the order they run, and their arguments.
MCP_ATTACKS=(mcp-stalled-bodies mcp-stall mcp-big-params mcp-unread-answers mcp-progress-token mcp-origin mcp-log-flood mcp-errors)
declare -A MCP_ARGS=(
    [mcp-stalled-bodies]="--count 600"
    [mcp-big-params]="--duration 15"
    [mcp-unread-answers]="--count 100"
    [mcp-log-flood]="--count 100"
)

case $SOAK_SECONDS in
    '' | *[!0-9]*) echo "SOAK_SECONDS must be a whole number" >&2; exit 2 ;;
esac
if ((SOAK_SECONDS < 10 || SOAK_SECONDS > 900)); then
    echo "SOAK_SECONDS must be between 10 and 900" >&2
    exit 2
fi
MCP_NAMES=$(IFS='|'; echo "${MCP_ATTACKS[*]}")
if [[ ! $ONLY =~ ^((soak|mcp|$MCP_NAMES|[1-8]),)*(soak|mcp|$MCP_NAMES|[1-8])$ ]]; then
    echo "RELIABILITY_ONLY must be a comma-separated list of 1-8, soak, mcp (all /mcp attacks) and ${MCP_ATTACKS[*]}" >&2
    exit 2
fi
# selected NAME: NAME was asked for (an /mcp attack also through `mcp`).
selected() { [[ ,$ONLY, == *,$1,* ]] || { [[ $1 == mcp-* ]] && [[ ,$ONLY, == *,mcp,* ]]; }; }
MCP_SELECTED=()
for attack in "${MCP_ATTACKS[@]}"; do
    if selected "$attack"; then MCP_SELECTED+=("$attack"); fi
done

COMMAND="bash bench/reliability.sh"
if ((SOAK_SECONDS != 600)); then COMMAND="SOAK_SECONDS=$SOAK_SECONDS $COMMAND"; fi
if [[ -n ${RELIABILITY_ONLY:-} ]]; then COMMAND="RELIABILITY_ONLY=$ONLY $COMMAND"; fi

# Pinning needs two CPUs; with fewer, server and load share what there is.
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_SERVER=(taskset -c 0)
    PIN_LOAD=(taskset -c 1)
    PINNING="server on CPU 0, attacker, canary and samplers on CPU 1 (taskset)"
else
    PIN_SERVER=()
    PIN_LOAD=()
    PINNING="not pinned (fewer than 2 CPUs or no taskset)"
fi

# Attack 6 opens 10 050 connections: both sides need the descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FD_LIMIT=$(ulimit -n)
if [[ $FD_LIMIT != unlimited ]] && ((FD_LIMIT < 10200)) && selected 6; then
    echo "warning: the open-file limit is $FD_LIMIT; attack 6 needs about 10 200" >&2
fi

echo "== building (release)"
cargo build --release --quiet -p haip-examples --example hostile
if ((${#MCP_SELECTED[@]} > 0)); then
    cargo build --release --quiet -p haip-examples --example quickstart
fi
if selected soak; then
    cargo build --release --quiet -p haip --features cli --bin haip
fi

rm -rf "$OUT"
mkdir -p "$OUT"

# Every process this script started and has not stopped yet, by pid.
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

# health_ok PORT: GET /health answers 200 within 5 s.
health_ok() {
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
        printf "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" >&3 &&
        IFS= read -r line <&3 && [[ $line == "HTTP/1.1 200"* ]]' _ "$1" 2>/dev/null
}

# proc_kib PID FIELD: a /proc/PID/status field (VmRSS, VmHWM) in KiB, or null.
proc_kib() {
    local value
    value=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || true)
    echo "${value:-null}"
}

# start_server NAME [quickstart]: a fresh `hostile serve` (or, for the /mcp
# attacks, the quickstart with its own logging; its stderr alone in the log)
# on a free port, ready; sets PID, PORT, URL (ws://…/haip or http://…/mcp).
start_server() {
    local log=$OUT/$1-server.log deadline
    PORT=$(free_port)
    if [[ ${2:-} == quickstart ]]; then
        # `/mcp` stateless: each attack is a plain POST (no `initialize`),
        # as any instance behind a load balancer would take it.
        env -u HAIP_LOG HAIP_ADDR=127.0.0.1:$PORT HAIP_MCP_SESSIONS=0 "${PIN_SERVER[@]}" "$BIN/examples/quickstart" \
            >"$OUT/$1-server.out" 2>"$log" &
        URL=http://127.0.0.1:$PORT/mcp
    else
        HAIP_ADDR=127.0.0.1:$PORT HAIP_LOG=warn "${PIN_SERVER[@]}" "$BIN/examples/hostile" serve >"$log" 2>&1 &
        URL=ws://127.0.0.1:$PORT/haip
    fi
    PID=$!
    RUNNING[$PID]=server
    deadline=$((SECONDS + 30))
    until health_ok "$PORT"; do
        if ! kill -0 "$PID" 2>/dev/null; then
            echo "error: the server exited before answering /health; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            echo "error: the server does not answer /health on port $PORT after 30 s" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# stop_server PID: stops it; sets STOP_STATUS (0 or 143 when it was still running).
stop_server() {
    local pid=$1
    STOP_STATUS=0
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || STOP_STATUS=$?
    unset "RUNNING[$pid]"
}

# start_sampler NAME PID INTERVAL: samples VmRSS (and fds) into NAME-samples.jsonl.
start_sampler() {
    "${PIN_LOAD[@]}" python3 -B bench/reliability.py --sample "$2" "$3" 1200 >"$OUT/$1-samples.jsonl" &
    SAMPLER=$!
    RUNNING[$SAMPLER]=sampler
}

stop_sampler() {
    kill "$SAMPLER" 2>/dev/null || true
    wait "$SAMPLER" 2>/dev/null || true
    unset "RUNNING[$SAMPLER]"
}

# log_bytes NAME: the size of the server's log so far.
log_bytes() {
    stat -c %s "$OUT/$1-server.log" 2>/dev/null || echo null
}

# finish_server NAME PID RSS_BEFORE [CANARY_MODE [EXTRA_JSON]]: the quiet
# period, the survival check, then 5 s of canary calls (mimalloc returns freed
# pages lazily, when the process allocates again) and VmRSS once more; the
# record, with EXTRA_JSON (`, "key": value…`) appended.
finish_server() {
    local name=$1 pid=$2 before=$3 canary=${4:-canary} extra=${5:-}
    local hwm after after_traffic=null alive=false healthy=false
    hwm=$(proc_kib "$pid" VmHWM)
    sleep "$AFTER_SECONDS"
    after=$(proc_kib "$pid" VmRSS)
    kill -0 "$pid" 2>/dev/null && alive=true
    health_ok "$PORT" && healthy=true
    if [[ $alive == true ]]; then
        timeout 60 "${PIN_LOAD[@]}" "$BIN/examples/hostile" "$canary" "$URL" --duration 5 \
            >"$OUT/$name-canary-after.json" 2>"$OUT/$name-canary-after.err" || true
        after_traffic=$(proc_kib "$pid" VmRSS)
    fi
    stop_server "$pid"
    cat >"$OUT/$name-server.json" <<EOF
{"rss_before_kib": $before, "hwm_kib": $hwm, "rss_after_kib": $after, "after_seconds": $AFTER_SECONDS,
 "rss_after_traffic_kib": $after_traffic, "alive": $alive, "health_ok": $healthy, "exit_status_on_stop": $STOP_STATUS,
 "log_bytes_end": $(log_bytes "$name")$extra}
EOF
    if [[ $alive != true || $healthy != true ]]; then
        echo "   the server did NOT survive (alive: $alive, /health: $healthy); see ${OUT#"$ROOT"/}/$name-server.log" >&2
    fi
}

# run_attack N ARGS...: one attack against a fresh server.
run_attack() {
    local n=$1 name=attack$1 before status=0
    shift
    echo "== attack $n"
    start_server "$name"
    before=$(proc_kib "$PID" VmRSS)
    start_sampler "$name" "$PID" 0.1
    timeout 400 "${PIN_LOAD[@]}" "$BIN/examples/hostile" "$n" "$URL" "$@" \
        >"$OUT/$name.json" 2>"$OUT/$name.err" || status=$?
    stop_sampler
    if ((status != 0)); then
        echo "   error: hostile $n exited with status $status: $(head -c 500 "$OUT/$name.err")" >&2
    fi
    finish_server "$name" "$PID" "$before"
}

# run_mcp_attack NAME: one /mcp attack against a fresh quickstart.
run_mcp_attack() {
    local name=$1 before log_before log_after status=0
    local -a args
    read -r -a args <<<"${MCP_ARGS[$name]:-}"
    echo "== $name"
    start_server "$name" quickstart
    before=$(proc_kib "$PID" VmRSS)
    log_before=$(log_bytes "$name")
    start_sampler "$name" "$PID" 0.1
    timeout 400 "${PIN_LOAD[@]}" "$BIN/examples/hostile" "$name" "$URL" "${args[@]}" \
        >"$OUT/$name.json" 2>"$OUT/$name.err" || status=$?
    log_after=$(log_bytes "$name")
    stop_sampler
    if ((status != 0)); then
        echo "   error: hostile $name exited with status $status: $(head -c 500 "$OUT/$name.err")" >&2
    fi
    finish_server "$name" "$PID" "$before" mcp-canary \
        ", \"log_bytes_before\": $log_before, \"log_bytes_after_attack\": $log_after"
}

LOADAVG_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
selected 1 && run_attack 1 --duration 30
selected 2 && run_attack 2 --count 200
selected 3 && run_attack 3
selected 4 && run_attack 4
selected 5 && run_attack 5 --duration 20
selected 6 && run_attack 6 --count 10050
selected 7 && run_attack 7 --count 400
selected 8 && run_attack 8 --duration 10
for attack in "${MCP_SELECTED[@]}"; do
    run_mcp_attack "$attack"
done

if selected soak; then
    echo "== soak: measuring the maximum echo call rate (haip bench, 50 x 8, 5 s)"
    start_server soak-bench
    status=0
    timeout 120 "${PIN_LOAD[@]}" "$BIN/haip" bench "$URL" \
        --tool echo --params '{"message":"hi"}' --connections 50 --in-flight 8 \
        --duration 5s --server-pid "$PID" --json \
        >"$OUT/soak-bench.json" 2>"$OUT/soak-bench.err" || status=$?
    stop_server "$PID"
    if ((status != 0)); then
        echo "error: haip bench exited with status $status: $(cat "$OUT/soak-bench.err")" >&2
        exit 1
    fi
    RATE=$(python3 -c 'import json, sys; print(max(1, int(json.load(open(sys.argv[1]))["calls_per_second"] / 2)))' "$OUT/soak-bench.json")
    echo "== soak: $RATE calls/s (half the maximum) for $SOAK_SECONDS s"
    start_server soak
    before=$(proc_kib "$PID" VmRSS)
    start_sampler soak "$PID" 5
    status=0
    timeout $((SOAK_SECONDS + 180)) "${PIN_LOAD[@]}" "$BIN/examples/hostile" soak "$URL" \
        --duration "$SOAK_SECONDS" --rate "$RATE" \
        >"$OUT/soak.json" 2>"$OUT/soak.err" || status=$?
    stop_sampler
    if ((status != 0)); then
        echo "   error: hostile soak exited with status $status: $(head -c 500 "$OUT/soak.err")" >&2
    fi
    finish_server soak "$PID" "$before"
fi
LOADAVG_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

cat >"$OUT/meta.json" <<EOF
{
  "nproc": $(nproc),
  "cpu_model": $(python3 -c 'import json; print(json.dumps(next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")))'),
  "memory_kib": $(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo),
  "kernel": "$(uname -sr)",
  "rustc": "$(rustc --version)",
  "commit": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "only": "$ONLY",
  "mcp": "$(IFS=,; echo "${MCP_SELECTED[*]}")",
  "soak_seconds": $SOAK_SECONDS,
  "after_seconds": $AFTER_SECONDS,
  "fd_limit": "$FD_LIMIT",
  "loadavg_before": "$LOADAVG_BEFORE",
  "loadavg_after": "$LOADAVG_AFTER",
  "pinning": "$PINNING",
  "command": "$COMMAND"
}
EOF

# The sections bench/chaos.sh and bench/security.sh write are kept.
CHAOS_SECTION=$(sed -n '/<!-- chaos:begin -->/,/<!-- chaos:end -->/p' RELIABILITY.md 2>/dev/null || true)
SECURITY_SECTION=$(sed -n '/<!-- security:begin -->/,/<!-- security:end -->/p' RELIABILITY.md 2>/dev/null || true)
python3 -B bench/reliability.py "$OUT" >RELIABILITY.md
for section in "$CHAOS_SECTION" "$SECURITY_SECTION"; do
    if [[ -n $section ]]; then
        printf '\n%s\n' "$section" >>RELIABILITY.md
    fi
done
echo "== wrote RELIABILITY.md (raw results in ${OUT#"$ROOT"/})"

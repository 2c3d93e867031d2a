#!/usr/bin/env bash
# What metrics and traces cost: server CPU per echo call of the quickstart
# built with the `metrics` and `otel` features (the examples' default), with
# no trace endpoint ("metrics"), then exporting a span of every call
# ("traces 100%") and of one call in a hundred ("traces 1%") to an OTLP/HTTP
# sink on loopback, each against the same built without either feature
# ("off"), in one run. Writes the "Metrics" section of BENCHMARKS.md (between
# its markers; bench/run.sh keeps it when it rewrites the rest).
#
#   bash bench/metrics.sh
#   BENCH_SECONDS=5 BENCH_REPEAT=5 bash bench/metrics.sh
#
# `haip bench` 1x32 and 50x8, BENCH_REPEAT runs of BENCH_SECONDS each, the two
# servers alternating; the run with the median calls/s is shown. Servers on
# CPU 0, load on CPU 1 (taskset) when there are two CPUs. Only 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_RUN=${BENCH_SECONDS:-3}
REPEAT=${BENCH_REPEAT:-5}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TARGET/bench-metrics
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

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== building (release): the quickstart without metrics and traces, then with"
cargo build --release --quiet -p haip-examples --example quickstart --no-default-features
cp "$TARGET/release/examples/quickstart" "$OUT/quickstart-off"
cargo build --release --quiet -p haip-examples --example quickstart
cp "$TARGET/release/examples/quickstart" "$OUT/quickstart-on"
cargo build --release --quiet -p haip --features cli --bin haip
HAIP=$TARGET/release/haip

PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_port() {
    local port=$1 deadline=$((SECONDS + 20))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            echo "nothing listens on $port after 20 s" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# The OTLP/HTTP sink the tracing servers export to: it reads each export and
# answers 200 (an empty ExportTraceServiceResponse), counting the bytes.
SINK_PORT=$(free_port)
python3 -B - "$SINK_PORT" "$OUT/sink.txt" <<'PY' &
import sys, http.server, threading
port, report = int(sys.argv[1]), sys.argv[2]
got = {"posts": 0, "bytes": 0}
lock = threading.Lock()
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        self.rfile.read(n)
        with lock:
            got["posts"] += 1
            got["bytes"] += n
            with open(report, "w") as f:
                f.write(f"{got['posts']} {got['bytes']}\n")
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
PY
PIDS+=("$!")
wait_port "$SINK_PORT"

# start NAME BINARY [ENV...]: sets PORT and PID
start() {
    local name=$1 binary=$2
    shift 2
    PORT=$(free_port)
    env HAIP_ADDR=127.0.0.1:$PORT HAIP_LOG=warn "$@" "${PIN_SERVER[@]}" "$OUT/quickstart-$binary" \
        >"$OUT/$name.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_port "$PORT"
    declare -g "PID_$name=$PID" "PORT_$name=$PORT"
}

BUILDS=(off metrics traces100 traces1)
start off off
start metrics on
start traces100 on HAIP_OTLP_ENDPOINT="http://127.0.0.1:$SINK_PORT" HAIP_TRACE_SAMPLING=1
start traces1 on HAIP_OTLP_ENDPOINT="http://127.0.0.1:$SINK_PORT" HAIP_TRACE_SAMPLING=0.01
for scenario in "1 32" "50 8"; do
    read -r connections in_flight <<<"$scenario"
    for ((rep = 1; rep <= REPEAT; rep++)); do
        for build in "${BUILDS[@]}"; do
            pid_var=PID_$build port_var=PORT_$build
            pid=${!pid_var} port=${!port_var}
            echo "== $build ${connections}x$in_flight (run $rep/$REPEAT)"
            timeout $((SECONDS_PER_RUN + 60)) "${PIN_LOAD[@]}" "$HAIP" bench "ws://127.0.0.1:$port/haip" \
                --tool echo --params '{"message":"hello"}' --connections "$connections" \
                --in-flight "$in_flight" --duration "${SECONDS_PER_RUN}s" --server-pid "$pid" --json \
                >"$OUT/$build-${connections}x$in_flight-run$rep.json"
        done
    done
done
# The server with metrics on counted every call: the exposition is real.
curl -sf "http://127.0.0.1:$PORT_metrics/metrics" | grep '^haip_tool_calls_finished_total{' >"$OUT/series.txt"
# What the tracing servers exported, and dropped.
for build in traces100 traces1; do
    port_var=PORT_$build
    curl -sf "http://127.0.0.1:${!port_var}/metrics" |
        grep -E '^haip_(trace_spans_dropped_total|tool_calls_finished_total\{tool="echo")' \
            >"$OUT/$build-series.txt" || true
done

COMMIT=$(git rev-parse --short HEAD)
python3 -B - "$OUT" "$PINNING" "$COMMIT" "$SECONDS_PER_RUN" "$REPEAT" <<'PY' >"$OUT/section.md"
import json, os, sys, datetime
out, pinning, commit, seconds, repeat = sys.argv[1:6]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
print("<!-- metrics:begin -->")
print("## Metrics and traces — what `/metrics` and OpenTelemetry cost")
print()
print("Generated by `bench/metrics.sh`; do not edit by hand. "
      f"Commit {commit}, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, "
      f"{pinning}, each row the median of {repeat} runs of {seconds} s, the four servers alternating.")
print()
print("Server CPU per echo call of the quickstart: built without the `metrics` and `otel` features "
      "(`off`); built with them and no trace endpoint (`metrics`: every call counted by tool and "
      "outcome, its duration observed); and the same exporting spans over OTLP/HTTP to a sink on "
      "loopback, for every call (`traces100`) and for one in a hundred (`traces1`). The load sends "
      "no `traceparent`: the sampling ratio decides.")
print()
print("| Scenario | server | calls/s | p50 ms | p99 ms | server CPU µs/call | calls/s of every run |")
print("|---|---|---:|---:|---:|---:|---:|")
ratios = []
for label in ["1x32", "50x8"]:
    rows = {}
    for build in ["off", "metrics", "traces100", "traces1"]:
        runs = [load(f"{build}-{label}-run{r}.json") for r in range(1, int(repeat) + 1)]
        runs.sort(key=lambda r: r.get("calls_per_second", 0))
        median = runs[len(runs) // 2]
        rows[build] = median
        every = " ".join(f"{r.get('calls_per_second', 0):.0f}" for r in runs)
        cpu = median.get("server_cpu_us_per_call")
        print(f"| {label} | {build} | {median.get('calls_per_second', 0):.0f} | "
              f"{median['latency_ms']['p50']:.3f} | {median['latency_ms']['p99']:.3f} | "
              f"{cpu if cpu is None else f'{cpu:.2f}'} | {every} |")
    off = rows["off"].get("server_cpu_us_per_call")
    for build in ["metrics", "traces100", "traces1"]:
        on = rows[build].get("server_cpu_us_per_call")
        if off and on:
            ratios.append((label, build, on / off))
for label, build, ratio in ratios:
    print(f"| {label} | {build} / off | | | | {ratio:.3f}× | |")
print()
print("Targets: `metrics` ≤ 1.05×, `traces1` ≤ 1.10×.")
print()
for build in ["traces100", "traces1"]:
    try:
        with open(os.path.join(out, f"{build}-series.txt")) as f:
            lines = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        lines = []
    print(f"`{build}` after the runs: " + ("; ".join(f"`{l}`" for l in lines) or "no series"))
    print()
try:
    with open(os.path.join(out, "sink.txt")) as f:
        posts, size = f.read().split()
    print(f"The sink received {posts} exports, {int(size) / 1e6:.1f} MB in all.")
    print()
except (FileNotFoundError, ValueError):
    pass
with open(os.path.join(out, "series.txt")) as f:
    series = [line.strip() for line in f if 'tool="echo"' in line]
print("What the server with metrics counted, read from its `/metrics` after the runs:")
print()
print("```")
for line in series:
    print(line)
print("```")
print("<!-- metrics:end -->")
PY
python3 -B - "$OUT/section.md" <<'PY'
import sys, re
section = open(sys.argv[1]).read().strip()
text = open("BENCHMARKS.md").read()
pattern = re.compile(r"<!-- metrics:begin -->.*?<!-- metrics:end -->", re.S)
if pattern.search(text):
    text = pattern.sub(lambda _: section, text)
else:
    text = text.rstrip() + "\n\n" + section + "\n"
open("BENCHMARKS.md", "w").write(text)
PY
cat "$OUT/section.md"
echo "== wrote the 'Metrics' section of BENCHMARKS.md (raw results in $OUT)"

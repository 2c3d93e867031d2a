#!/usr/bin/env bash
# Several instances: what sharing sessions through Redis costs. Writes the
# "Several instances" section of BENCHMARKS.md (between its markers; bench/run.sh
# keeps it when it rewrites the rest).
#
#   bash bench/cluster.sh
#   BENCH_SECONDS=5 BENCH_REPEAT=3 RESUMPTIONS=1000 DETACHED=1000 bash bench/cluster.sh
#
# 1. Server CPU per echo call, the quickstart with its in-memory store against
#    the quickstart with HAIP_REDIS_URL set to one Redis on loopback, to one
#    with a replica that each batch waits for (HAIP_REDIS_WAIT=1,100), and to
#    a three-primary Redis Cluster on loopback (its seed list): `haip bench`
#    1x32 and 50x8, BENCH_REPEAT runs of BENCH_SECONDS each, the servers
#    alternating; the run with the median calls/s is shown. Servers on CPU 0,
#    load and Redis on CPU 1 (taskset) when there are two CPUs.
# 2. examples/cluster_bench.rs against two Redis-backed instances a and b:
#    RESUMPTIONS sessions opened on a and resumed on b (relayed to a), p50/p99
#    from the resuming HAI to the confirming one; then DETACHED sessions left
#    detached on a, Redis's used_memory before and after.
# Needs redis-server (Debian: apt-get install redis-server). Only 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_PER_RUN=${BENCH_SECONDS:-5}
REPEAT=${BENCH_REPEAT:-3}
RESUMPTIONS=${RESUMPTIONS:-1000}
DETACHED=${DETACHED:-1000}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TARGET/bench-cluster
BIN=$TARGET/release
for n in "$SECONDS_PER_RUN" "$REPEAT" "$RESUMPTIONS" "$DETACHED"; do
    case $n in '' | *[!0-9]*) echo "settings must be whole numbers" >&2; exit 2 ;; esac
done
((SECONDS_PER_RUN >= 1 && SECONDS_PER_RUN <= 60)) || { echo "BENCH_SECONDS: 1 to 60" >&2; exit 2; }
((REPEAT >= 1 && REPEAT <= 9)) || { echo "BENCH_REPEAT: 1 to 9" >&2; exit 2; }
REDIS_SERVER=$(command -v redis-server || true)
REDIS_CLI=$(command -v redis-cli || true)
if [[ -z $REDIS_SERVER || -z $REDIS_CLI ]]; then
    echo "redis-server and redis-cli are needed (Debian: apt-get install redis-server)" >&2
    exit 1
fi
if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_SERVER=(taskset -c 0)
    PIN_LOAD=(taskset -c 1)
    PINNING="servers on CPU 0, load and Redis on CPU 1 (taskset)"
else
    PIN_SERVER=()
    PIN_LOAD=()
    PINNING="not pinned"
fi

echo "== building (release)"
cargo build --release --quiet -p haip-examples --example quickstart --example cluster_bench
cargo build --release --quiet -p haip --features cli --bin haip
rm -rf "$OUT"
mkdir -p "$OUT"

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

REDIS_PORT=$(free_port)
mkdir -p "$OUT/redis"
"${PIN_LOAD[@]}" "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$OUT/redis" >"$OUT/redis.log" 2>&1 &
PIDS+=($!)
wait_port "$REDIS_PORT"
REDIS_URL=redis://127.0.0.1:$REDIS_PORT
# A second primary with a replica, for the instance that waits for it
# (HAIP_REDIS_WAIT): its own, so the other rows' Redis replicates nothing.
WAIT_PORT=$(free_port)
REPLICA_PORT=$(free_port)
mkdir -p "$OUT/wait-primary" "$OUT/wait-replica"
"${PIN_LOAD[@]}" "$REDIS_SERVER" --port "$WAIT_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$OUT/wait-primary" >"$OUT/wait-primary.log" 2>&1 &
PIDS+=("$!")
wait_port "$WAIT_PORT"
"${PIN_LOAD[@]}" "$REDIS_SERVER" --port "$REPLICA_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --replicaof 127.0.0.1 "$WAIT_PORT" --dir "$OUT/wait-replica" >"$OUT/wait-replica.log" 2>&1 &
PIDS+=("$!")
wait_port "$REPLICA_PORT"
until "$REDIS_CLI" -p "$WAIT_PORT" info replication 2>/dev/null | grep -q '^connected_slaves:1'; do
    sleep 0.1
done
WAIT_URL=redis://127.0.0.1:$WAIT_PORT

# A three-primary Redis Cluster, no replicas, on CPU 1 like the one Redis.
NODES=()
for node in 1 2 3; do
    port=$(free_port)
    bus=$(free_port)
    mkdir -p "$OUT/node$node"
    "${PIN_LOAD[@]}" "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --cluster-enabled yes --cluster-config-file "$OUT/node$node/nodes.conf" \
        --cluster-node-timeout 2000 --cluster-port "$bus" \
        --dir "$OUT/node$node" >"$OUT/node$node.log" 2>&1 &
    PIDS+=($!)
    wait_port "$port"
    NODES+=("127.0.0.1:$port")
done
timeout 60 "$REDIS_CLI" --cluster create "${NODES[@]}" --cluster-replicas 0 --cluster-yes \
    >"$OUT/cluster-create.log" 2>&1 || { cat "$OUT/cluster-create.log" >&2; exit 1; }
deadline=$((SECONDS + 30))
for node in "${NODES[@]}"; do
    until "$REDIS_CLI" -h 127.0.0.1 -p "${node##*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; do
        if ((SECONDS >= deadline)); then
            echo "the Redis Cluster is not ok after 30 s" >&2
            exit 1
        fi
        sleep 0.1
    done
done
CLUSTER_URL=$(printf 'redis://%s,' "${NODES[@]}")
CLUSTER_URL=${CLUSTER_URL%,}

# start NAME [REDIS_URL [REDIS_WAIT]]: sets PORT and PID
start() {
    PORT=$(free_port)
    if [[ -n ${2:-} ]]; then
        HAIP_ADDR=127.0.0.1:$PORT HAIP_LOG=warn HAIP_REDIS_URL=$2 HAIP_INSTANCE_ID=$1 \
            HAIP_REDIS_WAIT=${3:-} "${PIN_SERVER[@]}" "$BIN/examples/quickstart" >"$OUT/$1.log" 2>&1 &
    else
        HAIP_ADDR=127.0.0.1:$PORT HAIP_LOG=warn "${PIN_SERVER[@]}" "$BIN/examples/quickstart" \
            >"$OUT/$1.log" 2>&1 &
    fi
    PID=$!
    PIDS+=("$PID")
    wait_port "$PORT"
}

start memory
MEMORY_PID=$PID MEMORY_PORT=$PORT
start redis "$REDIS_URL"
REDIS_PID=$PID REDIS_INSTANCE_PORT=$PORT
start cluster "$CLUSTER_URL"
CLUSTER_PID=$PID CLUSTER_INSTANCE_PORT=$PORT
start wait "$WAIT_URL" "1,100"
WAIT_PID=$PID WAIT_INSTANCE_PORT=$PORT
for scenario in "1 32" "50 8"; do
    read -r connections in_flight <<<"$scenario"
    for ((rep = 1; rep <= REPEAT; rep++)); do
        for store in memory redis wait cluster; do
            case $store in
                memory) pid=$MEMORY_PID port=$MEMORY_PORT ;;
                redis) pid=$REDIS_PID port=$REDIS_INSTANCE_PORT ;;
                wait) pid=$WAIT_PID port=$WAIT_INSTANCE_PORT ;;
                cluster) pid=$CLUSTER_PID port=$CLUSTER_INSTANCE_PORT ;;
            esac
            echo "== $store ${connections}x$in_flight (run $rep/$REPEAT)"
            timeout $((SECONDS_PER_RUN + 60)) "${PIN_LOAD[@]}" "$BIN/haip" bench "ws://127.0.0.1:$port/haip" \
                --tool echo --params '{"message":"hello"}' --connections "$connections" \
                --in-flight "$in_flight" --duration "${SECONDS_PER_RUN}s" --server-pid "$pid" --json \
                >"$OUT/$store-${connections}x$in_flight-run$rep.json"
        done
    done
done
kill "$MEMORY_PID" "$REDIS_PID" "$WAIT_PID" "$CLUSTER_PID" 2>/dev/null || true

start a "$REDIS_URL"
A_PORT=$PORT
start b "$REDIS_URL"
B_PORT=$PORT
echo "== $RESUMPTIONS resumptions on the other instance, $DETACHED detached sessions"
timeout 600 "${PIN_LOAD[@]}" "$BIN/examples/cluster_bench" --a "ws://127.0.0.1:$A_PORT/haip" \
    --b "ws://127.0.0.1:$B_PORT/haip" --redis "127.0.0.1:$REDIS_PORT" \
    --resumptions "$RESUMPTIONS" --detached "$DETACHED" >"$OUT/cluster.json"

COMMIT=$(git rev-parse --short HEAD)
python3 -B - "$OUT" "$PINNING" "$COMMIT" "$SECONDS_PER_RUN" "$REPEAT" <<'PY' >"$OUT/section.md"
import json, os, sys, statistics, datetime
out, pinning, commit, seconds, repeat = sys.argv[1:6]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
print("<!-- cluster:begin -->")
print("## Several instances — sessions in Redis")
print()
print("Generated by `bench/cluster.sh`; do not edit by hand. "
      f"Commit {commit}, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, "
      f"{pinning}, Redis on loopback (one server; a Redis Cluster of three primaries), "
      f"each row the median of {repeat} runs of {seconds} s.")
print()
print("Server CPU per echo call, the quickstart with its in-memory session store against the same "
      "with `HAIP_REDIS_URL` set (every committed envelope written to Redis before it is sent): "
      "**redis**, one server; **wait**, one server with a replica, each batch of records waiting "
      "until the replica has it (`HAIP_REDIS_WAIT=1,100`: Redis `WAIT 1 100`); **cluster**, a "
      "three-primary Redis Cluster named by its seed list (each batch of records split by hash "
      "slot, one script per node, sent at once):")
print()
print("| Scenario | store | calls/s | p50 ms | p99 ms | server CPU µs/call | calls/s of every run |")
print("|---|---|---:|---:|---:|---:|---:|")
ratios = []
for label in ["1x32", "50x8"]:
    rows = {}
    for store in ["memory", "redis", "wait", "cluster"]:
        runs = [load(f"{store}-{label}-run{r}.json") for r in range(1, int(repeat) + 1)]
        runs.sort(key=lambda r: r.get("calls_per_second", 0))
        median = runs[len(runs) // 2]
        rows[store] = median
        every = ", ".join(f"{r.get('calls_per_second', 0):,.0f}".replace(",", " ") for r in runs)
        cpu = median.get("server_cpu_us_per_call")
        print(f"| {label} | {store} | {median.get('calls_per_second', 0):,.0f} | "
              f"{median['latency_ms']['p50']:.3f} | {median['latency_ms']['p99']:.3f} | "
              f"{cpu if cpu is None else f'{cpu:.1f}'} | {every} |".replace(",", " ").replace("  ", " "))
    m, mc = rows["memory"].get("server_cpu_us_per_call"), rows["memory"].get("calls_per_second")
    for store in ["redis", "wait", "cluster"]:
        r, rc = rows[store].get("server_cpu_us_per_call"), rows[store].get("calls_per_second")
        if m and r and mc and rc:
            ratios.append((label, store, rc / mc, r / m))
for label, store, calls, cpu in ratios:
    print(f"| {label} | {store} / memory | {calls:.2f}× | | | {cpu:.2f}× | |")
print()
c = load("cluster.json")
print("| Measure | value |")
print("|---|---:|")
print(f"| Resumption on the other instance (relayed to the live owner), p50 over {c['resumptions']} | {c['resume_p50_ms']:.2f} ms |")
print(f"| Resumption on the other instance, p99 over {c['resumptions']} | {c['resume_p99_ms']:.2f} ms |")
print(f"| Redis memory per detached session (one echo call each), over {c['detached']} | {c['redis_bytes_per_detached_session'] / 1024:.1f} KiB |")
print()
print("A resumption is timed from the client's resuming `HAI` to the confirming one: instance b asks "
      "Redis where the session lives, opens a link to a through pub/sub, and a replays the window.")
print("<!-- cluster:end -->")
PY
python3 -B - "$OUT/section.md" <<'PY'
import sys, re
section = open(sys.argv[1]).read().strip()
text = open("BENCHMARKS.md").read()
pattern = re.compile(r"<!-- cluster:begin -->.*?<!-- cluster:end -->", re.S)
if pattern.search(text):
    text = pattern.sub(lambda _: section, text)
else:
    text = text.rstrip() + "\n\n" + section + "\n"
open("BENCHMARKS.md", "w").write(text)
PY
echo "== wrote the 'Several instances' section of BENCHMARKS.md (raw results in $OUT)"

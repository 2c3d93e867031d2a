#!/usr/bin/env bash
# Cluster under chaos: three quickstart instances sharing sessions through one
# Redis, clients (half WebSocket, half SSE) making calls of every kind while
# connections drop, instances are killed (SIGKILL) and handed over (SIGTERM),
# and Redis restarts; then the checker judges the history (seq without gap or
# duplicate, exactly one TOOL_DONE per call, every RESUME_FAILED explained).
# Prints the report, and writes the "Cluster under chaos" section of
# RELIABILITY.md (between its markers; bench/reliability.sh keeps it).
#
#   bash bench/chaos.sh
#   CHAOS_SECONDS=60 CHAOS_CLIENTS=6 CHAOS_SEED=7 bash bench/chaos.sh
#   bash bench/chaos.sh --cluster     # a Redis Cluster, a primary SIGKILLed
#   bash bench/chaos.sh --sentinel    # a primary watched by Redis Sentinel
#
# --cluster: instead of the one Redis, a Redis Cluster of three primaries
# with one replica each (six redis-servers, the instances given all six as
# their seed list); the Redis chaos kills a primary (SIGKILL), waits for its
# replica to be promoted, and starts the killed node again (it rejoins as a
# replica). --sentinel: a primary, its replica and three Sentinels (the
# instances given redis+sentinel://.../haip); the Redis chaos kills the
# primary the Sentinels name, waits for them to promote the replica, and
# starts the killed one again (they make it a replica). Each topology has
# its own section of RELIABILITY.md ("Cluster under chaos", "... — Redis
# Cluster", "... — Redis Sentinel": markers chaos, chaos-cluster,
# chaos-sentinel, the last two inside the first, so that bench/reliability.sh
# keeps them all); a run replaces its own section only.
#
# RELIABILITY.md is written by a default (single) run, as always, and by a
# --cluster or --sentinel run of CHAOS_SECONDS >= 600; CHAOS_WRITE=1 writes
# it whatever the length, CHAOS_WRITE=0 never (the section is still printed
# and left in the history directory as section.md).
#
# Needs redis-server (Debian: apt-get install redis-server), and redis-cli
# for --cluster. Only 127.0.0.1. Bounded: the run takes CHAOS_SECONDS plus
# at most 90 s of drain (each process under `timeout`). Exits 1 when the
# checker found violations.
set -euo pipefail

TOPOLOGY=single
for arg in "$@"; do
    case $arg in
        --cluster) TOPOLOGY=cluster ;;
        --sentinel) TOPOLOGY=sentinel ;;
        --single) TOPOLOGY=single ;;
        *) echo "usage: bash bench/chaos.sh [--cluster | --sentinel]" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_TO_RUN=${CHAOS_SECONDS:-900}
CLIENTS=${CHAOS_CLIENTS:-6}
SEED=${CHAOS_SEED:-1}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ $TOPOLOGY == single ]]; then OUT=$TARGET/bench-chaos; else OUT=$TARGET/bench-chaos-$TOPOLOGY; fi
BIN=$TARGET/release/examples
for n in "$SECONDS_TO_RUN" "$CLIENTS" "$SEED"; do
    case $n in '' | *[!0-9]*) echo "settings must be whole numbers" >&2; exit 2 ;; esac
done
((SECONDS_TO_RUN >= 10 && SECONDS_TO_RUN <= 86400)) || { echo "CHAOS_SECONDS: 10 to 86400" >&2; exit 2; }
((CLIENTS >= 1 && CLIENTS <= 64)) || { echo "CHAOS_CLIENTS: 1 to 64" >&2; exit 2; }
REDIS_SERVER=$(command -v redis-server || true)
if [[ -z $REDIS_SERVER ]]; then
    echo "redis-server is needed (Debian: apt-get install redis-server)" >&2
    exit 1
fi
EXTRA=()
if [[ $TOPOLOGY == cluster ]]; then
    REDIS_CLI=$(command -v redis-cli || true)
    if [[ -z $REDIS_CLI ]]; then
        echo "redis-cli is needed for --cluster (Debian: apt-get install redis-tools)" >&2
        exit 1
    fi
    EXTRA+=(--redis-cli "$REDIS_CLI")
fi
if [[ $TOPOLOGY != single ]]; then
    EXTRA+=(--topology "$TOPOLOGY")
fi
case ${CHAOS_WRITE:-} in
    1) WRITE=1 ;;
    0) WRITE=0 ;;
    '') if [[ $TOPOLOGY == single ]] || ((SECONDS_TO_RUN >= 600)); then WRITE=1; else WRITE=0; fi ;;
    *) echo "CHAOS_WRITE: 0 or 1" >&2; exit 2 ;;
esac

echo "== building (release)"
cargo build --release --quiet -p haip-examples --example quickstart --example chaos
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== chaos for $SECONDS_TO_RUN s, $CLIENTS clients, seed $SEED, Redis: $TOPOLOGY (history in $OUT)"
# The run kills its own children on exit; `timeout` bounds it from outside
# (a failover and its rejoining add up to 90 s to the run's end).
LIMIT=$((SECONDS_TO_RUN + 240))
[[ $TOPOLOGY == single ]] || LIMIT=$((LIMIT + 180))
timeout --kill-after=10 "$LIMIT" "$BIN/chaos" run --dir "$OUT" \
    --seconds "$SECONDS_TO_RUN" --clients "$CLIENTS" --seed "$SEED" \
    --quickstart "$BIN/quickstart" --redis-server "$REDIS_SERVER" ${EXTRA[@]+"${EXTRA[@]}"}

echo "== check"
STATUS=0
"$BIN/chaos" check --dir "$OUT" || STATUS=$?
if ((STATUS > 1)); then
    echo "the checker could not read the history" >&2
    exit "$STATUS"
fi

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo
echo "== for RELIABILITY.md"
python3 -B - "$OUT/report.json" "$COMMIT" "$SECONDS_TO_RUN" "$CLIENTS" "$SEED" "$TOPOLOGY" "$OUT/events.jsonl" <<'PY' >"$OUT/section.md"
import json, sys, datetime
path, commit, seconds, clients, seed, topology, events_path = sys.argv[1:8]
r = json.load(open(path))
lat = r.get("resume_latency") or {}
def ms(key):
    v = lat.get(key)
    return "—" if v is None else f"{v:.0f} ms"
kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["calls_by_kind"].items()))
dones = ", ".join(f"{k} {v}" for k, v in sorted(r["dones_by_outcome"].items()))
events = ", ".join(f"{k} {v}" for k, v in sorted(r["events"].items()) if k not in ("start", "end"))
failed = r["resume_failed"]
explained = sum(v["explained"] for v in failed.values())
unexplained = sum(v["unexplained"] for v in failed.values())
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
marker = "chaos" if topology == "single" else f"chaos-{topology}"
heading = {"single": "Cluster under chaos",
           "cluster": "Cluster under chaos — Redis Cluster",
           "sentinel": "Cluster under chaos — Redis Sentinel"}[topology]
command = "`bench/chaos.sh`" if topology == "single" else f"`bench/chaos.sh --{topology}`"
redis = {"single": "three instances and one Redis on loopback.",
         "cluster": "three instances sharing sessions through a Redis Cluster of three primaries "
                    "with one replica each (six `redis-server`s, all six given to the instances "
                    "as the seed list), on loopback.",
         "sentinel": "three instances sharing sessions through a primary and its replica watched "
                     "by three Redis Sentinels (`redis+sentinel://…/haip`), on loopback."}[topology]
print(f"<!-- {marker}:begin -->")
print(f"## {heading}")
print()
print(f"Generated by {command}: commit {commit}, {now}, {seconds} s, {clients} clients "
      f"(half WebSocket, half SSE), seed {seed}, {redis}")
print()
print("| Measure | value |")
print("|---|---:|")
print(f"| Calls | {r['calls']} ({kinds}) |")
print(f"| TOOL_DONEs | {dones} |")
print(f"| Chaos | {events} |")
if topology != "single":
    history = []
    for line in open(events_path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("t") == "event":
            history.append(e)
    killed = [e.get("detail", "").split(" ")[0] for e in history if e.get("what") == "redis_stop"]
    def spread(what):
        took = sorted(e["took_ms"] / 1000 for e in history
                      if e.get("what") == what and isinstance(e.get("took_ms"), (int, float)))
        if not took:
            return "—"
        def s(v):
            return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"
        return f"{s(took[0])} / {s(took[len(took) // 2])} / {s(took[-1])} ({len(took)})"
    promoted = ("its replica promoted and every running node `cluster_state:ok`"
                if topology == "cluster" else
                "every Sentinel names the replica, which says it is a primary")
    print(f"| Primaries killed (SIGKILL) | {len(killed)}: {', '.join(killed) or '—'} |")
    print(f"| Failover: from the kill until {promoted}, min / median / max | {spread('redis_failover')} |")
    print(f"| Killed primary started again until it is a replica in sync, min / median / max | {spread('redis_rejoined')} |")
print(f"| Resumptions confirmed | {r['resumes_ok']} |")
print(f"| Failovers (resumed on another instance after a kill or handover) | {r['failovers']} |")
print(f"| Resume latency p50 / p99 / max (from the resuming `HAI` to the confirming one) | {ms('p50_ms')} / {ms('p99_ms')} / {ms('max_ms')} |")
print(f"| RESUME_FAILED explained / unexplained | {explained} / {unexplained} |")
if topology != "single" and failed:
    reasons = ", ".join(f"\"{k}\" {v['explained'] + v['unexplained']}" for k, v in sorted(failed.items()))
    print(f"| RESUME_FAILED by reason | {reasons} |")
print(f"| Calls excused (session lost for an accepted cause) | {r['excused_calls']} |")
print(f"| Violations | {len(r['violations'])} |")
if r["violations"]:
    import re
    def kind(d):
        if d.startswith("RESUME_FAILED"):
            reason = d.split('"')[1]
            after = re.search(r"s after (\w+)", d)
            return f'RESUME_FAILED "{reason}"' + (f" (after a {after.group(1)})" if after else "")
        for words, name in [("got no TOOL_DONE", "call without TOOL_DONE"),
                            ("TOOL_DONEs", "call with several TOOL_DONEs"),
                            ("after its TOOL_DONE", "update after TOOL_DONE"),
                            ("gap:", "seq gap"), ("out of order:", "seq out of order"),
                            ("different bytes", "replay not byte-identical"),
                            ("malformed", "malformed history line")]:
            if words in d:
                return name
        return d[:60]
    counts = {}
    for v in r["violations"]:
        counts[kind(v["detail"])] = counts.get(kind(v["detail"]), 0) + 1
    print()
    print("| Violation | count |")
    print("|---|---:|")
    for k, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {n} |")
print()
print("A client resuming right after its instance was killed is held until that instance's "
      "lease expires (up to 6 s), then its session is restored: those resumptions make the p99 "
      "and the max; one relayed to a live instance, or restored after a handover, takes "
      "milliseconds.")
print()
if topology == "cluster":
    print("The Redis chaos: a node that is a primary, its replica in sync, is killed with SIGKILL "
          "(`redis_stop`); once the replica is promoted and every running node says "
          "`cluster_state:ok` (`redis_failover`), the killed node is started again on its port, "
          "directory and `nodes.conf` (`redis_start`) and rejoins as a replica "
          "(`redis_rejoined`). It comes once among the first three events, then one event in ten. "
          "Only the sessions whose hash slots the killed primary held (and the keys tagged "
          "`{haip}`, if it held them) lose their store meanwhile; what it acknowledged but had "
          "not yet replicated is lost with it (replication is asynchronous).")
    print()
elif topology == "sentinel":
    print("The Redis chaos: the primary the Sentinels name is killed with SIGKILL (`redis_stop`); "
          "once every Sentinel names the replica and it says it is a primary "
          "(`redis_failover`), the killed server is started again as it was first started "
          "(`redis_start`) and the Sentinels make it a replica (`redis_rejoined`). It comes once "
          "among the first three events, then one event in ten. The instances find the new "
          "primary by asking the Sentinels again; what the killed primary acknowledged but had "
          "not yet replicated is lost with it (replication is asynchronous).")
    print()
cause = ("store trouble around the Redis restart, or records lost while Redis was away."
         if topology == "single" else
         "store trouble around a primary's kill and failover (from `redis_stop` to `redis_start`), "
         "or records lost meanwhile.")
print("Every session's `seq` is checked for gaps and duplicates across connections (a replayed "
      "envelope must be byte-identical), every call sent for exactly one `TOOL_DONE` and nothing "
      "after it, and every `RESUME_FAILED` for a cause the checker accepts "
      f"(`haip_examples::chaos_check`): {cause}")
print(f"<!-- {marker}:end -->")
PY
cat "$OUT/section.md"
if ((WRITE == 0)); then
    echo "== RELIABILITY.md left as it is (a $TOPOLOGY run of $SECONDS_TO_RUN s; CHAOS_WRITE=1 writes it); the section is in $OUT/section.md"
    exit "$STATUS"
fi
python3 -B - "$OUT/section.md" "$TOPOLOGY" RELIABILITY.md <<'PY'
import sys, re
section, topology, doc = open(sys.argv[1]).read().strip(), sys.argv[2], sys.argv[3]
text = open(doc).read()
# The single run's section is the outer block; the cluster's and the
# Sentinel's sit inside it, before its end marker, so that
# bench/reliability.sh (which keeps the outer block) keeps them too.
outer = re.compile(r"<!-- chaos:begin -->.*?<!-- chaos:end -->", re.S)
def nested_pattern(name):
    return re.compile(rf"<!-- chaos-{name}:begin -->.*?<!-- chaos-{name}:end -->", re.S)
found = outer.search(text)
block = found.group(0) if found else "<!-- chaos:begin -->\n<!-- chaos:end -->"
nested = {}
for name in ("cluster", "sentinel"):
    m = nested_pattern(name).search(block)
    if m:
        nested[name] = m.group(0)
        block = block.replace(m.group(0), "")
single = block[: block.rindex("<!-- chaos:end -->")].strip()
if topology == "single":
    single = section[: section.rindex("<!-- chaos:end -->")].strip()
else:
    nested[topology] = section
parts = [single] + [nested[n] for n in ("cluster", "sentinel") if n in nested]
block = "\n\n".join(parts) + "\n<!-- chaos:end -->"
if found:
    text = text[: found.start()] + block + text[found.end():]
else:
    text = text.rstrip() + "\n\n" + block + "\n"
open(doc, "w").write(text)
PY
echo "== wrote the $TOPOLOGY section of 'Cluster under chaos' in RELIABILITY.md (history in $OUT)"
exit "$STATUS"

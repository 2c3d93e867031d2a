#!/usr/bin/env bash
# Build cost: what a one-tool server costs to build, haip against the
# smallest rmcp servers, all in one run on this machine (bench/build/):
#   haip-only   `#[haip_tool] echo` + `haip::serve()`, HAIP alone
#               (`default-features = false`);
#   haip        the same with haip's default features (HAIP and `/mcp`);
#   rmcp-stdio  rmcp 3.11, one `echo` tool over stdio;
#   rmcp-http   rmcp 3.11, one `echo` tool over its Streamable HTTP server,
#               served by hyper.
# For each, with its own lockfile and its own target directory: a clean
# debug build (dependencies fetched beforehand, not timed), the crates it
# compiles, the debug binary's size, and the median of BUILD_REPEAT
# rebuilds after touching src/main.rs. Clean builds run one after another,
# never at once. Writes the "Build" section of BENCHMARKS.md (between its
# markers).
#
#   bash bench/build.sh
#   BUILD_REPEAT=5 bash bench/build.sh
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
REPEAT=${BUILD_REPEAT:-3}
case $REPEAT in '' | *[!0-9]*) echo "BUILD_REPEAT: a whole number" >&2; exit 2 ;; esac
((REPEAT >= 1 && REPEAT <= 9)) || { echo "BUILD_REPEAT: 1 to 9" >&2; exit 2; }
OUT=$ROOT/target/build-bench
FIXTURES=(haip-only haip rmcp-stdio rmcp-http)
rm -rf "$OUT"
mkdir -p "$OUT"

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }

for fixture in "${FIXTURES[@]}"; do
    manifest=bench/build/$fixture/Cargo.toml
    target=$OUT/$fixture/target
    echo "== $fixture"
    # The lockfile pins the registry crates; haip itself is a path: a change
    # of its dependencies updates the lockfile here, the least it must.
    cargo fetch --quiet --manifest-path "$manifest"
    # Clean: nothing of this fixture built before, in its own target dir.
    started=$(now)
    CARGO_TARGET_DIR=$target cargo build --frozen --manifest-path "$manifest" \
        2>"$OUT/$fixture.clean.log"
    clean=$(elapsed "$started" "$(now)")
    crates=$(grep -c '^ *Compiling ' "$OUT/$fixture.clean.log" || true)
    binary=$target/debug/build-$fixture
    size=$(stat -c %s "$binary")
    # Incremental: the one file a user edits, touched, rebuilt.
    rebuilds=()
    for _ in $(seq "$REPEAT"); do
        touch "bench/build/$fixture/src/main.rs"
        started=$(now)
        CARGO_TARGET_DIR=$target cargo build --frozen --quiet --manifest-path "$manifest"
        rebuilds+=("$(elapsed "$started" "$(now)")")
    done
    incremental=$(printf '%s\n' "${rebuilds[@]}" | sort -n | sed -n "$(((REPEAT + 1) / 2))p")
    echo "   clean ${clean} s, ${crates} crates, binary ${size} bytes, rebuild ${incremental} s (of ${rebuilds[*]})"
    printf '%s %s %s %s %s\n' "$fixture" "$clean" "$crates" "$size" "$incremental" >>"$OUT/results.txt"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || true)
python3 -B - "$OUT/results.txt" "$REPEAT" "$(nproc)" "$cpu" "$(rustc --version)" <<'PY'
import re, sys
path, repeat, cores, cpu, rustc = sys.argv[1:6]
rows = {}
for line in open(path):
    name, clean, crates, size, rebuild = line.split()
    rows[name] = dict(clean=float(clean), crates=int(crates), size=int(size), rebuild=float(rebuild))
base = rows["rmcp-http"]
label = {
    "haip-only": "haip, `default-features = false` (HAIP only)",
    "haip": "haip, default features (HAIP and `/mcp`)",
    "rmcp-stdio": "rmcp 3.11, stdio",
    "rmcp-http": "rmcp 3.11 + Streamable HTTP server + hyper",
}
lines = [
    "<!-- build:begin -->",
    "## Build",
    "",
    "What a one-tool server (`echo`) costs to build: clean debug builds one after another, each with",
    "its own lockfile and target directory (dependencies fetched first, not timed); the crates each",
    f"compiles; its debug binary; the median of {repeat} rebuilds after touching `src/main.rs`.",
    f"Ratios against the rmcp Streamable HTTP server of the same run. `bash bench/build.sh`; {cores}",
    f"cores ({cpu}), {rustc}. Fixtures: `bench/build/`.",
    "",
    "| server | clean build | crates | debug binary | rebuild after touching main.rs |",
    "|---|---:|---:|---:|---:|",
]
for name in ["haip-only", "haip", "rmcp-stdio", "rmcp-http"]:
    r = rows[name]
    mib = r["size"] / 2**20
    lines.append(
        f"| {label[name]} | {r['clean']:.1f} s ({r['clean'] / base['clean']:.2f}×) "
        f"| {r['crates']} | {mib:.0f} MiB ({r['size'] / base['size']:.2f}×) "
        f"| {r['rebuild']:.2f} s ({r['rebuild'] / base['rebuild']:.2f}×) |"
    )
lines += [
    "",
    "Targets (issue 42) for haip with its default features against the rmcp Streamable HTTP server:",
    "clean build ≤ 1.0×, ≤ 100 crates, debug binary ≤ 1.5×, rebuild ≤ 1.1×.",
    "<!-- build:end -->",
]
section = "\n".join(lines)
open(path.replace("results.txt", "section.md"), "w").write(section + "\n")
text = open("BENCHMARKS.md").read()
pattern = re.compile(r"<!-- build:begin -->.*?<!-- build:end -->", re.S)
if pattern.search(text):
    text = pattern.sub(lambda _: section, text)
elif "<!-- mcp-door:end -->" in text:
    text = text.replace("<!-- mcp-door:end -->", "<!-- mcp-door:end -->\n\n" + section, 1)
else:
    text = text.rstrip() + "\n\n" + section + "\n"
open("BENCHMARKS.md", "w").write(text)
PY
cat "$OUT/section.md"
echo "== wrote the 'Build' section of BENCHMARKS.md (logs in ${OUT#"$ROOT"/})"

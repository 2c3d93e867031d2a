#!/usr/bin/env bash
# Installs the MCP implementations the MCP bridge is tested against (they are
# not ours): the reference "everything" server (npm) and the Python MCP SDK
# (in a virtualenv), and the model providers' schema validators the schema
# profile tests check with (google-genai, jsonschema; same virtualenv). Both go under target/mcp-deps, where the tests look for
# them (or under $HAIP_MCP_DEPS). Needs node/npm and python3. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."

EVERYTHING_VERSION="2026.8.31"
PYTHON_MCP_VERSION="2.3.0"
# The model providers' own schema validators (tests/schema/check_profiles.py).
GOOGLE_GENAI_VERSION="3.6.1"
JSONSCHEMA_VERSION="4.26.0"
deps="${HAIP_MCP_DEPS:-$PWD/target/mcp-deps}"
mkdir -p "$deps"

everything="$deps/node/node_modules/@modelcontextprotocol/server-everything"
if ! grep -q "\"version\": \"$EVERYTHING_VERSION\"" "$everything/package.json" 2>/dev/null; then
    echo "installing @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $deps/node"
    npm install --no-audit --no-fund --loglevel=error --prefix "$deps/node" \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
fi

if ! "$deps/py/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$PYTHON_MCP_VERSION')" 2>/dev/null; then
    echo "installing the Python mcp SDK $PYTHON_MCP_VERSION into $deps/py"
    python3 -m venv "$deps/py"
    "$deps/py/bin/pip" install --quiet --disable-pip-version-check "mcp==$PYTHON_MCP_VERSION"
fi

if ! "$deps/py/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('google-genai') != '$GOOGLE_GENAI_VERSION' or m.version('jsonschema') != '$JSONSCHEMA_VERSION')" 2>/dev/null; then
    echo "installing google-genai $GOOGLE_GENAI_VERSION and jsonschema $JSONSCHEMA_VERSION into $deps/py"
    "$deps/py/bin/pip" install --quiet --disable-pip-version-check \
        "google-genai==$GOOGLE_GENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION"
fi
echo "MCP test dependencies are in $deps"

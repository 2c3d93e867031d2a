// The official TypeScript MCP SDK's client (@modelcontextprotocol/sdk,
// installed by tests/conformance/setup.sh) against a haip server with the
// default /mcp settings (run by tests/tests/mcp_first_hour.rs):
//
//     node ts_client.mjs <url>
//
// with HAIP_TS_SDK naming the node_modules the SDK is in. Over
// StreamableHTTPClientTransport, with the SDK's own handshake (`initialize`,
// MCP 2025-11-25) and the elicitation capability declared:
//
// - the server opens a session (the transport has a session id);
// - `delete_files` asks `ctx.confirm(...)`: the question reaches the
//   elicitation handler (a form of one boolean, `confirm`), which accepts
//   with {confirm: true}, and the tool answers {confirmed: true};
// - `steps` reports progress, which arrives in order before its result;
// - `wait` is cancelled once it has reported progress (the SDK sends
//   notifications/cancelled; the Rust test checks that the tool saw it);
// - ending the session (DELETE) succeeds (200 or 204).
//
// Exits 0 and prints a summary starting with "ok:" when every check holds;
// prints the failed check to stderr and exits 1 otherwise.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const url = process.argv[2];
const modules = process.env.HAIP_TS_SDK;
if (!url || !modules) {
  console.error("usage: HAIP_TS_SDK=<node_modules> node ts_client.mjs <url>");
  process.exit(2);
}
const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { ElicitRequestSchema } = await sdk("types.js");

function check(condition, message) {
  if (!condition) {
    throw new Error(`check failed: ${message}`);
  }
}

/// Fails after `ms` instead of waiting forever.
function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// Every DELETE the transport sends, with its status.
const deletes = [];
const recordingFetch = async (input, init) => {
  const response = await fetch(input, init);
  if ((init?.method ?? "GET") === "DELETE") {
    deletes.push(response.status);
  }
  return response;
};

async function main() {
  const client = new Client(
    { name: "haip-first-hour", version: "0" },
    { capabilities: { elicitation: {} } },
  );
  const questions = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    questions.push(request.params);
    return { action: "accept", content: { confirm: true } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
  await within(10000, "connect", client.connect(transport));
  check(transport.sessionId, "the server opened no session (no Mcp-Session-Id)");
  const version = transport.protocolVersion;
  check(version === "2025-11-25", `negotiated ${version}, not 2025-11-25`);

  // The question, answered.
  const confirmed = await within(
    10000,
    "delete_files",
    client.callTool({ name: "delete_files", arguments: {} }),
  );
  check(!confirmed.isError, `delete_files failed: ${JSON.stringify(confirmed)}`);
  check(
    confirmed.structuredContent?.confirmed === true,
    `delete_files did not see the confirmation: ${JSON.stringify(confirmed)}`,
  );
  check(questions.length === 1, `expected one question, got ${JSON.stringify(questions)}`);
  const asked = questions[0];
  check(asked.message === "Delete 3 files?", `the question's message: ${JSON.stringify(asked)}`);
  check(
    asked.requestedSchema?.properties?.confirm?.type === "boolean",
    `the question's form: ${JSON.stringify(asked)}`,
  );

  // Progress, in order, before the result.
  const progress = [];
  const stepped = await within(
    10000,
    "steps",
    client.callTool({ name: "steps", arguments: {} }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    }),
  );
  check(!stepped.isError, `steps failed: ${JSON.stringify(stepped)}`);
  check(progress.length >= 2, `expected progress notifications, got ${JSON.stringify(progress)}`);
  check(
    progress.every((p, i) => i === 0 || progress[i - 1] < p),
    `progress is not increasing: ${JSON.stringify(progress)}`,
  );

  // Cancelled once it runs.
  const abort = new AbortController();
  const waited = client
    .callTool({ name: "wait", arguments: {} }, undefined, {
      signal: abort.signal,
      onprogress: () => abort.abort("the user pressed stop"),
    })
    .then(
      (result) => ({ result }),
      (error) => ({ error }),
    );
  const outcome = await within(10000, "wait to be cancelled", waited);
  check(outcome.error, `wait was not cancelled: ${JSON.stringify(outcome.result)}`);

  // The session still serves calls after the cancellation.
  const again = await within(
    10000,
    "steps after the cancellation",
    client.callTool({ name: "steps", arguments: {} }),
  );
  check(!again.isError, `steps after the cancellation failed: ${JSON.stringify(again)}`);

  await within(10000, "terminateSession", transport.terminateSession());
  await client.close();
  check(deletes.length === 1, `expected one DELETE, got ${JSON.stringify(deletes)}`);
  check([200, 204].includes(deletes[0]), `DELETE answered ${deletes[0]}`);

  return (
    `ok: MCP ${version} session; confirm answered (${JSON.stringify(confirmed.structuredContent)}); ` +
    `progress ${JSON.stringify(progress)}; wait cancelled; DELETE ${deletes[0]}`
  );
}

try {
  console.log(await main());
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}

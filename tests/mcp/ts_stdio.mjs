// The official TypeScript MCP SDK's client (@modelcontextprotocol/sdk,
// installed by tests/conformance/setup.sh) against haip's MCP stdio export
// (run by tests/tests/mcp_python.rs):
//
//     node ts_stdio.mjs <server binary>
//
// with HAIP_TS_SDK naming the node_modules the SDK is in. The binary (the
// `mcp_export` example, the quickstart's tools) is started by the SDK's
// StdioClientTransport; the client declares elicitation:
//
// - `tools/list` lists the quickstart's tools;
// - `process_file` reports progress, increasing, before its result;
// - `book_table` asks how many people and when (`elicitation/create`); the
//   handler accepts 2 at 18:00, and the table is booked;
// - a second `process_file` is cancelled once it has reported progress (the
//   SDK sends notifications/cancelled), and no result arrives for it;
// - `calculator` still answers after that.
//
// Exits 0 and prints a summary starting with "ok:" when every check holds;
// prints the failed check to stderr and exits 1 otherwise.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const binary = process.argv[2];
const modules = process.env.HAIP_TS_SDK;
if (!binary || !modules) {
  console.error("usage: HAIP_TS_SDK=<node_modules> node ts_stdio.mjs <server binary>");
  process.exit(2);
}
const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { ElicitRequestSchema } = await sdk("types.js");

const QUICKSTART = ["echo", "add", "weather", "calculator", "process_file", "create_user", "book_table"];
const PROCESS_ARGS = { filename: "data.csv", operation: "read" };

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

async function main() {
  const client = new Client(
    { name: "haip-stdio", version: "0" },
    { capabilities: { elicitation: {} } },
  );
  const questions = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    questions.push(request.params);
    return { action: "accept", content: { party_size: 2, time: "18:00" } };
  });
  const transport = new StdioClientTransport({
    command: binary,
    args: [],
    env: { ...process.env, HAIP_LOG: "warn" },
    stderr: "inherit",
  });
  await within(10000, "connect", client.connect(transport));

  const listed = await within(10000, "tools/list", client.listTools());
  const names = listed.tools.map((t) => t.name);
  check(
    JSON.stringify(names) === JSON.stringify(QUICKSTART),
    `tools/list: ${JSON.stringify(names)}`,
  );

  // Progress, increasing, before the result.
  const progress = [];
  const processed = await within(
    10000,
    "process_file",
    client.callTool({ name: "process_file", arguments: PROCESS_ARGS }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    }),
  );
  check(!processed.isError, `process_file failed: ${JSON.stringify(processed)}`);
  check(progress.length >= 2, `expected progress notifications, got ${JSON.stringify(progress)}`);
  check(
    progress.every((p, i) => i === 0 || progress[i - 1] < p),
    `progress is not increasing: ${JSON.stringify(progress)}`,
  );

  // The question, answered.
  const booked = await within(
    10000,
    "book_table",
    client.callTool({ name: "book_table", arguments: { restaurant: "Chez Haip" } }),
  );
  check(!booked.isError, `book_table failed: ${JSON.stringify(booked)}`);
  const expected = { booked: true, restaurant: "Chez Haip", party_size: 2, time: "18:00" };
  const got = booked.structuredContent ?? {};
  check(
    Object.keys(got).length === Object.keys(expected).length &&
      Object.entries(expected).every(([key, value]) => got[key] === value),
    `book_table: ${JSON.stringify(got)}`,
  );
  check(questions.length === 1, `expected one question, got ${JSON.stringify(questions)}`);
  check(
    questions[0].message === "How many people, and when?",
    `the question: ${JSON.stringify(questions[0])}`,
  );

  // Cancelled once it runs.
  const abort = new AbortController();
  const cancelled = await within(
    10000,
    "process_file to be cancelled",
    client
      .callTool({ name: "process_file", arguments: PROCESS_ARGS }, undefined, {
        signal: abort.signal,
        onprogress: () => abort.abort("the user pressed stop"),
      })
      .then(
        (result) => ({ result }),
        (error) => ({ error }),
      ),
  );
  check(cancelled.error, `process_file was not cancelled: ${JSON.stringify(cancelled.result)}`);

  // The session still serves calls after the cancellation.
  const product = await within(
    10000,
    "calculator after the cancellation",
    client.callTool({ name: "calculator", arguments: { operation: "multiply", a: 6, b: 7 } }),
  );
  check(
    !product.isError && product.structuredContent?.result === 42,
    `calculator: ${JSON.stringify(product)}`,
  );
  await client.close();
  return (
    `ok: stdio; ${names.length} tools; progress ${JSON.stringify(progress)}; ` +
    `book_table ${JSON.stringify(booked.structuredContent)}; process_file cancelled`
  );
}

try {
  console.log(await main());
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}

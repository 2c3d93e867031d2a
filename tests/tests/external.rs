//! `haip::testing` as a user outside this workspace meets it: the crate
//! `tests/external/toolset-user` (its own workspace, depending on haip by
//! path with feature `testing`, and on a second outside crate,
//! `tests/external/toolset-lib`, that exports the tools) runs `cargo test`,
//! and its tests, which call the tools in memory, pass in well under a
//! second.
//!
//! It builds in this workspace's target directory, so what is built once is
//! reused; the first run builds haip with that crate's features.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The time a user's whole tool test file may take.
const FAST: f64 = 1.0;

#[test]
fn an_outside_crate_tests_its_tools_in_memory_within_a_second() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let user = workspace.join("tests/external/toolset-user");
    // The workspace's versions of every dependency: nothing is resolved
    // anew, and what the workspace built is reused where features agree.
    std::fs::copy(workspace.join("Cargo.lock"), user.join("Cargo.lock"))
        .expect("the workspace's Cargo.lock copied");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let out = Command::new(cargo)
        .args(["test", "--color", "never"])
        .current_dir(&user)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo test in {} failed\nstdout:\n{stdout}\nstderr:\n{stderr}",
        user.display()
    );
    eprintln!(
        "cargo test in toolset-user: {:.1} s with the build",
        started.elapsed().as_secs_f64()
    );
    // `test result: ok. 4 passed; 0 failed; ...; finished in 0.03s`, one
    // line per test binary (the library's, tools.rs's, the doc tests').
    let results: Vec<(usize, f64)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .map(|rest| {
            let passed = rest
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a count of passed tests in {rest:?}"));
            let secs = rest
                .rsplit_once("finished in ")
                .and_then(|(_, t)| t.trim_end_matches('s').parse().ok())
                .unwrap_or_else(|| panic!("a time in {rest:?}"));
            (passed, secs)
        })
        .collect();
    let passed: usize = results.iter().map(|(n, _)| n).sum();
    assert!(passed >= 4, "the tool tests ran: {stdout}");
    for (n, secs) in &results {
        assert!(
            *secs < FAST,
            "{n} tests took {secs} s, not under {FAST} s:\n{stdout}"
        );
    }
}

/// This run's target directory (absolute, wherever the workspace's build
/// put it): test binaries are in `<target>/<profile>/deps`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.ancestors()
        .nth(3)
        .expect("test binaries live in <target>/<profile>/deps")
        .to_path_buf()
}

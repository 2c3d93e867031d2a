//! Issue 38, the first hour with haip: the lines a server prints as it
//! starts name every endpoint a client may use, `/mcp` included when the
//! MCP endpoint is on (on a line of its own, after the unchanged
//! `haip listening on ws://…/haip` that scripts read).
//!
//! The line goes to stderr when nothing set up `tracing` (as in a program
//! that only calls `haip::serve()`), so the test runs itself again as a
//! child process whose stderr it reads: the child, this same test binary
//! with `HAIP_FIRST_HOUR_CHILD` set, starts two servers and stops.

use std::process::Command;

const CHILD: &str = "HAIP_FIRST_HOUR_CHILD";

/// In the child: one server with the MCP endpoint (the default), one
/// without. In the parent: does nothing.
#[tokio::test]
async fn child_starts_servers() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    for mcp in [true, false] {
        let handle = haip::Server::builder()
            .addr("127.0.0.1:0")
            .mcp_endpoint(mcp)
            .builtin_tools()
            .build()
            .unwrap()
            .start()
            .await
            .unwrap();
        eprintln!("started {}", handle.local_addr());
        handle.shutdown().await;
    }
}

#[test]
fn the_startup_lines_name_the_haip_and_mcp_urls() {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let out = Command::new(exe)
        .args([
            "first_hour_startup::child_starts_servers",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed:\n{stderr}");
    let started: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("started "))
        .collect();
    assert_eq!(started.len(), 2, "{stderr}");
    let with = started[0];
    assert!(
        stderr.contains(&format!(
            "haip listening on ws://{with}/haip\nhaip MCP endpoint at http://{with}/mcp\n"
        )),
        "{stderr}"
    );
    let without = started[1];
    assert!(
        stderr.contains(&format!("haip listening on ws://{without}/haip\n")),
        "{stderr}"
    );
    assert!(
        !stderr.contains(&format!("http://{without}/mcp")),
        "{stderr}"
    );
}

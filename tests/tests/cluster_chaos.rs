//! The short chaos soak: three quickstart instances sharing sessions through
//! a real `redis-server`, four clients (two WebSocket, two SSE) making calls
//! of every kind for 25 s while connections drop, an instance is killed with
//! SIGKILL, another hands its sessions over (SIGTERM) and Redis restarts;
//! then the checker judges the history. Passes when it finds no violation:
//! every session's `seq` without gap or duplicate (replays byte-identical),
//! every call ending in exactly one `TOOL_DONE`, every `RESUME_FAILED`
//! explained (see `haip_examples::chaos_check`).
//!
//! `bench/chaos.sh` is the long version. The history stays in the
//! directory the failure message names.

#[path = "support/mcp.rs"]
mod mcp_support;
#[path = "support/redis.rs"]
mod redis_support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the clients make calls.
const RUN_SECONDS: u64 = 25;
/// How long they may then wait for outstanding calls.
const DRAIN_SECONDS: u64 = 40;
/// The run's bound from outside: start-up, the run, the drain, shutdown.
const RUN_LIMIT: Duration = Duration::from_secs(RUN_SECONDS + DRAIN_SECONDS + 45);

/// Runs `command` to its end, killing it after `limit`; its output.
fn run_bounded(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the chaos example runs");
    // Read both pipes on threads so that a full pipe never stalls the child.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buf);
        buf
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited on") {
            break status;
        }
        if Instant::now() >= deadline {
            // SIGTERM first: the run then kills the instances and Redis it
            // started; SIGKILL if it does not stop.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let grace = Instant::now() + Duration::from_secs(10);
            while Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Builds the quickstart and the chaos example, so that neither is stale
/// (a no-op when they are up to date; `cargo test --workspace` has built
/// them already).
fn build_examples() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "haip-examples"])
        .args(["--example", "quickstart", "--example", "chaos"])
        .current_dir(mcp_support::workspace())
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the quickstart and chaos examples failed"
    );
}

fn fresh_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("haip-chaos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_cluster_under_chaos_keeps_every_session_and_call_whole() {
    let started = Instant::now();
    // Installs redis-server when this machine has none, and proves it runs;
    // `chaos run` finds it the same way ($HAIP_REDIS_SERVER, PATH, /usr/sbin).
    drop(redis_support::RedisServer::start());
    build_examples();
    let quickstart = mcp_support::example_binary("quickstart");
    let chaos = mcp_support::example_binary("chaos");
    let dir = fresh_dir();

    let run = run_bounded(
        Command::new(&chaos)
            .arg("run")
            .arg("--dir")
            .arg(&dir)
            .args(["--seconds", &RUN_SECONDS.to_string()])
            .args(["--clients", "4", "--seed", "11"])
            .args(["--drain", &DRAIN_SECONDS.to_string()])
            .arg("--quickstart")
            .arg(&quickstart),
        RUN_LIMIT,
    );
    assert!(
        run.status.success(),
        "chaos run failed ({}); history in {}\n{}",
        run.status,
        dir.display(),
        text(&run.stderr)
    );
    let check = run_bounded(
        Command::new(&chaos).arg("check").arg("--dir").arg(&dir),
        Duration::from_secs(60),
    );
    let report = text(&check.stdout);
    let events = text(&run.stderr);
    // Every kind of chaos happened within the short run.
    for what in ["kill", "handover", "redis_stop", "redis_start"] {
        assert!(
            events.contains(&format!(" {what} ")),
            "no {what} in the run; history in {}\n{events}",
            dir.display()
        );
    }
    assert!(
        check.status.success(),
        "the checker found violations ({}); history in {}\n{report}\n{}\n--- run\n{events}",
        check.status,
        dir.display(),
        text(&check.stderr)
    );
    assert!(Path::new(&dir).join("report.json").is_file());
    eprintln!("{report}chaos soak took {:.1?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

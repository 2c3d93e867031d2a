//! The official Python MCP SDK's client (`mcp` 2.x, installed by
//! `tests/mcp/setup.sh`) against the `mcp_export` example over stdio:
//! `tests/mcp/client.py` lists the quickstart tools with their input and
//! output schemas and `calculator`'s title and annotations, calls
//! `calculator`, gets `create_user`'s invalid-params error, receives `process_file`'s progress and result, and cancels
//! `process_file` (the SDK sends `notifications/cancelled`; the server stops
//! the tool, sends no result and keeps the session usable); `tests/mcp/talk.py`
//! answers `book_table`'s question and reads its log line and an image block.
//! The official TypeScript SDK's client (`tests/mcp/ts_stdio.mjs`) does the
//! same over stdio: lists, progress, a question answered, a cancellation.
//! Each test runs a script and requires it to succeed within a time limit.

use crate::conformance_support;
use crate::mcp_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// Generous: the script takes about 3 s, its own steps are bounded.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_lists_calls_and_cancels() {
    let binary = mcp_support::mcp_export_binary();
    let summary = run_script("client.py", &[binary.as_os_str()]).await;
    println!("{summary}");
}

/// `tests/mcp/talk.py`: the SDK's client answers `book_table`'s question
/// (`elicitation/create`), gets its log line as `notifications/message`, and
/// receives an image block from the `conformance` example, all over stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_client_answers_questions_and_reads_logs_and_images() {
    let export = mcp_support::mcp_export_binary();
    let conformance = mcp_support::example_binary("conformance");
    let summary = run_script("talk.py", &[export.as_os_str(), conformance.as_os_str()]).await;
    println!("{summary}");
}

/// `tests/mcp/ts_stdio.mjs`: the TypeScript SDK's client over stdio lists
/// the quickstart's tools, gets `process_file`'s progress, answers
/// `book_table`'s question and cancels a `process_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_over_stdio_lists_calls_answers_and_cancels() {
    let binary = mcp_support::mcp_export_binary();
    let node = conformance_support::node();
    let modules = conformance_support::ts_sdk_modules();
    let summary = run(
        &node,
        "ts_stdio.mjs",
        &[binary.as_os_str()],
        &[("HAIP_TS_SDK", modules.as_os_str())],
    )
    .await;
    println!("{summary}");
}

/// Runs a script of `tests/mcp/` with the SDK's Python and `args`; fails the
/// test unless it succeeds within [`LIMIT`] and prints its `ok:` summary,
/// which it returns.
async fn run_script(name: &str, args: &[&std::ffi::OsStr]) -> String {
    run(&mcp_support::python(), name, args, &[]).await
}

/// Runs a script of `tests/mcp/` with `program` (Python or Node), `args`
/// and `env`, as [`run_script`] says.
async fn run(
    program: &std::path::Path,
    name: &str,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::ffi::OsStr)],
) -> String {
    let script = mcp_support::script(name);
    let mut child = Command::new(program)
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", program.display()));
    let stdout = tokio::spawn(read_all(child.stdout.take().expect("stdout is piped")));
    let stderr = tokio::spawn(read_all(child.stderr.take().expect("stderr is piped")));

    let started = Instant::now();
    let status = match tokio::time::timeout(LIMIT, child.wait()).await {
        Ok(status) => Some(status.expect("waiting for the script works")),
        Err(_) => {
            // Killing the script closes the server's stdin: it exits too.
            child.kill().await.expect("the script can be killed");
            None
        }
    };
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    let report = format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    let Some(status) = status else {
        panic!(
            "{} did not finish within {LIMIT:?}\n{report}",
            script.display()
        );
    };
    assert!(
        status.success(),
        "{} failed ({status}) after {:.1?}\n{report}",
        script.display(),
        started.elapsed(),
    );
    assert!(
        stdout.starts_with("ok:"),
        "the script succeeded without its summary\n{report}"
    );
    stdout.trim_end().to_owned()
}

/// A reader's text, bounded in time in case something else holds the pipe.
async fn collect(reader: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(Duration::from_secs(10), reader).await {
        Ok(text) => text.expect("the pipe reader does not panic"),
        Err(_) => "<the pipe stayed open after the script ended>".to_owned(),
    }
}

/// Everything a pipe yields until it closes, as (lossy) text.
async fn read_all(mut pipe: impl AsyncRead + Unpin) -> String {
    let mut bytes = Vec::new();
    // A read error just ends the capture; the exit status tells the story.
    let _ = pipe.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

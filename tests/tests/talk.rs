//! The client side of tools that talk to people (docs/protocol.md §6.11): the Rust
//! client and `haip call` against the quickstart's `book_table`, which logs
//! "checking availability at <restaurant>", then asks "How many people, and
//! when?" for `{party_size: 1..=12, time: "18:00" | "19:00" | "20:00"}`.
//!
//! The client reads the log line and the question as call events, answers
//! (wrongly, then rightly), declines and dismisses; a client that does not
//! declare `tool_input` gets the tool's error. `haip call` prints the log
//! line, asks field by field on stderr and reads the answers from a piped
//! stdin, or answers with `--answer` / `--decline`.

use crate::support;

use std::path::PathBuf;
use std::sync::OnceLock;

use haip::client::{
    CallEvent, Client, ClientError, ClientOptions, FieldKind, LogLevel, Outcome, Question,
};
use serde_json::{Value, json};
use support::{demo_builder, start, within};

/// A client that answers questions.
fn answering() -> ClientOptions {
    ClientOptions::new().tool_input(true)
}

/// Calls `book_table` at Luigi's and reads up to its question, checking the
/// log line before it.
async fn ask_for_a_table(client: &Client) -> (haip::client::Call, Question) {
    let mut call = within(
        "the call",
        client.call("book_table", json!({"restaurant": "Luigi"})),
    )
    .await
    .unwrap();
    let Some(CallEvent::Log(line)) = within("the log line", call.next_event()).await else {
        panic!("a log line first")
    };
    assert_eq!(
        (line.level.as_str(), line.message.as_str(), &line.data),
        ("info", "checking availability at Luigi", &None)
    );
    assert_eq!(line.severity(), Some(LogLevel::Info));
    let event = within("the question", call.next_event()).await;
    let Some(CallEvent::Question(question)) = event else {
        panic!("then the question: {event:?}")
    };
    (call, question)
}

/// The rest of a call's events, then its outcome.
async fn finish(mut call: haip::client::Call) -> (Vec<CallEvent>, Outcome) {
    let mut events = Vec::new();
    while let Some(event) = within("an event", call.next_event()).await {
        events.push(event);
    }
    (events, within("the outcome", call.outcome()).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_answers_and_the_table_is_booked() {
    let (handle, url) = start(demo_builder()).await;
    let client = within("connect", Client::connect_with(&url, answering()))
        .await
        .unwrap();
    let (call, question) = ask_for_a_table(&client).await;
    assert_eq!(question.message, "How many people, and when?");
    let fields = question.fields().unwrap();
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["party_size", "time"]);
    assert_eq!(
        fields[0].kind,
        FieldKind::Integer {
            minimum: Some(1.0),
            maximum: Some(12.0)
        }
    );
    let times: Vec<&str> = fields[1]
        .choices()
        .iter()
        .map(|c| c.value.as_str())
        .collect();
    assert_eq!(times, ["18:00", "19:00", "20:00"]);
    assert!(fields.iter().all(|f| f.required && f.default.is_none()));
    // The form's own conversion of typed text.
    let content =
        json!({"party_size": fields[0].parse("4").unwrap(), "time": fields[1].parse("2").unwrap()});
    assert_eq!(content, json!({"party_size": 4, "time": "19:00"}));
    // Refused: the violations, and the question stays open.
    let err = within(
        "the verdict",
        call.answer(
            &question.request_id,
            json!({"party_size": 13, "time": "19:00"}),
        ),
    )
    .await
    .unwrap_err();
    let ClientError::InvalidAnswer { violations, .. } = &err else {
        panic!("INVALID_PARAMS: {err}")
    };
    assert_eq!(violations.len(), 1, "{err}");
    assert_eq!(violations[0].path, "/party_size", "{err}");
    within("the verdict", call.answer(&question.request_id, content))
        .await
        .unwrap();
    // Answered: the question is closed.
    let err = within("the verdict", call.decline(&question.request_id))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::QuestionNotFound { request_id, .. } if *request_id == question.request_id),
        "{err}"
    );
    let (events, outcome) = finish(call).await;
    assert!(
        matches!(&events[..], [CallEvent::Update(u)] if u.status == "RUNNING" && u.progress.is_none()),
        "the RUNNING after the answer: {events:?}"
    );
    assert_eq!(
        outcome,
        Outcome::Ok(Some(
            json!({"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "19:00"})
        ))
    );
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declined_and_dismissed_questions_book_nothing() {
    let (handle, url) = start(demo_builder()).await;
    let client = within("connect", Client::connect_with(&url, answering()))
        .await
        .unwrap();
    for dismiss in [false, true] {
        let (call, question) = ask_for_a_table(&client).await;
        let verdict = if dismiss {
            call.cancel_question(&question.request_id).await
        } else {
            call.decline(&question.request_id).await
        };
        verdict.unwrap();
        let (_, outcome) = finish(call).await;
        assert_eq!(
            outcome,
            Outcome::Ok(Some(json!({"booked": false, "restaurant": "Luigi"}))),
            "dismissed: {dismiss}"
        );
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_hai_sets_the_capabilities() {
    let (handle, url) = start(demo_builder()).await;
    // Without tool_input (the default): the tool's question fails at once,
    // and it says so.
    let options = ClientOptions::new();
    let client = within("connect", Client::connect_with(&url, options))
        .await
        .unwrap();
    let call = client
        .call("book_table", json!({"restaurant": "Luigi"}))
        .await
        .unwrap();
    let (events, outcome) = finish(call).await;
    assert!(
        matches!(&events[..], [CallEvent::Log(l)] if l.message == "checking availability at Luigi"),
        "{events:?}"
    );
    let Outcome::Error { code, message, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(code, "TOOL_EXECUTION_ERROR");
    assert!(message.contains("cannot answer questions"), "{message}");
    // At `warning`, the `info` line is not sent; questions still are.
    let options = answering().log_level(LogLevel::Warning);
    let client = within("connect", Client::connect_with(&url, options))
        .await
        .unwrap();
    let mut call = client
        .call("book_table", json!({"restaurant": "Luigi"}))
        .await
        .unwrap();
    let event = within("the question", call.next_event()).await;
    let Some(CallEvent::Question(question)) = event else {
        panic!("the question, and no log line before it: {event:?}")
    };
    call.decline(&question.request_id).await.unwrap();
    let (_, outcome) = finish(call).await;
    assert!(matches!(outcome, Outcome::Ok(_)), "{outcome:?}");
    // A caller that reads only updates still sees the call end.
    let mut call = client
        .call(
            "process_file",
            json!({"filename": "a.txt", "operation": "read"}),
        )
        .await
        .unwrap();
    let mut updates = 0;
    while within("an update", call.next_update()).await.is_some() {
        updates += 1;
    }
    assert_eq!(updates, 6);
    handle.shutdown().await;
}

/// The `haip` binary, built once per test run (so it is never stale).
fn haip_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // Test binaries live in target/<profile>/deps; binaries beside it.
            let exe = std::env::current_exe().expect("the test binary has a path");
            let profile_dir = exe
                .parent()
                .and_then(std::path::Path::parent)
                .expect("test binaries live in target/<profile>/deps");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let status = std::process::Command::new(cargo)
                .args(["build", "-p", "haip", "--features", "cli", "--bin", "haip"])
                .current_dir(workspace)
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building the haip binary failed");
            let binary = profile_dir.join(format!("haip{}", std::env::consts::EXE_SUFFIX));
            assert!(binary.exists(), "haip is not at {}", binary.display());
            binary
        })
        .clone()
}

/// What `haip` printed, and how it exited.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON printed on stdout.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs `haip <args>` with `stdin` piped in (not a terminal), through
/// `assert_cmd`, within 30 s.
async fn haip(args: &[&str], stdin: &str) -> Run {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let stdin = stdin.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        assert_cmd::Command::new(haip_binary())
            .args(&args)
            .write_stdin(stdin)
            .env("NO_COLOR", "1")
            .env_remove("HAIP_TOKEN")
            .timeout(std::time::Duration::from_secs(30))
            .output()
    })
    .await
    .unwrap()
    .expect("haip runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haip_call_asks_in_the_terminal() {
    let (handle, url) = start(demo_builder()).await;
    let call = [
        "call",
        url.as_str(),
        "book_table",
        "restaurant=Luigi",
        "--json",
    ];
    // 13 is refused by the form itself, then 4 and the 3rd time.
    let run = haip(&call, "13\n4\n3\n").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.json(),
        json!({"status": "OK", "result": {"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "20:00"}})
    );
    for expected in [
        "[info] checking availability at Luigi\n",
        "? How many people, and when?\n",
        "  # How many people.\n",
        // The piped answers are echoed, as a terminal would show them.
        "  party_size (integer, 1 to 12; required): 13\n    ! must be at most 12\n",
        "  party_size (integer, 1 to 12; required): 4\n",
        "  time (choose one: 1) 18:00, 2) 19:00, 3) 20:00; required): ",
    ] {
        assert!(
            run.stderr.contains(expected),
            "{expected:?} in:\n{}",
            run.stderr
        );
    }
    let log = run.stderr.find("[info]").unwrap();
    assert!(
        log < run.stderr.find("? How many").unwrap(),
        "the log line comes first"
    );
    // Choices by value or title, without --json: the result alone on stdout.
    let run = haip(&call[..4], "2\n18:00\n").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&run.stdout).unwrap(),
        json!({"booked": true, "restaurant": "Luigi", "party_size": 2, "time": "18:00"})
    );
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_input_declines() {
    let (handle, url) = start(demo_builder()).await;
    let call = [
        "call",
        url.as_str(),
        "book_table",
        "restaurant=Luigi",
        "--json",
    ];
    let declined = json!({"status": "OK", "result": {"booked": false, "restaurant": "Luigi"}});
    // An empty line on the first field, on the second, or no input at all.
    for stdin in ["\n", "4\n\n", ""] {
        let run = haip(&call, stdin).await;
        assert_eq!(run.code, Some(0), "{stdin:?}: {}", run.stderr);
        assert_eq!(run.json(), declined, "{stdin:?}");
        assert!(
            run.stderr.contains("(declined)"),
            "{stdin:?}: {}",
            run.stderr
        );
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_answer_with_flags() {
    let (handle, url) = start(demo_builder()).await;
    let call = [
        "call",
        url.as_str(),
        "book_table",
        "restaurant=Luigi",
        "--json",
    ];
    let with = |extra: &'static [&'static str]| {
        let mut args = call.to_vec();
        args.extend_from_slice(extra);
        args
    };
    let run = haip(
        &with(&["--answer", r#"{"party_size":6,"time":"19:00"}"#]),
        "",
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.json()["result"],
        json!({"booked": true, "restaurant": "Luigi", "party_size": 6, "time": "19:00"})
    );
    assert!(
        !run.stderr.contains("? How many"),
        "nothing asked: {}",
        run.stderr
    );
    let run = haip(&with(&["--decline"]), "").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.json()["result"],
        json!({"booked": false, "restaurant": "Luigi"})
    );
    // An answer the tool refuses: the violations, the call cancelled, exit 2.
    let run = haip(
        &with(&["--answer", r#"{"party_size":40,"time":"19:00"}"#]),
        "",
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("/party_size"), "{}", run.stderr);
    assert!(
        run.stderr.contains("--answer does not fit"),
        "{}",
        run.stderr
    );
    // Not an object: a usage error before anything is called.
    let run = haip(&with(&["--answer", "[1]"]), "").await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    // Log lines below the chosen level are not shown.
    let run = haip(&with(&["--decline", "--log-level", "warning"]), "").await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stderr.contains("[info]"), "{}", run.stderr);
    handle.shutdown().await;
}

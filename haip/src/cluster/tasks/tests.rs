//! Tests of the task store: keys, scripts, and records and signals as Redis
//! holds them (the ledger's are in `ledger.rs`, with a record from here).

use std::time::Duration;

use serde_json::{Map, json};

use super::encoding::{ANSWER_FIELD, decode_get, decode_signal, encode_signal, fields_of, pairs};
use super::scripts::{ANSWERED, ASK, CLAIM, CREATE, FINISH, GET, KEEP_ANSWERS, NOTE, REFRESH};
use super::{
    OVER_SHARE, OVER_SHARE_RECORDS, SIGNAL, TASK_REFRESH, questions_key, running_ttl,
    share_bytes_key, share_expiry_key, task_key,
};
use crate::cluster::keys::lease_key;
use crate::cluster::messages::split_message;
use crate::session::tasks::{END_RESERVE, Rerun, TaskRecord, TaskSignal, TaskStatus};

pub(super) fn record(id: &str) -> TaskRecord {
    TaskRecord {
        id: id.into(),
        owner: "a".into(),
        subject: Some("ada".into()),
        caller: Some(r#"subject "ada""#.into()),
        status: TaskStatus::Working,
        message: Some("halfway".into()),
        created_ms: 1_700_000_000_000,
        updated_ms: 1_700_000_000_500,
        questions: [(
            "k".to_owned(),
            json!({"method": "elicitation/create", "params": {}}),
        )]
        .into_iter()
        .collect(),
        result: None,
        error: None,
        rerun: None,
    }
}

fn bulk(text: &str) -> redis::Value {
    redis::Value::BulkString(text.as_bytes().to_vec())
}

fn flat(pairs: &[(&str, String)]) -> redis::Value {
    redis::Value::Array(pairs.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
}

#[test]
fn keys_are_named_by_the_task() {
    assert_eq!(task_key("t1"), "{haip}:t:t1");
    assert_eq!(questions_key("t1"), "{haip}:t:t1:q");
    assert_eq!(
        lease_key(""),
        "{haip}:i:",
        "the prefix GET names leases with"
    );
    // The scripts name a record's and its caller's share's keys themselves.
    for script in [
        CREATE,
        GET,
        ASK,
        ANSWERED,
        NOTE,
        FINISH,
        REFRESH,
        KEEP_ANSWERS,
        CLAIM,
    ] {
        assert!(script.contains(&format!("'{}' .. id", task_key(""))));
        assert!(script.contains(&format!("'{}' .. caller", share_bytes_key(""))));
        assert!(script.contains(&format!("'{}' .. caller", share_expiry_key(""))));
        assert!(script.contains(&format!("string.sub(rec, {})", task_key("").len() + 1)));
    }
    assert_eq!(
        share_bytes_key(r#"subject "ada""#),
        r#"{haip}:tb:subject "ada""#
    );
    assert_eq!(
        running_ttl(Duration::from_secs(1)),
        TASK_REFRESH * 4,
        "a running record outlives several refreshes"
    );
    assert_eq!(
        running_ttl(Duration::from_secs(3600)),
        Duration::from_secs(3600)
    );
}

#[test]
fn the_scripts_know_the_statuses_that_end_a_task() {
    let ended: Vec<&str> = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ]
    .into_iter()
    .filter(|s| s.is_terminal())
    .map(TaskStatus::as_str)
    .collect();
    for script in [CREATE, GET, ASK, ANSWERED, NOTE, FINISH, REFRESH] {
        for status in &ended {
            assert!(
                script.contains(&format!("'{status}'")),
                "{status} in {script}"
            );
        }
        assert!(!script.contains("'working'") && !script.contains("'input_required'"));
    }
    assert!(GET.contains("'failed'") && GET.contains("local error = ARGV[4]"));
    // A re-runnable task out of attempts says how many it had.
    for script in [GET, CLAIM] {
        assert!(script.contains("out_of_attempts(") && script.contains("'status', 'failed'"));
    }
}

#[test]
fn the_scripts_count_records_as_the_stores_do() {
    // A running record's reserve, and the answers of a change over a share.
    for script in [CREATE, GET, ASK, ANSWERED, NOTE, FINISH, REFRESH] {
        assert!(script.contains(&format!("local RESERVE = {END_RESERVE}\n")));
        assert!(script.contains("account(KEYS["), "every change is counted");
    }
    for script in [CREATE, ASK, NOTE, FINISH] {
        assert!(
            script.contains(&format!("return {OVER_SHARE}"))
                || script.contains(&format!("refused = {OVER_SHARE}"))
        );
    }
    assert!(CREATE.contains(&format!("refused = {OVER_SHARE_RECORDS}")));
    // What a record is counted for: the fields its charge counts.
    let record = record("t1");
    let counted: usize = super::encoding::fields_of(&record)
        .iter()
        .filter(|(f, _)| ["owner", "subject", "caller", "message", "result", "error"].contains(f))
        .map(|(_, v)| v.len())
        .sum::<usize>()
        + 256
        + record.id.len()
        + record
            .questions
            .iter()
            .map(|(k, v)| k.len() + v.to_string().len())
            .sum::<usize>()
        + END_RESERVE;
    assert_eq!(counted, record.charge());
}

#[test]
fn a_record_reads_back_as_written() {
    let mut written = record("t1");
    let value = redis::Value::Array(vec![
        flat(&fields_of(&written)),
        flat(&[("k", written.questions["k"].to_string())]),
        redis::Value::Int(0),
    ]);
    assert_eq!(
        decode_get("t1", &value),
        Some(Some((written.clone(), false)))
    );
    // Re-runnable, on its second attempt, with an answer kept, taken over
    // by the instance reading it.
    let mut again = written.clone();
    again.rerun = Some(Rerun {
        tool: "slow".into(),
        arguments: json!({"seconds": 3}),
        caller: Some(json!({"subject": "ada", "scopes": ["a"], "claims": {}})),
        can: [true, false, false],
        attempt: 2,
        attempts: 3,
        answers: Map::new(),
    });
    let mut fields = fields_of(&again);
    assert!(fields.iter().any(|(f, v)| *f == "attempt" && v == "2"));
    assert!(fields.iter().any(|(f, v)| *f == "attempts" && v == "3"));
    let kept = json!({"q": {"method": "elicitation/create"}, "a": {"action": "accept"}});
    let kept_field = format!("{ANSWER_FIELD}k");
    let mut flat_fields: Vec<(&str, String)> = std::mem::take(&mut fields);
    flat_fields.push((&kept_field, kept.to_string()));
    let value = redis::Value::Array(vec![flat(&flat_fields), flat(&[]), redis::Value::Int(1)]);
    let (read, taken) = decode_get("t1", &value).unwrap().unwrap();
    assert!(taken);
    let rerun = read.rerun.expect("re-runnable");
    assert_eq!((rerun.attempt, rerun.attempts), (2, 3));
    assert_eq!(rerun.arguments, json!({"seconds": 3}));
    assert_eq!(rerun.can, [true, false, false]);
    assert_eq!(rerun.answers.get("k"), Some(&kept));
    // Its fields are counted in its caller's share, as the scripts count them.
    assert!(again.charge() > written.charge());
    // Ended, without subject or message, with a result.
    written.subject = None;
    written.message = None;
    written.questions.clear();
    written.status = TaskStatus::Completed;
    written.result = Some(json!({"content": [{"type": "text", "text": "done"}]}));
    let value = redis::Value::Array(vec![
        flat(&fields_of(&written)),
        flat(&[]),
        redis::Value::Int(0),
    ]);
    assert_eq!(decode_get("t1", &value), Some(Some((written, false))));
    // Unknown; and what the script never answers.
    assert_eq!(decode_get("t1", &redis::Value::Nil), Some(None));
    assert_eq!(decode_get("t1", &redis::Value::Int(1)), None);
    let odd_fields = redis::Value::Array(vec![
        redis::Value::Array(vec![bulk("owner")]),
        flat(&[]),
        redis::Value::Int(0),
    ]);
    assert_eq!(decode_get("t1", &odd_fields), None);
    // A hash that is not a record (no status) reads as unknown.
    let no_status = redis::Value::Array(vec![
        flat(&[("owner", "a".into())]),
        flat(&[]),
        redis::Value::Int(0),
    ]);
    assert_eq!(decode_get("t1", &no_status), Some(None));
    // A map (RESP3) is read as well.
    let map = redis::Value::Map(vec![(bulk("k"), bulk("v"))]);
    assert_eq!(pairs(&map), Some(vec![("k".into(), "v".into())]));
}

#[test]
fn signals_are_framed_for_the_owner_and_read_back() {
    let mut answers = Map::new();
    answers.insert(
        "confirm".into(),
        json!({"action": "accept", "content": {"confirm": true}}),
    );
    for signal in [TaskSignal::Answers(answers), TaskSignal::Cancel] {
        let message = encode_signal("task-1", &signal);
        let (kind, link, body) = split_message(&message).expect("framed");
        assert_eq!((kind, link), (SIGNAL, 0));
        assert_eq!(decode_signal(body), Some(("task-1".to_owned(), signal)));
    }
    for bad in [
        &b"not json"[..],
        br#"{"cancel": true}"#,
        br#"{"task": 1, "cancel": true}"#,
        br#"{"task": "t"}"#,
        br#"{"task": "t", "cancel": false}"#,
        br#"{"task": "t", "answers": [1]}"#,
        br#"{"task": "t", "answers": {}, "cancel": true}"#,
    ] {
        assert_eq!(decode_signal(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

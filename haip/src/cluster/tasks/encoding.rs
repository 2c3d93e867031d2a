//! How task records and signals look in Redis: a record's hash fields, the
//! scripts' replies read back, and a signal's message to the owner.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::SIGNAL;
use crate::cluster::messages::frame;
use crate::session::tasks::{Rerun, Signal, TaskRecord, TaskSignal, TaskStatus};

/// The open questions of a new record as its `:q` hash holds them (none
/// for one that has ended).
pub(super) fn questions_of(record: &TaskRecord) -> Vec<(&str, String)> {
    if record.status.is_terminal() {
        return Vec::new();
    }
    record
        .questions
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_string()))
        .collect()
}

/// A record's fields as its hash holds them (its questions aside).
pub(super) fn fields_of(record: &TaskRecord) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("owner", record.owner.clone()),
        ("status", record.status.as_str().to_owned()),
        ("created", record.created_ms.to_string()),
        ("updated", record.updated_ms.to_string()),
    ];
    if let Some(subject) = &record.subject {
        fields.push(("subject", subject.clone()));
    }
    if let Some(caller) = &record.caller {
        fields.push(("caller", caller.clone()));
    }
    if let Some(message) = &record.message {
        fields.push(("message", message.clone()));
    }
    if let Some(result) = &record.result {
        fields.push(("result", result.to_string()));
    }
    if let Some(error) = &record.error {
        fields.push(("error", error.to_string()));
    }
    if let Some(rerun) = &record.rerun
        && let Ok(json) = serde_json::to_string(rerun)
    {
        // Its answers are added later, one field each (`KEEP_ANSWERS`).
        fields.push(("rerun", json));
        fields.push(("attempt", rerun.attempt.to_string()));
        fields.push(("attempts", rerun.attempts.to_string()));
    }
    fields
}

pub(super) use crate::session::tasks::ANSWER_FIELD;

/// The record of task `id` from its hash's fields and its questions' (`None`:
/// not a record).
fn record_of(
    id: &str,
    fields: Vec<(String, String)>,
    questions: Vec<(String, String)>,
) -> Option<TaskRecord> {
    let mut fields: HashMap<String, String> = fields.into_iter().collect();
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let json = |v: Option<String>| v.and_then(|v| serde_json::from_str::<Value>(&v).ok());
    let status = TaskStatus::parse(fields.get("status")?)?;
    Some(TaskRecord {
        id: id.to_owned(),
        owner: fields.remove("owner")?,
        subject: fields.remove("subject"),
        caller: fields.remove("caller"),
        status,
        message: fields.remove("message"),
        created_ms: number(fields.get("created")),
        updated_ms: number(fields.get("updated")),
        questions: questions
            .into_iter()
            .filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?)))
            .collect::<BTreeMap<String, Value>>(),
        result: json(fields.remove("result")),
        error: json(fields.remove("error")),
        rerun: rerun_of(&mut fields),
    })
}

/// A re-runnable task's [`Rerun`] from its record's fields.
fn rerun_of(fields: &mut HashMap<String, String>) -> Option<Rerun> {
    let mut rerun: Rerun = serde_json::from_str(&fields.remove("rerun")?).ok()?;
    let number = |v: Option<String>| v.and_then(|v| v.parse::<u32>().ok()).unwrap_or(1);
    rerun.attempt = number(fields.remove("attempt"));
    rerun.attempts = number(fields.remove("attempts"));
    rerun.answers = fields
        .iter()
        .filter_map(|(field, answer)| {
            let key = field.strip_prefix(ANSWER_FIELD)?;
            Some((key.to_owned(), serde_json::from_str(answer).ok()?))
        })
        .collect();
    Some(rerun)
}

/// One task the `CLAIM` script took over: `{id, record fields}`.
pub(super) fn decode_claimed(value: &redis::Value) -> Option<TaskRecord> {
    let redis::Value::Array(parts) = value else {
        return None;
    };
    let [id, fields] = parts.as_slice() else {
        return None;
    };
    let id = string(id)?;
    let record = record_of(&id, pairs(fields)?, Vec::new())?;
    record.rerun.is_some().then_some(record)
}

/// The `GET` script's answer: `Some(None)` for an unknown task (or one that
/// is not a record), `None` for an answer it never gives.
pub(super) fn decode_get(id: &str, value: &redis::Value) -> Option<Option<(TaskRecord, bool)>> {
    match value {
        redis::Value::Nil => Some(None),
        redis::Value::Array(parts) => match parts.as_slice() {
            [fields, questions, taken] => {
                let record = record_of(id, pairs(fields)?, pairs(questions)?);
                let taken = matches!(taken, redis::Value::Int(1));
                Some(record.map(|record| (record, taken)))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A string of a reply.
fn string(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        redis::Value::SimpleString(text) => Some(text.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// An array of strings.
pub(super) fn strings(value: &redis::Value) -> Option<Vec<String>> {
    match value {
        redis::Value::Array(items) | redis::Value::Set(items) => items.iter().map(string).collect(),
        _ => None,
    }
}

/// `HGETALL`'s answer: a flat array of fields and values (or a map).
pub(super) fn pairs(value: &redis::Value) -> Option<Vec<(String, String)>> {
    match value {
        redis::Value::Map(map) => map
            .iter()
            .map(|(k, v)| Some((string(k)?, string(v)?)))
            .collect(),
        _ => {
            let flat = strings(value)?;
            if flat.len() % 2 != 0 {
                return None;
            }
            let mut out = Vec::with_capacity(flat.len() / 2);
            let mut items = flat.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                out.push((k, v));
            }
            Some(out)
        }
    }
}

/// The message that carries `signal` for task `id` to its owner.
pub(super) fn encode_signal(id: &str, signal: &TaskSignal) -> Vec<u8> {
    let body = match signal {
        TaskSignal::Answers(answers) => json!({"task": id, "answers": answers}),
        TaskSignal::Cancel => json!({"task": id, "cancel": true}),
    };
    frame(SIGNAL, 0, body.to_string().as_bytes())
}

/// The signal in a message's body.
pub(super) fn decode_signal(body: &[u8]) -> Option<Signal> {
    let mut value: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let id = match value.remove("task")? {
        Value::String(id) => id,
        _ => return None,
    };
    let signal = match (value.remove("answers"), value.get("cancel")) {
        (Some(Value::Object(answers)), None) => TaskSignal::Answers(answers),
        (None, Some(Value::Bool(true))) => TaskSignal::Cancel,
        _ => return None,
    };
    Some((id, signal))
}

//! The schema pipeline: compiled validators and the violation list of
//! `INVALID_PARAMS` (docs/protocol.md §6.4 step 4, §6.6).

mod explain;
mod form;
mod generate;
mod profile;

pub(crate) use form::Form;
pub use generate::{input_schema_for, output_schema_for};
pub(crate) use profile::args::normalize as normalize_params;
pub(crate) use profile::{Profiles, refusals};
pub use profile::{SchemaProblem, SchemaProfile, UnknownProfile};

use std::collections::BinaryHeap;

use serde_json::{Value, json};

/// One schema violation: an RFC 6901 pointer into the validated value and a
/// message. What [`Tool::validate_params`](crate::Tool::validate_params)
/// finds in a call's params, what an `INVALID_PARAMS` lists in its `details`,
/// and, with the `client` feature, what the server found wrong with an
/// answer to a question (`haip::client::ClientError::InvalidAnswer`).
///
/// It displays as `path: message`, the path `(answer)` when it is empty:
///
/// ```
/// let v = haip::Violation { path: "/party_size".into(), message: "13 is greater than 12".into() };
/// assert_eq!(v.to_string(), "/party_size: 13 is greater than 12");
/// let whole = haip::Violation { path: String::new(), message: "not an object".into() };
/// assert_eq!(whole.to_string(), "(answer): not an object");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the value (`/party_size`; `""` is the value itself:
    /// the params object, or the answer).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl Violation {
    /// The violation as the `details` entry of a `TOOL_DONE` error result.
    pub fn to_json(&self) -> Value {
        json!({ "path": self.path, "message": self.message })
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "(answer)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// A JSON Schema compiled once (at registration) and used for every call.
pub(crate) struct CompiledSchema {
    validator: jsonschema::Validator,
    /// The schema itself, which violation messages read (the allowed values,
    /// the other bound of a range, the properties of a closed object).
    schema: Value,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Compiles `schema` with JSON Schema 2020-12 semantics and format assertion on.
    pub(crate) fn compile(schema: &Value) -> Result<CompiledSchema, String> {
        if !schema.is_object() {
            return Err("a tool schema must be a JSON object".to_owned());
        }
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(schema)
            .map_err(|e| e.to_string())?;
        Ok(CompiledSchema {
            validator,
            schema: schema.clone(),
        })
    }

    /// Every violation of `value`, sorted by path (byte order). Empty when valid.
    ///
    /// A missing required property points at the missing member, and each
    /// unexpected member of a closed object gets its own entry. Each message
    /// says what to send instead (`schema::explain`), quoting at most
    /// [`QUOTE_CHARS`] characters of any one value.
    pub(crate) fn violations(&self, value: &Value) -> Vec<Violation> {
        self.check(value, usize::MAX).listed
    }

    /// Checks `value`: the first `max` violations by path (byte order), and
    /// how many there are. Counting stops after [`COUNT_LIMIT`] (then
    /// `exhaustive` is false): a huge invalid value costs bounded work.
    pub(crate) fn check(&self, value: &Value, max: usize) -> Violations {
        let mut found = Violations {
            listed: Vec::new(),
            total: 0,
            exhaustive: true,
        };
        if self.validator.is_valid(value) {
            return found;
        }
        // The `max` smallest paths seen so far, largest on top.
        let mut smallest: BinaryHeap<Ranked> = BinaryHeap::new();
        let mut offer = |violation: Violation| {
            if smallest.len() < max {
                smallest.push(Ranked(violation));
            } else if smallest
                .peek()
                .is_some_and(|top| violation.path.as_bytes() < top.0.path.as_bytes())
            {
                smallest.pop();
                smallest.push(Ranked(violation));
            }
        };
        let explain = explain::Explain::new(&self.schema, value);
        for error in self.validator.iter_errors(value) {
            if found.total >= COUNT_LIMIT {
                found.exhaustive = false;
                break;
            }
            explain.violations(&error, &mut |violation| {
                found.total += 1;
                offer(violation);
            });
        }
        if found.total == 0 {
            // Every error was said by another one; an invalid value still
            // gets a violation.
            found.total = 1;
            offer(Violation {
                path: String::new(),
                message: "the value does not match the schema".to_owned(),
            });
        }
        found.listed = smallest
            .into_sorted_vec()
            .into_iter()
            .map(|r| r.0)
            .collect();
        found
    }
}

/// The violations of one value, as far as they are listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violations {
    /// The first violations by path (byte order).
    pub(crate) listed: Vec<Violation>,
    /// How many were found.
    pub(crate) total: usize,
    /// Whether `total` counts them all (false: counting stopped early).
    pub(crate) exhaustive: bool,
}

impl Default for Violations {
    /// No violations: a valid value.
    fn default() -> Violations {
        Violations {
            listed: Vec::new(),
            total: 0,
            exhaustive: true,
        }
    }
}

impl Violations {
    /// Whether the value was valid.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The `details` of an `INVALID_PARAMS` error: the listed violations.
    pub(crate) fn details(&self) -> Value {
        Value::Array(self.listed.iter().map(Violation::to_json).collect())
    }

    /// The count to report beside the details: `("total", n)`, or
    /// `("total_at_least", n)` when counting stopped early. (The session
    /// writes `total` or `total_at_least` of a typed `ToolFailure` from
    /// `total` and `exhaustive`; this names the wire field, for tests.)
    #[cfg(test)]
    pub(crate) fn total_field(&self) -> (&'static str, usize) {
        if self.exhaustive {
            ("total", self.total)
        } else {
            ("total_at_least", self.total)
        }
    }
}

/// Most characters of an offending value a message quotes (docs/protocol.md §18.1).
pub(crate) const QUOTE_CHARS: usize = 64;

/// Violations counted before counting stops.
const COUNT_LIMIT: usize = 10_000;

/// A violation ordered by its path's bytes.
struct Ranked(Violation);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.0.path == other.0.path
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.path.as_bytes().cmp(other.0.path.as_bytes())
    }
}

/// A JSON string of at most [`QUOTE_CHARS`] characters of `text` (`…` marks a cut).
fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => Value::String(format!("{}…", &text[..cut])).to_string(),
        None => Value::String(text.to_owned()).to_string(),
    }
}

/// The JSON text of `value`, cut after [`QUOTE_CHARS`] characters (`…`
/// marks a cut). Only about that much is ever written, however large the value.
fn excerpt(value: &Value) -> String {
    struct Prefix(String);
    impl std::io::Write for Prefix {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // serde_json writes whole tokens or escapes: always valid UTF-8.
            self.0.push_str(&String::from_utf8_lossy(bytes));
            if self.0.chars().count() > QUOTE_CHARS {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut prefix = Prefix(String::new());
    if serde_json::to_writer(&mut prefix, value).is_ok() {
        return prefix.0;
    }
    let cut = prefix
        .0
        .char_indices()
        .nth(QUOTE_CHARS)
        .map_or(prefix.0.len(), |(i, _)| i);
    prefix.0.truncate(cut);
    prefix.0.push('…');
    prefix.0
}

fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_schema() -> CompiledSchema {
        CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn every_violation_is_listed_with_pointer_paths() {
        let v = add_schema().violations(&json!({"a": "5", "x/y": 1, "z": 2}));
        let paths: Vec<&str> = v.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["/a", "/b", "/x~1y", "/z"]);
        assert!(v[0].message.contains("number"), "{}", v[0].message);
    }

    #[test]
    fn valid_params_have_no_violations_and_no_coercion_happens() {
        assert!(
            add_schema()
                .violations(&json!({"a": 5, "b": 3.5}))
                .is_empty()
        );
        assert_eq!(add_schema().violations(&json!({"a": 5, "b": "3"})).len(), 1);
        assert_eq!(add_schema().violations(&json!([])).len(), 1);
    }

    #[test]
    fn huge_values_are_quoted_briefly_and_the_listing_is_capped() {
        let schema = CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"s": {"type": "integer"}},
            "additionalProperties": false
        }))
        .unwrap();
        let mut params = serde_json::Map::new();
        params.insert("s".into(), json!("x".repeat(100_000)));
        for i in 0..5000 {
            params.insert(format!("k{i:05}"), json!(i));
        }
        let found = schema.check(&Value::Object(params), 20);
        assert_eq!((found.total, found.exhaustive), (5001, true));
        assert_eq!(found.total_field(), ("total", 5001));
        assert_eq!(found.listed.len(), 20);
        let paths: Vec<&str> = found.listed.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths[0], "/k00000", "the smallest paths, in order");
        assert_eq!(paths[19], "/k00019");
        assert!(paths.windows(2).all(|w| w[0] < w[1]));
        let found = schema.check(&json!({"s": "x".repeat(100_000)}), 20);
        assert_eq!(found.total_field(), ("total", 1));
        let message = &found.listed[0].message;
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("xxxx…"), "{message}");
        assert!(message.contains("integer"), "{message}");
    }

    #[test]
    fn counting_stops_early_on_endless_violations() {
        let schema =
            CompiledSchema::compile(&json!({"type": "array", "items": {"type": "string"}}))
                .unwrap();
        let found = schema.check(&json!(vec![1; 20_000]), 3);
        assert!(!found.exhaustive);
        assert_eq!(found.total_field(), ("total_at_least", COUNT_LIMIT));
        assert_eq!(found.listed.len(), 3);
    }

    #[test]
    fn excerpts_cut_on_character_boundaries() {
        assert_eq!(excerpt(&json!("short")), "\"short\"");
        let long = excerpt(&json!("é".repeat(100)));
        assert_eq!(long.chars().count(), QUOTE_CHARS + 1);
        assert!(long.ends_with('…'));
        assert_eq!(quote(&"a".repeat(70)), format!("\"{}…\"", "a".repeat(64)));
    }

    #[test]
    fn formats_are_asserted() {
        let s = CompiledSchema::compile(&json!({"type":"string","format":"email"})).unwrap();
        assert_eq!(s.violations(&json!("not-an-email")).len(), 1);
        assert!(s.violations(&json!("a@example.com")).is_empty());
    }

    #[test]
    fn bad_schemas_are_rejected() {
        assert!(CompiledSchema::compile(&json!(true)).is_err());
        assert!(CompiledSchema::compile(&json!({"type": 12})).is_err());
    }
}

//! Found before deploy, not at runtime: what model providers would refuse
//! in your tools, checked without a server (docs/protocol.md §6.14).
//!
//! For every tool: each [schema profile](crate::SchemaProfile) that cannot
//! serve it, or that serves it with less than it says (a JSON pointer into
//! its schema, the reason, the fix); a name that OpenAI and Anthropic refuse
//! (they take `^[a-zA-Z0-9_-]{1,64}$`, MCP allows more); a description over
//! 1024 characters. Those are errors. And, as warnings ([`Severity`]), a
//! tool or a parameter without a description: it is served, but a model
//! choosing tools and filling in params has only its name to go on. The
//! `haip lint <url>` command runs the same checks on a running server.
//!
//! One line in a test of your crate checks every `#[haip_tool]` in it:
//!
//! ```
//! /// Add two numbers.
//! #[haip::haip_tool]
//! async fn add(a: f64, b: f64) -> f64 {
//!     a + b
//! }
//!
//! # fn main() {
//! // In a `#[test]`:
//! haip::lint::assert_annotated_clean();
//! # }
//! ```

use std::fmt;

use serde_json::Value;

use crate::Error;
use crate::schema::{Profiles, SchemaProfile};
use crate::tool::Tool;

/// The longest description OpenAI takes.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// How much a [`Finding`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// A provider would refuse the tool, or a profile cannot say what its
    /// schema means: [`assert_clean`] panics, `haip lint` exits 1.
    Error,
    /// The tool works, but models use it worse: a tool or a parameter
    /// without a description. Listed; it fails neither.
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One thing a provider would refuse, a model could not express, or (a
/// [warning](Severity::Warning)) a model is not told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The tool.
    pub tool: String,
    /// The schema profile it concerns; `None` for the tool's name or
    /// description, which every profile shows.
    pub profile: Option<SchemaProfile>,
    /// A JSON pointer into the tool's input schema (empty for the whole
    /// schema, the name or the description).
    pub pointer: String,
    /// What is wrong.
    pub reason: String,
    /// How to change it.
    pub fix: String,
    /// The profile cannot serve the tool at all (it is left out of listings
    /// in that profile).
    pub refused: bool,
    /// An error, or only a warning.
    pub severity: Severity,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let profile = self.profile.map_or("every profile", SchemaProfile::name);
        let pointer = if self.pointer.is_empty() {
            String::new()
        } else {
            format!(" at {}", self.pointer)
        };
        let refused = if self.refused { " (not served)" } else { "" };
        let warning = match self.severity {
            Severity::Warning => "warning: ",
            Severity::Error => "",
        };
        write!(
            f,
            "{} [{profile}]{pointer}: {warning}{}{refused}; fix: {}",
            self.tool, self.reason, self.fix
        )
    }
}

/// What the providers would refuse in one tool's schemas, given as a server
/// advertises them in the `full` profile (what `haip lint` fetches).
pub fn check_schemas(
    name: &str,
    description: &str,
    input: &Value,
    output: Option<&Value>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let portable_name = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !portable_name {
        findings.push(Finding {
            tool: name.to_owned(),
            profile: None,
            pointer: String::new(),
            reason: "OpenAI and Anthropic refuse tool names outside ^[a-zA-Z0-9_-]{1,64}$".into(),
            fix: "rename the tool: letters, digits, `_` and `-` only (`_` for `.`), at most 64"
                .into(),
            refused: false,
            severity: Severity::Error,
        });
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        findings.push(Finding {
            tool: name.to_owned(),
            profile: None,
            pointer: String::new(),
            reason: format!(
                "a description of {chars} characters (OpenAI takes {MAX_DESCRIPTION_CHARS})"
            ),
            fix: "shorten the doc comment; put details in the parameters' own docs".into(),
            refused: false,
            severity: Severity::Error,
        });
    }
    if description.trim().is_empty() {
        findings.push(Finding {
            tool: name.to_owned(),
            profile: None,
            pointer: String::new(),
            reason: "the tool has no description: a model chooses tools by theirs".into(),
            fix: "give the function a doc comment (`/// What it does.`), or the tool a \
                  `.description(..)`"
                .into(),
            refused: false,
            severity: Severity::Warning,
        });
    }
    findings.extend(undescribed_params(name, input));
    let profiles = Profiles::of(input, output);
    for profile in SchemaProfile::ALL {
        for problem in profiles.problems(profile) {
            findings.push(Finding {
                tool: name.to_owned(),
                profile: Some(profile),
                pointer: problem.pointer.clone(),
                reason: problem.reason.clone(),
                fix: problem.fix.clone(),
                refused: problem.refused,
                severity: Severity::Error,
            });
        }
    }
    findings
}

/// A warning for each parameter (a property of the input schema's root)
/// whose schema has no description, its own or that of the definition it
/// refers to.
fn undescribed_params(tool: &str, input: &Value) -> Vec<Finding> {
    let Some(properties) = input.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .filter(|(_, schema)| !described(input, schema))
        .map(|(param, _)| Finding {
            tool: tool.to_owned(),
            profile: None,
            pointer: format!(
                "/properties/{}",
                param.replace('~', "~0").replace('/', "~1")
            ),
            reason: format!(
                "parameter `{param}` has no description: a model fills it in from its name alone"
            ),
            fix: "give the parameter a doc comment (`/// What it is.` above it in the \
                  function's signature), or a `description` in the tool's input schema"
                .into(),
            refused: false,
            severity: Severity::Warning,
        })
        .collect()
}

/// Whether a schema has a description, or refers (`$ref`, alone or in an
/// `allOf`) to a definition of `root` that has one.
fn described(root: &Value, schema: &Value) -> bool {
    let has = |s: &Value| {
        s.get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| !d.trim().is_empty())
    };
    if has(schema) {
        return true;
    }
    let refs = std::iter::once(schema).chain(
        schema
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten(),
    );
    refs.filter_map(|s| s.get("$ref").and_then(Value::as_str))
        .filter_map(|r| r.strip_prefix('#'))
        .filter_map(|pointer| root.pointer(pointer))
        .any(has)
}

/// What the providers would refuse in `tool`.
pub fn check_tool(tool: &Tool) -> Vec<Finding> {
    check_schemas(
        tool.name(),
        tool.description(),
        tool.input_schema(),
        tool.output_schema(),
    )
}

/// What the providers would refuse in any of `tools`.
pub fn check<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> Vec<Finding> {
    tools.into_iter().flat_map(check_tool).collect()
}

/// Every `#[haip_tool]` linked into this binary (as [`serve`](crate::serve)
/// finds them).
pub fn annotated_tools() -> Result<Vec<Tool>, Error> {
    Ok(crate::__private::annotated_tools()?
        .into_iter()
        .map(|(tool, _)| tool)
        .collect())
}

/// Panics, listing every error, unless `tools` have none; warnings (a
/// tool or parameter without a description) are left to [`check`] and
/// `haip lint`. For a test:
///
/// ```
/// let tool = haip::Tool::builder("shout")
///     .input_schema(serde_json::json!({
///         "type": "object",
///         "properties": {"text": {"type": "string"}},
///         "required": ["text"]
///     }))
///     .handler(|_, _| async { Ok(serde_json::Value::Null) })
///     .build()
///     .unwrap();
/// haip::lint::assert_clean(&[tool]);
/// ```
#[track_caller]
pub fn assert_clean<'a>(tools: impl IntoIterator<Item = &'a Tool>) {
    let findings: Vec<Finding> = check(tools)
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    if !findings.is_empty() {
        let list: Vec<String> = findings.iter().map(|f| format!("  - {f}")).collect();
        panic!(
            "{} schema finding(s): model providers would refuse these tools or could not express them:\n{}",
            findings.len(),
            list.join("\n")
        );
    }
}

/// [`assert_clean`] for every `#[haip_tool]` linked into this binary: one
/// line in a crate's own tests.
#[track_caller]
pub fn assert_annotated_clean() {
    match annotated_tools() {
        Ok(tools) => assert_clean(&tools),
        Err(e) => panic!("the annotated tools cannot be built: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_descriptions_and_profiles_are_checked() {
        let described = json!({"type": "object", "properties": {"a": {"type": "string", "description": "A."}}, "required": ["a"]});
        assert!(check_schemas("add_numbers", "Add.", &described, None).is_empty());
        let found = check_schemas("files.read", &"d".repeat(1025), &described, None);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].reason.contains("tool names"));
        assert!(found[1].reason.contains("1025 characters"));
        assert!(found.iter().all(|f| f.severity == Severity::Error));
        let anything = json!({"type": "object", "properties": {"x": {"description": "X."}}});
        let found = check_schemas("t", "T.", &anything, None);
        let profiles: Vec<_> = found.iter().map(|f| f.profile).collect();
        assert!(
            profiles.contains(&Some(SchemaProfile::Portable)),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.profile == Some(SchemaProfile::OpenAiStrict) && f.refused)
        );
        assert_eq!(found[0].pointer, "/properties/x");
        let shown = found[0].to_string();
        assert!(
            shown.starts_with("t [portable] at /properties/x: "),
            "{shown}"
        );
        assert!(shown.contains("fix: "), "{shown}");
    }

    #[test]
    fn a_tool_or_param_without_a_description_is_a_warning() {
        let input = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Where."},
                "mode": {"$ref": "#/$defs/Mode"},
                "size": {"allOf": [{"$ref": "#/$defs/Size"}]},
                "a/b": {"type": "integer"},
                "count": {"type": "integer", "description": "  "}
            },
            "$defs": {
                "Mode": {"description": "How.", "enum": ["r", "w"]},
                "Size": {"enum": ["s", "l"]}
            }
        });
        let found = check_schemas("files", "", &input, None);
        let warnings: Vec<(&str, &str)> = found
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .map(|f| (f.pointer.as_str(), f.reason.as_str()))
            .collect();
        assert_eq!(warnings.len(), 4, "{found:#?}");
        assert!(warnings[0].1.starts_with("the tool has no description"));
        let pointers: Vec<&str> = warnings[1..].iter().map(|w| w.0).collect();
        assert_eq!(
            pointers,
            ["/properties/a~1b", "/properties/count", "/properties/size"]
        );
        assert!(warnings[1].1.contains("parameter `a/b` has no description"));
        let shown = found
            .iter()
            .find(|f| f.pointer == "/properties/count")
            .unwrap()
            .to_string();
        assert!(
            shown.starts_with("files [every profile] at /properties/count: warning: parameter"),
            "{shown}"
        );
        // Warnings fail no test.
        let tool = Tool::builder("files")
            .input_schema(json!({"type": "object", "properties": {"p": {"type": "string"}}}))
            .handler(|_, _| async { Ok(Value::Null) })
            .build()
            .unwrap();
        assert_eq!(check_tool(&tool).len(), 2);
        assert_clean([&tool]);
    }
}

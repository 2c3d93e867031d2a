//! Found before deploy, not at runtime: what model providers would refuse
//! in your tools, checked without a server (HAIP.md §6.14).
//!
//! For every tool: each [schema profile](crate::SchemaProfile) that cannot
//! serve it, or that serves it with less than it says (a JSON pointer into
//! its schema, the reason, the fix); a name that OpenAI and Anthropic refuse
//! (they take `^[a-zA-Z0-9_-]{1,64}$`, MCP allows more); a description over
//! 1024 characters. The `haip lint <url>` command runs the same checks on a
//! running server.
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

/// One thing a provider would refuse, or a model could not express.
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
        write!(
            f,
            "{} [{profile}]{pointer}: {}{refused}; fix: {}",
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
        });
    }
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
            });
        }
    }
    findings
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

/// Panics, listing every finding, unless `tools` are clean. For a test:
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
    let findings = check(tools);
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
        let clean =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert!(check_schemas("add_numbers", "Add.", &clean, None).is_empty());
        let found = check_schemas("files.read", &"d".repeat(1025), &clean, None);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].reason.contains("tool names"));
        assert!(found[1].reason.contains("1025 characters"));
        let anything = json!({"type": "object", "properties": {"x": {}}});
        let found = check_schemas("t", "", &anything, None);
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
}

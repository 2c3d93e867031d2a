//! Schema profiles (docs/protocol.md §6.14): what a tool *advertises* is its schema
//! rewritten for the model providers that will read it; what its params are
//! *validated against* is always the schema as written (`full`).
//!
//! Each profile is a pure function from the `full` schema, computed once per
//! tool when it is built ([`Profiles::of`]). A constraint a profile cannot
//! express (a range, a length, a format, a default) is not lost: it is said
//! in that property's `description` ("Between 1 and 12.", "Default: 20.").
//! A profile that cannot serve a tool at all (Anthropic's strict limits, say)
//! says why ([`SchemaProblem`]), and the tool is left out of listings in it.
//!
//! Calls shaped by any profile are accepted ([`args`]): a `null` for an
//! optional property is its absence, and a map sent as a list of
//! `{key, value}` pairs (how the profiles describe maps) is a map.

pub(crate) mod args;
mod rewrite;

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

pub(crate) use rewrite::Target;

/// How a tool's schemas are shown to a client (docs/protocol.md §6.14). Params are
/// always validated against the schema as written ([`Full`](Self::Full)).
///
/// | profile | for |
/// |---|---|
/// | `portable` (default) | one schema that OpenAI function calling, Anthropic `input_schema`, Gemini `parameters` / `parametersJsonSchema` and Ajv-based MCP clients all accept |
/// | `openai-strict` | OpenAI function calling with `strict: true` |
/// | `anthropic-strict` | Anthropic strict tool use |
/// | `full` | the schema as validated: JSON Schema 2020-12, as derived or as written |
///
/// ```
/// use haip::SchemaProfile;
///
/// let profile: SchemaProfile = "openai-strict".parse().unwrap();
/// assert_eq!(profile, SchemaProfile::OpenAiStrict);
/// assert_eq!(profile.to_string(), "openai-strict");
/// let err = "gemini".parse::<SchemaProfile>().unwrap_err();
/// assert!(err.to_string().contains("portable, openai-strict, anthropic-strict, full"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SchemaProfile {
    /// Accepted at once by OpenAI function calling, Anthropic `input_schema`,
    /// Gemini `parameters` and `parametersJsonSchema`, and Ajv-based MCP
    /// clients: root `type: object`, one `type` string per node, optional
    /// properties simply not required, no `$ref`/`$defs` (recursive types
    /// described four levels deep), no `additionalProperties` (maps as lists
    /// of `{key, value}` pairs), no `oneOf`/`allOf`/`not`/`if`/`const`,
    /// string enums only, no string format but `date-time` (the only one
    /// Gemini's `parameters` take besides `enum`: `email`, `uuid`, ... are
    /// said in the description, "Format: email.").
    #[default]
    Portable,
    /// What OpenAI accepts with `strict: true`: every object closed and every
    /// property required (optional ones nullable), no `default`, only the
    /// nine formats OpenAI knows, at most 10 levels of nesting, `$ref`
    /// (for recursion) without siblings.
    OpenAiStrict,
    /// What Anthropic strict tool use accepts: closed objects, no numeric or
    /// length bounds, `minItems` of 0 or 1 only, no recursion (described
    /// four levels deep), at most 24 optional and 16 union properties (a tool
    /// beyond them is not served in this profile).
    AnthropicStrict,
    /// The schema params are validated against, exactly.
    Full,
}

impl SchemaProfile {
    /// Every profile, in the order of the table above.
    pub const ALL: [SchemaProfile; 4] = [
        SchemaProfile::Portable,
        SchemaProfile::OpenAiStrict,
        SchemaProfile::AnthropicStrict,
        SchemaProfile::Full,
    ];

    /// The profile's name on the wire (`portable`, `openai-strict`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SchemaProfile::Portable => "portable",
            SchemaProfile::OpenAiStrict => "openai-strict",
            SchemaProfile::AnthropicStrict => "anthropic-strict",
            SchemaProfile::Full => "full",
        }
    }

    /// The names of every profile, comma-separated (for messages).
    pub(crate) fn names() -> String {
        SchemaProfile::ALL.map(SchemaProfile::name).join(", ")
    }

    /// The rewrite this profile applies; `None` for `full`.
    fn target(self) -> Option<Target> {
        match self {
            SchemaProfile::Portable => Some(Target::Portable),
            SchemaProfile::OpenAiStrict => Some(Target::OpenAiStrict),
            SchemaProfile::AnthropicStrict => Some(Target::AnthropicStrict),
            SchemaProfile::Full => None,
        }
    }
}

impl fmt::Display for SchemaProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A profile name that is not one of [`SchemaProfile::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProfile {
    /// The name given.
    pub name: String,
}

impl fmt::Display for UnknownProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown schema profile `{}`; expected one of: {}",
            self.name,
            SchemaProfile::names()
        )
    }
}

impl std::error::Error for UnknownProfile {}

impl FromStr for SchemaProfile {
    type Err = UnknownProfile;

    fn from_str(name: &str) -> Result<SchemaProfile, UnknownProfile> {
        SchemaProfile::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| UnknownProfile {
                name: name.to_owned(),
            })
    }
}

/// Why a profile cannot serve a schema as it is, or serves it with less
/// than it says: where (a JSON pointer into the `full` schema), why, and
/// what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    /// A JSON pointer into the schema as written.
    pub pointer: String,
    /// What the provider would refuse, or what a model could not express.
    pub reason: String,
    /// How to change the type or the schema so that it can.
    pub fix: String,
    /// The profile cannot serve the tool at all (it is left out of listings
    /// in this profile); otherwise it is served, with this shortcoming.
    pub refused: bool,
}

/// Why a profile cannot serve a tool: the reasons of those of its
/// `problems` that refuse it.
pub(crate) fn refusals(problems: &[SchemaProblem]) -> Vec<&str> {
    problems
        .iter()
        .filter(|p| p.refused)
        .map(|p| p.reason.as_str())
        .collect()
}

/// One tool's schemas under every profile, computed once when it is built.
#[derive(Debug)]
pub(crate) struct Profiles {
    /// Input schemas of portable, openai-strict, anthropic-strict.
    input: [Derived; 3],
    /// Output schemas (the same for the three: only loosened).
    output: Option<Value>,
    /// Whether calls may carry shapes to normalise ([`args`]).
    pub(crate) normalize: bool,
}

/// A schema under one profile, and what it could not express.
#[derive(Debug)]
pub(crate) struct Derived {
    pub(crate) schema: Value,
    pub(crate) problems: Vec<SchemaProblem>,
}

impl Derived {
    fn refused(&self) -> bool {
        self.problems.iter().any(|p| p.refused)
    }
}

impl Profiles {
    /// Every profile of a tool whose validated schemas are `input` and `output`.
    pub(crate) fn of(input: &Value, output: Option<&Value>) -> Profiles {
        let derive = |target| {
            let (schema, problems) = rewrite::input(input, target);
            Derived { schema, problems }
        };
        Profiles {
            input: [
                derive(Target::Portable),
                derive(Target::OpenAiStrict),
                derive(Target::AnthropicStrict),
            ],
            output: output.map(rewrite::output),
            normalize: args::needed(input),
        }
    }

    fn derived(&self, profile: SchemaProfile) -> Option<&Derived> {
        profile.target().map(|t| &self.input[t as usize])
    }

    /// The input schema advertised under `profile` (`full` is the caller's
    /// own); `None` when the profile cannot serve the tool.
    pub(crate) fn input<'a>(
        &'a self,
        full: &'a Value,
        profile: SchemaProfile,
    ) -> Option<&'a Value> {
        match self.derived(profile) {
            None => Some(full),
            Some(d) if d.refused() => None,
            Some(d) => Some(&d.schema),
        }
    }

    /// The output schema advertised under `profile`.
    pub(crate) fn output<'a>(
        &'a self,
        full: Option<&'a Value>,
        profile: SchemaProfile,
    ) -> Option<&'a Value> {
        match profile {
            SchemaProfile::Full => full,
            _ => self.output.as_ref(),
        }
    }

    /// What `profile` could not express of the input schema.
    pub(crate) fn problems(&self, profile: SchemaProfile) -> &[SchemaProblem] {
        self.derived(profile).map_or(&[], |d| &d.problems)
    }
}

#[cfg(test)]
mod tests;

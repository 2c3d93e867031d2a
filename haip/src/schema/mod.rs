//! The schema pipeline: compiled validators and the violation list of
//! `INVALID_PARAMS` (HAIP.md §6.4 step 4, §6.6).

mod generate;

pub use generate::{input_schema_for, output_schema_for};

use serde_json::{Value, json};

/// One schema violation: an RFC 6901 pointer into the validated value and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the params (`""` is the params object itself).
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

/// A JSON Schema compiled once (at registration) and used for every call.
pub(crate) struct CompiledSchema {
    validator: jsonschema::Validator,
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
        Ok(CompiledSchema { validator })
    }

    /// Every violation of `value`, sorted by path (byte order). Empty when valid.
    ///
    /// A missing required property points at the missing member, and each
    /// unexpected member of a closed object gets its own entry.
    pub(crate) fn violations(&self, value: &Value) -> Vec<Violation> {
        if self.validator.is_valid(value) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for error in self.validator.iter_errors(value) {
            let base = error.instance_path().as_str().to_owned();
            match error.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    let name = property
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| property.to_string());
                    out.push(Violation {
                        path: format!("{base}/{}", escape_pointer(&name)),
                        message: error.to_string(),
                    });
                }
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected }
                | jsonschema::error::ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                    for name in unexpected {
                        out.push(Violation {
                            path: format!("{base}/{}", escape_pointer(name)),
                            message: format!("unexpected property \"{name}\""),
                        });
                    }
                }
                _ => out.push(Violation {
                    path: base,
                    message: error.to_string(),
                }),
            }
        }
        out.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        out
    }
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

//! Snapshot tests: the exact input and output schemas `#[haip_tool]` derives
//! for a representative set of signatures.

use std::collections::BTreeMap;

use haip::{Context, Params, ToolError, haip_tool};
use serde_json::{Value, json};

/// A colour.
#[haip::data]
#[serde(rename_all = "snake_case")]
enum Colour {
    Red,
    DarkBlue,
}

/// Where something is.
#[haip::data]
struct Address {
    /// Street and number.
    street: String,
    /// Postal code, if known.
    zip: Option<String>,
}

/// A person.
#[haip::data]
struct Person {
    /// Full name.
    name: String,
    /// Home address.
    address: Address,
}

/// Shapes.
#[haip_tool]
async fn shapes(
    /// Required number.
    count: u32,
    /// Optional text.
    note: Option<String>,
    /// Defaults to 10.
    #[haip(default = 10)]
    limit: i64,
    /// A colour.
    colour: Colour,
    /// Nested objects.
    people: Vec<Person>,
    /// A map.
    scores: BTreeMap<String, f64>,
    ctx: Context,
) {
    let _ = (count, note, limit, colour, people, scores, ctx);
}

/// Validation attributes.
#[haip_tool]
async fn validated(
    #[schemars(length(min = 3, max = 20), regex(pattern = r"^[a-z]+$"))] username: String,
    #[schemars(email)] email: String,
    #[schemars(range(min = 13, max = 120))] age: u8,
) -> Result<Person, ToolError> {
    let _ = (username, email, age);
    Err(ToolError::execution("not needed"))
}

/// The whole input object.
#[haip::data]
struct Query {
    /// Search text.
    text: String,
    /// Page size.
    size: Option<u16>,
}

/// Params of a struct.
#[haip_tool]
async fn search(Params(query): Params<Query>) -> Vec<String> {
    vec![query.text]
}

fn input(tool: haip::Tool) -> Value {
    tool.input_schema().clone()
}

#[test]
fn parameters_become_closed_inlined_properties() {
    let schema = input(shapes::tool());
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "count": {"description": "Required number.", "type": "integer", "format": "uint32", "minimum": 0},
                "note": {"description": "Optional text.", "type": ["string", "null"]},
                "limit": {"description": "Defaults to 10.", "type": "integer", "format": "int64", "default": 10},
                "colour": {"description": "A colour.", "type": "string", "enum": ["red", "dark_blue"]},
                "people": {
                    "description": "Nested objects.",
                    "type": "array",
                    "items": {
                        "description": "A person.",
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "name": {"description": "Full name.", "type": "string"},
                            "address": {
                                "description": "Home address.",
                                "type": "object",
                                "additionalProperties": false,
                                "properties": {
                                    "street": {"description": "Street and number.", "type": "string"},
                                    "zip": {"description": "Postal code, if known.", "type": ["string", "null"]}
                                },
                                "required": ["street"]
                            }
                        },
                        "required": ["name", "address"]
                    }
                },
                "scores": {
                    "description": "A map.",
                    "type": "object",
                    "additionalProperties": {"type": "number", "format": "double"}
                }
            },
            "required": ["count", "colour", "people", "scores"]
        })
    );
    assert!(
        !schema.to_string().contains("$ref"),
        "sub-schemas are inlined"
    );
    assert!(
        shapes::tool().output_schema().is_none(),
        "() has no output schema"
    );
}

#[test]
fn validation_attributes_reach_the_schema() {
    let tool = validated::tool();
    assert_eq!(
        input(tool.clone())["properties"],
        json!({
            "username": {"type": "string", "minLength": 3, "maxLength": 20, "pattern": "^[a-z]+$"},
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "format": "uint8", "minimum": 13, "maximum": 120}
        })
    );
    // Result<T, E> advertises T; outputs stay open.
    let output = tool.output_schema().unwrap();
    // Serialised, an `Option` is always present (as `null` when empty).
    assert_eq!(
        output["properties"]["address"]["required"],
        json!(["street", "zip"])
    );
    assert!(output.get("additionalProperties").is_none());
    // And the compiled validator enforces the attributes.
    let violations = tool.validate_params(&json!({"username": "Ab", "email": "x", "age": 200}));
    let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
    assert_eq!(paths, ["/age", "/email", "/username", "/username"]);
}

#[test]
fn params_struct_is_the_whole_input() {
    let tool = search::tool();
    assert_eq!(
        input(tool.clone()),
        json!({
            "description": "The whole input object.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "text": {"description": "Search text.", "type": "string"},
                "size": {"description": "Page size.", "type": ["integer", "null"], "format": "uint16", "minimum": 0, "maximum": 65535}
            },
            "required": ["text"]
        })
    );
    assert_eq!(
        tool.output_schema(),
        Some(&json!({"type": "array", "items": {"type": "string"}}))
    );
}

#[test]
fn descriptions_come_from_doc_comments() {
    assert_eq!(shapes::tool().description(), "Shapes.");
    assert_eq!(search::tool().name(), "search");
}

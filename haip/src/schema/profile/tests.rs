//! The profiles on the schemas `#[haip_tool]` derives for everyday Rust types
//! (copied from what schemars writes), and on hand-written ones.

use serde_json::{Value, json};

use super::args::{needed, normalize};
use super::rewrite::{Target, UNROLL, input, output};
use super::*;

/// `create_task(title: String, priority: Priority, due: Option<String>,
/// #[haip(default = 3)] estimate_hours: u32)`.
fn create_task() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "due": {"description": "When it is due.", "type": ["string", "null"]},
            "estimate_hours": {"default": 3, "description": "Hours it should take.",
                               "format": "uint32", "minimum": 0, "type": "integer"},
            "priority": {"description": "How urgent.", "enum": ["Low", "Normal", "High"], "type": "string"},
            "title": {"description": "What to do.", "type": "string"}
        },
        "required": ["title", "priority"]
    })
}

/// `folder_size(root: Folder)` with `struct Folder { name, bytes: u64, children: Vec<Folder> }`.
fn folder_size() -> Value {
    let folder = json!({
        "additionalProperties": false,
        "description": "A folder.",
        "properties": {
            "bytes": {"format": "uint64", "minimum": 0, "type": "integer"},
            "children": {"items": {"$ref": "#/$defs/Folder"}, "type": "array"},
            "name": {"type": "string"}
        },
        "required": ["name", "bytes", "children"],
        "type": "object"
    });
    json!({
        "$defs": {"Folder": folder},
        "additionalProperties": false,
        "properties": {"root": folder},
        "required": ["root"],
        "type": "object"
    })
}

/// `average(scores: HashMap<String, f64>)`.
fn average() -> Value {
    json!({
        "additionalProperties": false,
        "properties": {"scores": {"additionalProperties": {"format": "double", "type": "number"}, "type": "object"}},
        "required": ["scores"],
        "type": "object"
    })
}

/// `area(shape: Shape)` with `enum Shape { Circle { radius: f64 }, Square(f64), Point }`,
/// and `set_mode(mode: Mode)` with documented unit variants.
fn area_and_mode() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "shape": {"description": "A shape.", "oneOf": [
                {"additionalProperties": false, "description": "A circle.", "type": "object",
                 "properties": {"Circle": {"additionalProperties": false, "type": "object",
                     "properties": {"radius": {"format": "double", "type": "number"}}, "required": ["radius"]}},
                 "required": ["Circle"]},
                {"additionalProperties": false, "type": "object",
                 "properties": {"Square": {"format": "double", "type": "number"}}, "required": ["Square"]},
                {"const": "Point", "description": "A point.", "type": "string"}
            ]},
            "mode": {"description": "A mode.", "oneOf": [
                {"const": "dark", "description": "Dark.", "type": "string"},
                {"const": "light", "description": "Light.", "type": "string"}
            ]}
        },
        "required": ["shape", "mode"]
    })
}

/// Every key of every schema node under `schema` (a rough walk: enough for tests).
fn keys_everywhere(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                if k == "properties" || k == "$defs" {
                    if let Value::Object(props) = v {
                        props.values().for_each(|p| keys_everywhere(p, out));
                    }
                } else if k != "enum" && k != "default" && k != "required" {
                    keys_everywhere(v, out);
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| keys_everywhere(v, out)),
        _ => {}
    }
}

/// What portable promises (docs/protocol.md §6.14), checked on one schema.
fn assert_portable(schema: &Value) {
    let mut keys = Vec::new();
    keys_everywhere(schema, &mut keys);
    for forbidden in [
        "$schema",
        "$defs",
        "$ref",
        "additionalProperties",
        "oneOf",
        "allOf",
        "not",
        "if",
        "const",
        "examples",
        "exclusiveMinimum",
        "uniqueItems",
    ] {
        assert!(
            !keys.contains(&forbidden.to_owned()),
            "{forbidden} in {schema:#}"
        );
    }
    assert_eq!(schema["type"], "object");
    fn types(schema: &Value) {
        match schema {
            Value::Object(map) => {
                if let Some(t) = map.get("type") {
                    assert!(t.is_string(), "one type string per node: {t}");
                }
                if map.get("type") == Some(&json!("array")) {
                    assert!(map.contains_key("items"), "arrays have items: {schema}");
                }
                if let Some(Value::Array(values)) = map.get("enum") {
                    assert!(
                        values.iter().all(Value::is_string),
                        "string enums: {schema}"
                    );
                }
                if let Some(f) = map.get("format").and_then(Value::as_str) {
                    assert!(super::rewrite::PORTABLE_FORMATS.contains(&f), "format {f}");
                }
                for (k, v) in map {
                    if k == "properties" {
                        v.as_object().unwrap().values().for_each(types);
                    } else if k != "enum" && k != "default" {
                        types(v);
                    }
                }
            }
            Value::Array(list) => list.iter().for_each(types),
            _ => {}
        }
    }
    types(schema);
}

fn portable(full: &Value) -> Value {
    let (schema, problems) = input(full, Target::Portable);
    assert!(problems.is_empty(), "{problems:?}");
    assert_portable(&schema);
    schema
}

#[test]
fn names_parse_and_unknown_ones_list_the_valid() {
    for p in SchemaProfile::ALL {
        assert_eq!(p.name().parse::<SchemaProfile>(), Ok(p));
    }
    assert_eq!(SchemaProfile::default(), SchemaProfile::Portable);
    let err = "strict".parse::<SchemaProfile>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown schema profile `strict`; expected one of: portable, openai-strict, anthropic-strict, full"
    );
}

#[test]
fn portable_optional_fields_are_not_required_and_constraints_stay_or_are_said() {
    let s = portable(&create_task());
    assert_eq!(s["required"], json!(["title", "priority"]));
    assert_eq!(
        s["properties"]["due"],
        json!({"type": "string", "description": "When it is due."})
    );
    assert_eq!(
        s["properties"]["estimate_hours"],
        json!({"type": "integer", "minimum": 0, "default": 3, "description": "Hours it should take."})
    );
    assert_eq!(
        s["properties"]["priority"]["enum"],
        json!(["Low", "Normal", "High"])
    );
}

#[test]
fn openai_strict_requires_everything_and_closes_every_object() {
    let (s, problems) = input(&create_task(), Target::OpenAiStrict);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(s["additionalProperties"], false);
    let mut required: Vec<String> = serde_json::from_value(s["required"].clone()).unwrap();
    required.sort_unstable();
    assert_eq!(required, ["due", "estimate_hours", "priority", "title"]);
    assert_eq!(s["properties"]["due"]["type"], json!(["string", "null"]));
    let hours = &s["properties"]["estimate_hours"];
    assert_eq!(hours["type"], json!(["integer", "null"]));
    assert!(hours.get("default").is_none());
    assert_eq!(hours["description"], "Hours it should take. Default: 3.");
    assert!(hours.get("format").is_none());
}

#[test]
fn anthropic_strict_says_bounds_instead_of_keeping_them() {
    let (s, problems) = input(&create_task(), Target::AnthropicStrict);
    assert!(problems.is_empty(), "{problems:?}");
    let hours = &s["properties"]["estimate_hours"];
    assert_eq!(hours["type"], "integer");
    assert!(hours.get("minimum").is_none());
    assert_eq!(hours["description"], "Hours it should take. At least 0.");
    assert_eq!(hours["default"], 3, "Anthropic takes defaults");
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(s["required"], json!(["title", "priority"]));
}

#[test]
fn recursive_types_are_unrolled_or_referred_to() {
    let s = portable(&folder_size());
    // Four levels, the last with an empty list of children.
    let mut level = &s["properties"]["root"];
    for _ in 0..UNROLL {
        assert_eq!(level["type"], "object");
        level = &level["properties"]["children"]["items"];
    }
    let last = &level["properties"]["children"];
    assert_eq!(last["maxItems"], 0, "{last}");
    assert!(
        last["description"]
            .as_str()
            .unwrap()
            .contains("leave it empty")
    );

    let (s, problems) = input(&folder_size(), Target::OpenAiStrict);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        s["properties"]["root"]["properties"]["children"]["items"],
        json!({"$ref": "#/$defs/Folder"})
    );
    assert_eq!(s["$defs"]["Folder"]["additionalProperties"], false);
    assert_eq!(
        s["$defs"]["Folder"]["properties"]["children"]["items"]["$ref"],
        "#/$defs/Folder"
    );

    let (s, problems) = input(&folder_size(), Target::AnthropicStrict);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(s.get("$defs").is_none());
}

#[test]
fn maps_become_lists_of_pairs() {
    let s = portable(&average());
    let scores = &s["properties"]["scores"];
    assert_eq!(scores["type"], "array");
    assert_eq!(scores["items"]["required"], json!(["key", "value"]));
    assert_eq!(
        scores["items"]["properties"]["key"],
        json!({"type": "string"})
    );
    assert_eq!(
        scores["items"]["properties"]["value"],
        json!({"type": "number"})
    );
    let (s, _) = input(&average(), Target::OpenAiStrict);
    assert_eq!(
        s["properties"]["scores"]["items"]["additionalProperties"],
        false
    );
}

#[test]
fn enums_with_data_are_any_of_and_documented_unit_variants_one_string_enum() {
    let s = portable(&area_and_mode());
    let shape = &s["properties"]["shape"];
    assert_eq!(shape["anyOf"].as_array().unwrap().len(), 3);
    assert_eq!(
        shape["anyOf"][2],
        json!({"type": "string", "enum": ["Point"], "description": "A point."})
    );
    assert_eq!(shape["description"], "A shape.");
    let mode = &s["properties"]["mode"];
    assert_eq!(mode["type"], "string");
    assert_eq!(mode["enum"], json!(["dark", "light"]));
    assert_eq!(
        mode["description"],
        "A mode. \"dark\": Dark; \"light\": Light."
    );
}

#[test]
fn hand_written_oddities_are_rewritten_or_reported() {
    let full = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "examples": [["a"]]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "id": {"type": "string", "format": "uri-reference"},
            "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                               {"properties": {"b": {"type": "integer"}}}]},
            "anything": {}
        }
    });
    let (s, problems) = input(&full, Target::Portable);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].pointer, "/properties/anything");
    assert!(!problems[0].refused);
    let p = &s["properties"];
    assert_eq!(
        p["level"],
        json!({"type": "integer", "description": "One of 1, 2, 3."})
    );
    assert_eq!(
        p["ratio"]["description"],
        "Greater than 0. A multiple of 0.5."
    );
    assert_eq!(p["tags"]["description"], "The items are distinct.");
    assert_eq!(p["pair"]["minItems"], 2);
    assert_eq!(p["pair"]["items"]["anyOf"].as_array().unwrap().len(), 2);
    assert_eq!(
        p["id"],
        json!({"type": "string", "description": "Format: uri-reference."})
    );
    assert_eq!(p["both"]["required"], json!(["a"]));
    assert_eq!(p["both"]["properties"]["b"]["type"], "integer");
    assert!(s.get("$schema").is_none());
    // Strict OpenAI cannot take a value of any type at all.
    let (_, problems) = input(&full, Target::OpenAiStrict);
    assert!(
        problems
            .iter()
            .any(|p| p.refused && p.pointer == "/properties/anything")
    );
}

#[test]
fn portable_keeps_only_date_time_and_says_other_string_formats() {
    // Gemini's `parameters` take no string format but `date-time` (and
    // `enum`): the others go into the description; the strict profiles
    // keep the ones their providers know.
    let full = json!({
        "type": "object",
        "properties": {
            "to": {"type": "string", "format": "email", "description": "Who gets it."},
            "id": {"type": "string", "format": "uuid"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "cc": {"type": "array", "items": {"type": "string", "format": "email"}},
            "n": {"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255}
        },
        "required": ["to"]
    });
    let (s, problems) = input(&full, Target::Portable);
    assert!(problems.is_empty(), "{problems:?}");
    assert_portable(&s);
    let p = &s["properties"];
    assert_eq!(
        p["to"],
        json!({"type": "string", "description": "Who gets it. Format: email."})
    );
    assert_eq!(
        p["id"],
        json!({"type": "string", "description": "Format: uuid."})
    );
    assert_eq!(p["day"]["description"], "Format: date.");
    assert_eq!(p["at"], json!({"type": "string", "format": "date-time"}));
    assert_eq!(
        p["cc"]["items"],
        json!({"type": "string", "description": "Format: email."})
    );
    assert!(p["n"].get("format").is_none());
    assert!(p["n"]["description"].is_null(), "{}", p["n"]);
    for target in [Target::OpenAiStrict, Target::AnthropicStrict] {
        let (s, _) = input(&full, target);
        assert_eq!(s["properties"]["to"]["format"], "email", "{target:?}");
        assert_eq!(s["properties"]["id"]["format"], "uuid", "{target:?}");
    }
    // Params are still validated against the schema as written: the format
    // said only in portable's description is still checked.
    let profiles = Profiles::of(&full, None);
    assert_eq!(profiles.input(&full, SchemaProfile::Full), Some(&full));
    let compiled = crate::schema::CompiledSchema::compile(&full).unwrap();
    assert!(
        compiled
            .violations(&json!({"to": "ada@example.com"}))
            .is_empty()
    );
    assert!(
        !compiled
            .violations(&json!({"to": "not an address"}))
            .is_empty()
    );
}

#[test]
fn anthropic_limits_refuse_the_tool_and_say_which() {
    let mut props = serde_json::Map::new();
    for i in 0..30 {
        props.insert(format!("p{i}"), json!({"type": "string"}));
    }
    let full = json!({"type": "object", "properties": props});
    let (_, problems) = input(&full, Target::AnthropicStrict);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].refused);
    assert!(
        problems[0].reason.contains("30 optional properties"),
        "{}",
        problems[0].reason
    );
    let profiles = Profiles::of(&full, None);
    assert!(
        profiles
            .input(&full, SchemaProfile::AnthropicStrict)
            .is_none()
    );
    assert!(profiles.input(&full, SchemaProfile::Portable).is_some());
    assert_eq!(profiles.input(&full, SchemaProfile::Full), Some(&full));
}

#[test]
fn output_schemas_are_only_loosened() {
    let full = json!({"$schema": "x", "type": "object", "properties": {
        "n": {"type": "integer", "format": "uint8", "maximum": 255},
        "when": {"type": ["string", "null"], "format": "date-time"}
    }, "required": ["n"]});
    let s = output(&full);
    assert_eq!(
        s,
        json!({"type": "object", "properties": {
        "n": {"type": "integer", "maximum": 255},
        "when": {"type": ["string", "null"], "format": "date-time"}
    }, "required": ["n"]})
    );
}

#[test]
fn nulls_for_optional_properties_are_absences() {
    let full = create_task();
    assert!(needed(&full));
    let mut params = json!({"title": "t", "priority": "Low", "due": null, "estimate_hours": null});
    normalize(&full, &mut params);
    assert_eq!(params, json!({"title": "t", "priority": "Low"}));
    // A required property's null stays (and fails validation as it should).
    let mut params = json!({"title": null, "priority": "Low"});
    normalize(&full, &mut params);
    assert_eq!(params, json!({"title": null, "priority": "Low"}));
    // Nested, through `$ref`s, inside lists.
    let nested = json!({
        "$defs": {"A": {"type": "object", "properties": {"zip": {"type": ["string", "null"]}, "list": {"type": "array", "items": {"$ref": "#/$defs/A"}}}}},
        "type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}
    });
    let mut params = json!({"a": {"zip": null, "list": [{"zip": null, "list": []}]}});
    normalize(&nested, &mut params);
    assert_eq!(params, json!({"a": {"list": [{"list": []}]}}));
}

#[test]
fn pairs_where_a_map_is_expected_are_the_map() {
    let full = average();
    let mut params = json!({"scores": [{"key": "ada", "value": 1.5}, {"key": "bob", "value": 2}]});
    normalize(&full, &mut params);
    assert_eq!(params, json!({"scores": {"ada": 1.5, "bob": 2}}));
    // Anything else is left for validation to refuse.
    let mut params = json!({"scores": [{"key": "ada"}]});
    normalize(&full, &mut params);
    assert_eq!(params, json!({"scores": [{"key": "ada"}]}));
    // An ordinary map passes unchanged.
    let mut params = json!({"scores": {"ada": 1}});
    normalize(&full, &mut params);
    assert_eq!(params, json!({"scores": {"ada": 1}}));
}

#[test]
fn closed_schemas_without_optional_properties_need_no_walk() {
    let echo = json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]});
    assert!(!needed(&echo));
    assert!(needed(&average()));
}

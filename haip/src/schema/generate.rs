//! Schemas derived from Rust types: the one generation pipeline every
//! `#[haip_tool]` goes through.
//!
//! Input schemas describe how params are deserialised, with every sub-schema
//! inlined (no `$ref`) and every object closed (`additionalProperties: false`),
//! so simple clients and LLM function-calling accept them. Output schemas
//! describe how results are serialised and stay open.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The input schema for params deserialised into `T`.
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let mut schema = generate::<T>(SchemaSettings::draft2020_12().for_deserialize());
    close_objects(&mut schema);
    schema
}

/// The output schema for results serialised from `T`; `None` for `()` (no result).
pub fn output_schema_for<T: JsonSchema>() -> Option<Value> {
    let schema = generate::<T>(SchemaSettings::draft2020_12().for_serialize());
    let is_unit = schema.get("type") == Some(&Value::from("null"))
        && schema.as_object().is_some_and(|o| o.len() == 1);
    (!is_unit).then_some(schema)
}

/// The schema of a question's answers of type `T`, before it is reduced to
/// a form (`schema::form`): open, as derived.
pub(crate) fn form_schema_for<T: JsonSchema>() -> Value {
    generate::<T>(SchemaSettings::draft2020_12().for_deserialize())
}

/// A self-contained schema (sub-schemas inlined, no root `title`; no
/// `$schema` added, though a type that writes its own keeps it).
fn generate<T: JsonSchema>(settings: SchemaSettings) -> Value {
    let settings = settings.with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    strip_root(&mut schema);
    schema
}

/// Drops the root `title` (a generated Rust type name means nothing to a client).
fn strip_root(schema: &mut Value) {
    if let Value::Object(root) = schema {
        root.remove("title");
    }
}

/// Adds `additionalProperties: false` to every object schema with `properties`
/// that does not say otherwise, walking only schema positions (never `enum`,
/// `const`, `default` or `examples` data, never a `properties` map as such).
pub(crate) fn close_objects(schema: &mut Value) {
    walk_schemas(schema, &mut |obj| {
        if obj.get("properties").is_some_and(Value::is_object)
            && !obj.contains_key("additionalProperties")
            && !obj.contains_key("unevaluatedProperties")
        {
            obj.insert("additionalProperties".into(), Value::Bool(false));
        }
    });
}

/// Calls `f` on every schema object inside `schema`, `schema` included,
/// walking only schema positions (never `enum`, `const`, `default` or
/// `examples` data).
pub(crate) fn walk_schemas(schema: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(obj) = schema else { return };
    f(obj);
    for (key, value) in obj.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(map) = value {
                    map.values_mut().for_each(|v| walk_schemas(v, f));
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "additionalItems" => match value {
                Value::Array(list) => list.iter_mut().for_each(|v| walk_schemas(v, f)),
                other => walk_schemas(other, f),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(list) = value {
                    list.iter_mut().for_each(|v| walk_schemas(v, f));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn close_objects_walks_schema_positions_only() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "properties": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "default": {"properties": {}},
            "oneOf": [{"properties": {"a": {}}}]
        });
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["properties"]["additionalProperties"], false);
        assert!(
            s["properties"].get("additionalProperties").is_none(),
            "a properties map is not a schema"
        );
        assert_eq!(
            s["properties"]["list"]["items"]["additionalProperties"],
            false
        );
        assert_eq!(
            s["properties"]["map"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert!(
            s["default"].get("additionalProperties").is_none(),
            "defaults are data"
        );
        assert_eq!(s["oneOf"][0]["additionalProperties"], false);
    }

    #[test]
    fn unit_has_no_output_schema() {
        assert_eq!(output_schema_for::<()>(), None);
        assert_eq!(
            output_schema_for::<f64>(),
            Some(json!({"type": "number", "format": "double"}))
        );
    }
}

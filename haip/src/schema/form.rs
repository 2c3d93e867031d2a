//! Forms: the schema of a tool's question (`ctx.ask::<T>()`), reduced to what
//! people can fill in and MCP elicitation allows (docs/protocol.md §6.11): a flat
//! object of strings, numbers, integers, booleans and enums (single or
//! multiple choice).

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use super::{CompiledSchema, Violations};

/// Forms built so far, by answer type (or why the type is not one).
type FormCache = HashMap<TypeId, Result<Arc<Form>, String>>;

/// A question's form: the schema sent to the client, and its validator.
#[derive(Debug)]
pub(crate) struct Form {
    schema: Value,
    compiled: CompiledSchema,
}

impl Form {
    /// The form for answers of type `T`, built once per type; `Err` says why
    /// `T` cannot be a form.
    pub(crate) fn of<T: JsonSchema + 'static>() -> Result<Arc<Form>, String> {
        static FORMS: OnceLock<Mutex<FormCache>> = OnceLock::new();
        let forms = FORMS.get_or_init(Mutex::default);
        let id = TypeId::of::<T>();
        if let Some(found) = forms.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return found.clone();
        }
        let built = Form::from_schema(super::generate::form_schema_for::<T>())
            .map(Arc::new)
            .map_err(|reason| {
                format!("{} cannot be a question's form: {reason}", T::schema_name())
            });
        forms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, built.clone());
        built
    }

    /// The form of `ctx.confirm`: one required boolean, `confirm`, false
    /// unless the person says yes.
    pub(crate) fn confirm() -> Arc<Form> {
        static CONFIRM: OnceLock<Arc<Form>> = OnceLock::new();
        Arc::clone(CONFIRM.get_or_init(|| {
            let schema = json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm", "default": false}},
                "required": ["confirm"],
            });
            Arc::new(Form::from_schema(schema).expect("the confirm form is a form"))
        }))
    }

    /// Reduces a generated object schema to a form.
    pub(crate) fn from_schema(schema: Value) -> Result<Form, String> {
        let Value::Object(mut root) = schema else {
            return Err("its schema is not an object".to_owned());
        };
        if root.get("type").and_then(Value::as_str) != Some("object") {
            return Err("it is not a struct (a question asks for an object of fields)".to_owned());
        }
        let properties = match root.remove("properties") {
            Some(Value::Object(p)) => p,
            None => Map::new(),
            Some(_) => return Err("its `properties` are not an object".to_owned()),
        };
        let mut fields = Map::new();
        for (name, property) in properties {
            let field = field(property).map_err(|why| format!("field `{name}` {why}"))?;
            fields.insert(name, field);
        }
        let mut out = Map::new();
        out.insert("type".into(), "object".into());
        for key in ["title", "description"] {
            if let Some(v @ Value::String(_)) = root.remove(key) {
                out.insert(key.into(), v);
            }
        }
        out.insert("properties".into(), Value::Object(fields));
        if let Some(Value::Array(required)) = root.remove("required") {
            out.insert("required".into(), Value::Array(required));
        }
        let schema = Value::Object(out);
        let compiled = CompiledSchema::compile(&schema)?;
        Ok(Form { schema, compiled })
    }

    /// The schema sent with the question.
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// How `answer` violates the form.
    pub(crate) fn check(&self, answer: &Value, max: usize) -> Violations {
        self.compiled.check(answer, max)
    }
}

/// Keys kept on a field of each type (MCP elicitation's primitive schemas).
const COMMON: [&str; 3] = ["title", "description", "default"];
const STRING: [&str; 5] = ["minLength", "maxLength", "pattern", "format", "enumNames"];
const NUMBER: [&str; 2] = ["minimum", "maximum"];
const ARRAY: [&str; 2] = ["minItems", "maxItems"];
/// String formats MCP elicitation allows.
const FORMATS: [&str; 4] = ["email", "uri", "date", "date-time"];

/// One field, reduced; `Err` completes "field `x` ...".
fn field(property: Value) -> Result<Value, String> {
    let Value::Object(mut p) = property else {
        return Err("has no schema".to_owned());
    };
    unwrap_optional(&mut p);
    // An enum with documented or titled variants: `oneOf` of constants.
    if p.get("type").is_none()
        && let Some(choices) = titled_choices(&p)
    {
        let mut out = keep(&p, &COMMON);
        out.insert("type".into(), "string".into());
        out.insert("oneOf".into(), Value::Array(choices));
        return Ok(Value::Object(out));
    }
    let kind = p
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut out = keep(&p, &COMMON);
    out.insert("type".into(), Value::String(kind.clone()));
    match kind.as_str() {
        "string" => {
            for (k, v) in keep(&p, &STRING) {
                if k == "format" && !v.as_str().is_some_and(|f| FORMATS.contains(&f)) {
                    continue; // a format clients would not know
                }
                out.insert(k, v);
            }
            if let Some(choices) = p.get("enum") {
                if !choices
                    .as_array()
                    .is_some_and(|c| c.iter().all(Value::is_string))
                {
                    return Err("is an enum of values other than strings".to_owned());
                }
                out.insert("enum".into(), choices.clone());
            } else if let Some(choices) = titled_choices(&p) {
                out.insert("oneOf".into(), Value::Array(choices));
            }
        }
        "integer" | "number" => out.extend(keep(&p, &NUMBER)),
        "boolean" => {}
        "array" => {
            out.extend(keep(&p, &ARRAY));
            let items = match p.get("items") {
                Some(Value::Object(items)) => items,
                _ => return Err("is a list without an item type".to_owned()),
            };
            out.insert("items".into(), multi_choice(items)?);
        }
        "object" => {
            return Err("is a nested object: a form's fields are strings, numbers, integers, booleans and enums".to_owned());
        }
        "" => {
            return Err(
                "has no single type (untagged enums and maps cannot be form fields)".to_owned(),
            );
        }
        other => return Err(format!("has type `{other}`, which a form cannot ask for")),
    }
    Ok(Value::Object(out))
}

/// `Option<T>`: `type: [T, "null"]`, or `anyOf`/`oneOf` of `T` and `null`,
/// becomes `T` (the field is optional through `required`).
fn unwrap_optional(p: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = p.get("type") {
        let kinds: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if kinds.len() == 1 {
            p.insert("type".into(), kinds.into_iter().next().unwrap_or_default());
        }
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(options)) = p.get(key) else {
            continue;
        };
        let is_null = |o: &Value| o.get("type").and_then(Value::as_str) == Some("null");
        if options.len() == 2 && options.iter().any(is_null) {
            let inner = options.iter().find(|o| !is_null(o)).cloned();
            p.remove(key);
            if let Some(Value::Object(inner)) = inner {
                for (k, v) in inner {
                    p.entry(k).or_insert(v);
                }
            }
            // `type: [X, null]` inside the option.
            unwrap_optional(p);
        }
    }
}

/// `oneOf`/`anyOf` whose options are all string constants, as `{const,
/// title}` (a variant's doc comment is its title when it has none).
fn titled_choices(p: &Map<String, Value>) -> Option<Vec<Value>> {
    let options = p
        .get("oneOf")
        .or_else(|| p.get("anyOf"))
        .and_then(Value::as_array)?;
    options
        .iter()
        .map(|option| {
            let value = option.get("const").or_else(|| {
                option
                    .get("enum")
                    .and_then(Value::as_array)
                    .filter(|e| e.len() == 1)
                    .and_then(|e| e.first())
            })?;
            let value = value.as_str()?;
            let title = option
                .get("title")
                .or_else(|| option.get("description"))
                .and_then(Value::as_str)
                .unwrap_or(value);
            Some(json!({"const": value, "title": title}))
        })
        .collect()
}

/// The items of a multiple-choice field: `{type: string, enum}` or `{anyOf:
/// [{const, title}]}`.
fn multi_choice(items: &Map<String, Value>) -> Result<Value, String> {
    if let Some(choices) = items.get("enum").and_then(Value::as_array)
        && choices.iter().all(Value::is_string)
    {
        return Ok(json!({"type": "string", "enum": choices}));
    }
    if let Some(choices) = titled_choices(items) {
        return Ok(json!({"anyOf": choices}));
    }
    Err(
        "is a list of something other than enum choices (a form's lists are multiple choice)"
            .to_owned(),
    )
}

fn keep(p: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| p.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    #[serde(rename_all = "snake_case")]
    enum Time {
        #[serde(rename = "18:00")]
        Six,
        #[serde(rename = "19:00")]
        Seven,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Titled {
        /// First Option
        #[serde(rename = "value1")]
        One,
        #[schemars(title = "Second Option")]
        #[serde(rename = "value2")]
        Two,
    }

    fn default_name() -> String {
        "John Doe".into()
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Booking {
        /// How many people.
        #[schemars(range(min = 1, max = 12))]
        party_size: u8,
        time: Time,
        #[serde(default = "default_name")]
        name: String,
        note: Option<String>,
        vip: Option<bool>,
        titled: Titled,
        many: Vec<Time>,
        many_titled: Vec<Titled>,
        #[schemars(email)]
        email: Option<String>,
    }

    #[test]
    fn structs_of_primitives_and_enums_become_forms() {
        let form = Form::of::<Booking>().unwrap();
        let s = form.schema();
        let p = &s["properties"];
        assert_eq!(
            p["party_size"],
            json!({"type": "integer", "description": "How many people.", "minimum": 1, "maximum": 12})
        );
        assert_eq!(
            p["time"],
            json!({"type": "string", "enum": ["18:00", "19:00"]})
        );
        assert_eq!(p["name"], json!({"type": "string", "default": "John Doe"}));
        assert_eq!(p["note"], json!({"type": "string"}));
        assert_eq!(p["vip"], json!({"type": "boolean"}));
        assert_eq!(
            p["titled"],
            json!({"type": "string", "oneOf": [{"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}]})
        );
        assert_eq!(
            p["many"],
            json!({"type": "array", "items": {"type": "string", "enum": ["18:00", "19:00"]}})
        );
        assert_eq!(
            p["many_titled"]["items"],
            json!({"anyOf": [{"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}]})
        );
        assert_eq!(p["email"], json!({"type": "string", "format": "email"}));
        let mut required: Vec<String> = serde_json::from_value(s["required"].clone()).unwrap();
        required.sort();
        assert_eq!(
            required,
            ["many", "many_titled", "party_size", "time", "titled"]
        );
        // Answers are checked against it.
        let ok = json!({"party_size": 2, "time": "19:00", "titled": "value1", "many": [], "many_titled": []});
        assert!(form.check(&ok, 10).is_empty());
        let bad = json!({"party_size": 13, "time": "21:00", "titled": "value1", "many": [], "many_titled": []});
        assert_eq!(form.check(&bad, 10).total, 2);
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        x: u8,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        inner: Inner,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Numbers {
        list: Vec<u32>,
    }

    #[test]
    fn other_shapes_are_refused_with_the_reason() {
        let err = Form::of::<Nested>().unwrap_err();
        assert!(
            err.contains("Nested cannot be a question's form: field `inner` is a nested object"),
            "{err}"
        );
        let err = Form::of::<Numbers>().unwrap_err();
        assert!(
            err.contains("field `list` is a list of something other than enum choices"),
            "{err}"
        );
        let err = Form::of::<u32>().unwrap_err();
        assert!(err.contains("not a struct"), "{err}");
    }

    #[test]
    fn confirm_is_one_boolean() {
        let form = Form::confirm();
        assert!(form.check(&json!({"confirm": false}), 5).is_empty());
        assert!(!form.check(&json!({}), 5).is_empty());
    }
}

//! A tool's question (docs/protocol.md §6.11) and the fields of its form: what a
//! client needs to put the question to a person and to turn what they typed
//! into an answer.
//!
//! The schema of a question is a flat object of primitive fields (the MCP
//! elicitation subset): strings, integers, numbers, booleans, single choices
//! (`enum`, or `oneOf` of `{const, title}`) and multiple choices (`array` of
//! such). [`Question::fields`] reads it leniently (unknown keywords are
//! ignored) and fails with a [`SchemaError`] naming the field only where a
//! field cannot be asked at all (a nested object, a list of free values, a
//! field with no type).

use serde_json::{Map, Number, Value};

/// A question a tool asked during a call (`TOOL_UPDATE` `WAITING_INPUT`,
/// docs/protocol.md §6.11). Answer it with [`Call::answer`](super::Call::answer),
/// [`Call::decline`](super::Call::decline) or
/// [`Call::cancel_question`](super::Call::cancel_question).
///
/// ```
/// use haip::client::{FieldKind, Question};
/// use serde_json::json;
///
/// let question = Question {
///     request_id: "q-1".into(),
///     message: "How many people, and when?".into(),
///     schema: json!({"type": "object", "properties": {
///         "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
///         "time": {"type": "string", "enum": ["18:00", "19:00", "20:00"]}
///     }, "required": ["party_size", "time"]}),
/// };
/// let fields = question.fields().unwrap();
/// assert_eq!(fields[0].name, "party_size");
/// assert!(matches!(fields[0].kind, FieldKind::Integer { minimum: Some(_), .. }));
/// assert_eq!(fields[1].parse("2").unwrap(), json!("19:00")); // the 2nd choice
/// assert!(fields[0].parse("13").is_err()); // above the maximum
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Names the question in the answer (`input_request.request_id`).
    pub request_id: String,
    /// What the tool asks, for the person to read.
    pub message: String,
    /// The form: a JSON Schema object of flat fields, as sent.
    pub schema: Value,
}

impl Question {
    /// The form's fields, in the order of the schema's `properties` (as the
    /// JSON map keeps them: alphabetical unless `serde_json`'s
    /// `preserve_order` feature is on). A question with no fields asks for a
    /// plain yes (accept) or no (decline).
    pub fn fields(&self) -> Result<Vec<Field>, SchemaError> {
        let Value::Object(schema) = &self.schema else {
            return Err(SchemaError::form(
                "the question's schema is not a JSON object",
            ));
        };
        if let Some(kind) = schema.get("type")
            && kind != "object"
        {
            return Err(SchemaError::form(format!(
                "the question's schema has type {kind}, not \"object\""
            )));
        }
        let properties = match schema.get("properties") {
            None => return Ok(Vec::new()),
            Some(Value::Object(properties)) => properties,
            Some(_) => {
                return Err(SchemaError::form(
                    "the question's `properties` are not an object",
                ));
            }
        };
        let required: Vec<&str> = match schema.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        properties
            .iter()
            .map(|(name, property)| {
                Field::from_schema(name, property, required.contains(&name.as_str())).map_err(
                    |reason| SchemaError {
                        field: Some(name.clone()),
                        reason,
                    },
                )
            })
            .collect()
    }

    /// The form's `title`, when it has one.
    pub fn title(&self) -> Option<&str> {
        self.schema.get("title").and_then(Value::as_str)
    }
}

/// Why a question's form cannot be shown: which field, and what is wrong
/// with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// The field, or `None` when the form itself is unusable.
    pub field: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl SchemaError {
    fn form(reason: impl Into<String>) -> SchemaError {
        SchemaError {
            field: None,
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "field `{field}` {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Why typed text is not a valid value for a field; the text says what is
/// expected, for the person to read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

/// One field of a question's form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The property name: the key of its value in the answer.
    pub name: String,
    /// What kind of value it takes, with its limits.
    pub kind: FieldKind,
    /// A short human name (`title`), when the schema gives one.
    pub title: Option<String>,
    /// A longer explanation (`description`), when the schema gives one.
    pub description: Option<String>,
    /// Whether the answer must have it (listed in the form's `required`).
    pub required: bool,
    /// The suggested value (`default`), as sent.
    pub default: Option<Value>,
}

/// What kind of value a [`Field`] takes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FieldKind {
    /// Free text (`"type": "string"`).
    Text {
        /// `minLength`, in characters.
        min_length: Option<u64>,
        /// `maxLength`, in characters.
        max_length: Option<u64>,
        /// `format` (`email`, `uri`, `date`, `date-time`), not checked here.
        format: Option<String>,
        /// `pattern`, a regular expression, not checked here.
        pattern: Option<String>,
    },
    /// A whole number (`"type": "integer"`).
    Integer {
        /// `minimum`.
        minimum: Option<f64>,
        /// `maximum`.
        maximum: Option<f64>,
    },
    /// A number (`"type": "number"`).
    Number {
        /// `minimum`.
        minimum: Option<f64>,
        /// `maximum`.
        maximum: Option<f64>,
    },
    /// Yes or no (`"type": "boolean"`).
    Boolean,
    /// One of a list of strings (`enum`, or `oneOf` of `{const, title}`).
    Choice(Vec<Choice>),
    /// Any number of a list of strings (`"type": "array"` whose `items` are
    /// an enum or an `anyOf` of `{const, title}`).
    MultiChoice {
        /// The choices.
        choices: Vec<Choice>,
        /// `minItems`.
        min_items: Option<u64>,
        /// `maxItems`.
        max_items: Option<u64>,
    },
}

impl FieldKind {
    /// A short name for the kind: `text`, `integer`, `number`, `boolean`,
    /// `choice`, `choices`.
    pub fn name(&self) -> &'static str {
        match self {
            FieldKind::Text { .. } => "text",
            FieldKind::Integer { .. } => "integer",
            FieldKind::Number { .. } => "number",
            FieldKind::Boolean => "boolean",
            FieldKind::Choice(_) => "choice",
            FieldKind::MultiChoice { .. } => "choices",
        }
    }
}

/// One choice of a [`FieldKind::Choice`] or [`FieldKind::MultiChoice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The value sent in the answer.
    pub value: String,
    /// What to show instead of the value, when the schema names it
    /// differently (`title`, or `enumNames`).
    pub title: Option<String>,
}

impl Choice {
    /// What to show: `Title (value)` when it has a title other than its
    /// value, else the value.
    pub fn label(&self) -> String {
        match &self.title {
            Some(title) if *title != self.value => format!("{title} ({})", self.value),
            _ => self.value.clone(),
        }
    }
}

impl Field {
    /// Reads one property of a form; `Err` completes "field `x` ...".
    fn from_schema(name: &str, property: &Value, required: bool) -> Result<Field, String> {
        let Value::Object(p) = property else {
            return Err("has a schema that is not a JSON object".to_owned());
        };
        let text = |key: &str| p.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = match single_type(p)? {
            Some("string") => match choices(p)? {
                Some(choices) => FieldKind::Choice(choices),
                None => FieldKind::Text {
                    min_length: p.get("minLength").and_then(Value::as_u64),
                    max_length: p.get("maxLength").and_then(Value::as_u64),
                    format: text("format"),
                    pattern: text("pattern"),
                },
            },
            Some("integer") => FieldKind::Integer {
                minimum: p.get("minimum").and_then(Value::as_f64),
                maximum: p.get("maximum").and_then(Value::as_f64),
            },
            Some("number") => FieldKind::Number {
                minimum: p.get("minimum").and_then(Value::as_f64),
                maximum: p.get("maximum").and_then(Value::as_f64),
            },
            Some("boolean") => FieldKind::Boolean,
            Some("array") => {
                let Some(Value::Object(items)) = p.get("items") else {
                    return Err("is a list without an item schema".to_owned());
                };
                let Some(choices) = choices(items)? else {
                    return Err(
                        "is a list of free values; only lists of choices can be asked".to_owned(),
                    );
                };
                FieldKind::MultiChoice {
                    choices,
                    min_items: p.get("minItems").and_then(Value::as_u64),
                    max_items: p.get("maxItems").and_then(Value::as_u64),
                }
            }
            Some(other) => return Err(format!("has type `{other}`, which cannot be asked")),
            // No type: an enum of strings is still a choice.
            None => match choices(p)? {
                Some(choices) => FieldKind::Choice(choices),
                None => return Err("has no type".to_owned()),
            },
        };
        if let FieldKind::Choice(c) | FieldKind::MultiChoice { choices: c, .. } = &kind
            && c.is_empty()
        {
            return Err("offers no choices".to_owned());
        }
        Ok(Field {
            name: name.to_owned(),
            kind,
            title: text("title"),
            description: text("description"),
            required,
            default: p.get("default").cloned(),
        })
    }

    /// The choices of a choice field (empty for other kinds).
    pub fn choices(&self) -> &[Choice] {
        match &self.kind {
            FieldKind::Choice(choices) | FieldKind::MultiChoice { choices, .. } => choices,
            _ => &[],
        }
    }

    /// The default as text to show (a choice list joined with `, `), when
    /// the field has one.
    pub fn default_text(&self) -> Option<String> {
        self.default.as_ref().map(show_value)
    }

    /// Turns what a person typed into this field's value: a JSON integer,
    /// number, boolean (`y`/`yes`/`true`/`1`, `n`/`no`/`false`/`0`), the
    /// chosen string (a choice's value, its number counted from 1, or its
    /// title), a list of choices separated by commas, or the text itself.
    /// Limits the schema states (length, range, number of choices) are
    /// checked; `format` and `pattern` are left to the server. The text is
    /// taken as given except for surrounding whitespace, which is trimmed
    /// for every kind but free text.
    ///
    /// ```
    /// use haip::client::Question;
    /// use serde_json::json;
    ///
    /// let question = Question {
    ///     request_id: "q".into(),
    ///     message: String::new(),
    ///     schema: json!({"properties": {"ok": {"type": "boolean"}}}),
    /// };
    /// let ok = &question.fields().unwrap()[0];
    /// assert_eq!(ok.parse("yes").unwrap(), json!(true));
    /// assert!(ok.parse("maybe").is_err());
    /// ```
    pub fn parse(&self, text: &str) -> Result<Value, InputError> {
        let trimmed = text.trim();
        match &self.kind {
            FieldKind::Text {
                min_length,
                max_length,
                ..
            } => {
                let length = text.chars().count() as u64;
                if let Some(min) = min_length
                    && length < *min
                {
                    return Err(InputError(format!(
                        "must be at least {min} characters long"
                    )));
                }
                if let Some(max) = max_length
                    && length > *max
                {
                    return Err(InputError(format!("must be at most {max} characters long")));
                }
                Ok(Value::String(text.to_owned()))
            }
            FieldKind::Integer { minimum, maximum } => {
                let n = parse_integer(trimmed)
                    .ok_or_else(|| InputError(format!("`{trimmed}` is not a whole number")))?;
                in_range(n as f64, *minimum, *maximum)?;
                Ok(Value::from(n))
            }
            FieldKind::Number { minimum, maximum } => {
                if let Some(n) = parse_integer(trimmed).filter(|_| !trimmed.contains('.')) {
                    in_range(n as f64, *minimum, *maximum)?;
                    return Ok(Value::from(n));
                }
                let n = trimmed
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| InputError(format!("`{trimmed}` is not a number")))?;
                in_range(n, *minimum, *maximum)?;
                Number::from_f64(n)
                    .map(Value::Number)
                    .ok_or_else(|| InputError(format!("`{trimmed}` is not a number")))
            }
            FieldKind::Boolean => match trimmed.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" | "t" | "1" | "on" => Ok(Value::Bool(true)),
                "n" | "no" | "false" | "f" | "0" | "off" => Ok(Value::Bool(false)),
                _ => Err(InputError(format!("`{trimmed}` is not yes or no (y/n)"))),
            },
            FieldKind::Choice(choices) => {
                pick(choices, trimmed).map(|c| Value::String(c.value.clone()))
            }
            FieldKind::MultiChoice {
                choices,
                min_items,
                max_items,
            } => {
                let mut picked: Vec<Value> = Vec::new();
                for part in trimmed.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let value = Value::String(pick(choices, part)?.value.clone());
                    if !picked.contains(&value) {
                        picked.push(value);
                    }
                }
                let n = picked.len() as u64;
                if let Some(min) = min_items
                    && n < *min
                {
                    return Err(InputError(format!("choose at least {min}")));
                }
                if let Some(max) = max_items
                    && n > *max
                {
                    return Err(InputError(format!("choose at most {max}")));
                }
                Ok(Value::Array(picked))
            }
        }
    }
}

/// The one type a property has: `"type": "x"`, or `["x", "null"]`.
fn single_type(p: &Map<String, Value>) -> Result<Option<&str>, String> {
    match p.get("type") {
        None => Ok(None),
        Some(Value::String(kind)) => Ok(Some(kind)),
        Some(Value::Array(kinds)) => {
            let kinds: Vec<&str> = kinds
                .iter()
                .filter_map(Value::as_str)
                .filter(|k| *k != "null")
                .collect();
            match kinds.as_slice() {
                [kind] => Ok(Some(kind)),
                _ => Err(format!("has several types ({})", kinds.join(", "))),
            }
        }
        Some(other) => Err(format!("has a `type` that is not a name: {other}")),
    }
}

/// The choices of a schema with `enum` (titled by `enumNames` when present),
/// or `oneOf`/`anyOf` of `{const, title}`; `None` when it has neither.
fn choices(p: &Map<String, Value>) -> Result<Option<Vec<Choice>>, String> {
    if let Some(values) = p.get("enum") {
        let Value::Array(values) = values else {
            return Err("has an `enum` that is not a list".to_owned());
        };
        let titles: Vec<Option<&str>> = match p.get("enumNames") {
            Some(Value::Array(names)) if names.len() == values.len() => {
                names.iter().map(Value::as_str).collect()
            }
            _ => vec![None; values.len()],
        };
        return values
            .iter()
            .zip(titles)
            .map(|(value, title)| match value {
                Value::String(value) => Ok(Choice {
                    value: value.clone(),
                    title: title.map(str::to_owned),
                }),
                other => Err(format!("has a choice that is not a string: {other}")),
            })
            .collect::<Result<Vec<Choice>, String>>()
            .map(Some);
    }
    let Some(options) = p.get("oneOf").or_else(|| p.get("anyOf")) else {
        return Ok(None);
    };
    let Value::Array(options) = options else {
        return Err("has a `oneOf`/`anyOf` that is not a list".to_owned());
    };
    options
        .iter()
        .map(|option| match option.get("const") {
            Some(Value::String(value)) => Ok(Choice {
                value: value.clone(),
                title: option
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            Some(other) => Err(format!("has a choice that is not a string: {other}")),
            None => Err(format!("has an option without a `const` value: {option}")),
        })
        .collect::<Result<Vec<Choice>, String>>()
        .map(Some)
}

/// A whole number: `42`, `+42`, `-3`, or an integral decimal (`4.0`).
fn parse_integer(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().or_else(|| {
        let n = text.parse::<f64>().ok()?;
        // Within ±2^53 every integral f64 is exact, and the cast is lossless.
        (n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0).then_some(n as i64)
    })
}

fn in_range(n: f64, minimum: Option<f64>, maximum: Option<f64>) -> Result<(), InputError> {
    if let Some(min) = minimum
        && n < min
    {
        return Err(InputError(format!("must be at least {min}")));
    }
    if let Some(max) = maximum
        && n > max
    {
        return Err(InputError(format!("must be at most {max}")));
    }
    Ok(())
}

/// The choice a person meant: its value, its number (from 1), or its title
/// or value in any case.
fn pick<'c>(choices: &'c [Choice], text: &str) -> Result<&'c Choice, InputError> {
    if let Some(choice) = choices.iter().find(|c| c.value == text) {
        return Ok(choice);
    }
    if let Ok(n) = text.parse::<usize>()
        && let Some(choice) = n.checked_sub(1).and_then(|i| choices.get(i))
    {
        return Ok(choice);
    }
    let lower = text.to_lowercase();
    if let Some(choice) = choices.iter().find(|c| {
        c.value.to_lowercase() == lower
            || c.title.as_ref().is_some_and(|t| t.to_lowercase() == lower)
    }) {
        return Ok(choice);
    }
    let listed: Vec<String> = choices.iter().map(Choice::label).collect();
    Err(InputError(format!(
        "`{text}` is not one of: {} (type a choice or its number)",
        listed.join(", ")
    )))
}

/// A value as a person would type it: strings bare, lists joined with `, `.
fn show_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(show_value).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn question(schema: Value) -> Question {
        Question {
            request_id: "q-1".into(),
            message: "m".into(),
            schema,
        }
    }

    fn fields(schema: Value) -> Vec<Field> {
        question(schema).fields().unwrap()
    }

    fn field(property: Value) -> Field {
        fields(json!({"type": "object", "properties": {"f": property}, "required": ["f"]}))
            .remove(0)
    }

    #[test]
    fn the_booking_form_is_read_field_by_field() {
        let fields = fields(json!({
            "type": "object",
            "title": "Booking",
            "properties": {
                "party_size": {"type": "integer", "minimum": 1, "maximum": 12, "description": "How many"},
                "time": {"type": "string", "enum": ["18:00", "19:00", "20:00"], "default": "19:00"},
                "note": {"type": "string", "maxLength": 20, "title": "Note"}
            },
            "required": ["party_size", "time"]
        }));
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["note", "party_size", "time"]);
        let [note, size, time] = &fields[..] else {
            panic!()
        };
        assert_eq!(
            size.kind,
            FieldKind::Integer {
                minimum: Some(1.0),
                maximum: Some(12.0)
            }
        );
        assert!(size.required && time.required && !note.required);
        assert_eq!(size.description.as_deref(), Some("How many"));
        assert_eq!(note.title.as_deref(), Some("Note"));
        assert_eq!(time.kind.name(), "choice");
        let values: Vec<&str> = time.choices().iter().map(|c| c.value.as_str()).collect();
        assert_eq!(values, ["18:00", "19:00", "20:00"]);
        assert_eq!(time.default_text().as_deref(), Some("19:00"));
        assert!(size.choices().is_empty() && size.default.is_none());
    }

    #[test]
    fn every_kind_of_choice_is_understood() {
        let titled = field(json!({"type": "string", "oneOf": [
            {"const": "v1", "title": "First"}, {"const": "v2", "title": "Second"}]}));
        assert_eq!(
            titled.kind,
            FieldKind::Choice(vec![
                Choice {
                    value: "v1".into(),
                    title: Some("First".into())
                },
                Choice {
                    value: "v2".into(),
                    title: Some("Second".into())
                },
            ])
        );
        assert_eq!(titled.choices()[0].label(), "First (v1)");
        let named =
            field(json!({"type": "string", "enum": ["a", "b"], "enumNames": ["Apple", "Banana"]}));
        assert_eq!(named.choices()[1].title.as_deref(), Some("Banana"));
        // No type, an enum: still a choice; an optional type is its type.
        assert_eq!(field(json!({"enum": ["x"]})).kind.name(), "choice");
        assert_eq!(
            field(json!({"type": ["integer", "null"]})).kind.name(),
            "integer"
        );
        let multi = field(json!({"type": "array", "minItems": 1, "maxItems": 2,
            "items": {"anyOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}, {"const": "b"}]}}));
        assert!(matches!(
            &multi.kind,
            FieldKind::MultiChoice { choices, min_items: Some(1), max_items: Some(2) } if choices.len() == 3
        ));
        assert_eq!(multi.choices()[2].label(), "b");
        let plain =
            field(json!({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}}));
        assert_eq!(plain.kind.name(), "choices");
        assert_eq!(
            field(json!({"type": "string", "minLength": 2, "format": "email"})).kind,
            FieldKind::Text {
                min_length: Some(2),
                max_length: None,
                format: Some("email".into()),
                pattern: None
            }
        );
        assert_eq!(
            field(json!({"type": "boolean", "default": true}))
                .default_text()
                .as_deref(),
            Some("true")
        );
    }

    #[test]
    fn unusable_schemas_are_errors_that_name_the_field() {
        let err = |schema: Value| question(schema).fields().unwrap_err().to_string();
        assert_eq!(
            err(json!("nope")),
            "the question's schema is not a JSON object"
        );
        assert!(err(json!({"type": "array"})).contains("not \"object\""));
        assert!(err(json!({"properties": []})).contains("not an object"));
        let one = |property: Value| err(json!({"properties": {"f": property}}));
        assert_eq!(
            one(json!({"type": "object"})),
            "field `f` has type `object`, which cannot be asked"
        );
        assert_eq!(one(json!({})), "field `f` has no type");
        assert_eq!(
            one(json!(5)),
            "field `f` has a schema that is not a JSON object"
        );
        assert!(one(json!({"type": "string", "enum": [1, 2]})).contains("not a string"));
        assert!(one(json!({"type": "string", "enum": "a"})).contains("not a list"));
        assert!(one(json!({"type": "string", "enum": []})).contains("no choices"));
        assert!(one(json!({"type": "array", "items": {"type": "string"}})).contains("free values"));
        assert!(one(json!({"type": "array"})).contains("without an item schema"));
        assert!(one(json!({"type": ["string", "integer"]})).contains("several types"));
        assert!(one(json!({"type": 3})).contains("not a name"));
        assert!(one(json!({"oneOf": [{"title": "x"}]})).contains("without a `const`"));
        // No properties at all: a yes-or-no question.
        assert!(fields(json!({"type": "object"})).is_empty());
        assert!(fields(json!({})).is_empty());
    }

    #[test]
    fn typed_text_becomes_the_fields_type() {
        let integer = field(json!({"type": "integer", "minimum": 1, "maximum": 12}));
        assert_eq!(integer.parse(" 4 ").unwrap(), json!(4));
        assert_eq!(integer.parse("4.0").unwrap(), json!(4));
        assert_eq!(integer.parse("+12").unwrap(), json!(12));
        assert_eq!(integer.parse("13").unwrap_err().0, "must be at most 12");
        assert_eq!(integer.parse("0").unwrap_err().0, "must be at least 1");
        assert_eq!(
            integer.parse("4.5").unwrap_err().0,
            "`4.5` is not a whole number"
        );
        assert!(integer.parse("four").is_err());
        assert!(integer.parse("1e400").is_err());
        let number = field(json!({"type": "number", "maximum": 2.5}));
        assert_eq!(number.parse("2").unwrap(), json!(2));
        assert_eq!(number.parse("2.0").unwrap(), json!(2.0));
        assert_eq!(number.parse("-0.5").unwrap(), json!(-0.5));
        assert_eq!(number.parse("2.6").unwrap_err().0, "must be at most 2.5");
        assert!(number.parse("NaN").is_err() && number.parse("inf").is_err());
        let boolean = field(json!({"type": "boolean"}));
        for yes in ["y", "Yes", "TRUE", "1"] {
            assert_eq!(boolean.parse(yes).unwrap(), json!(true), "{yes}");
        }
        for no in ["n", "No", "false", "0"] {
            assert_eq!(boolean.parse(no).unwrap(), json!(false), "{no}");
        }
        assert!(boolean.parse("perhaps").is_err());
        let text = field(json!({"type": "string", "minLength": 2, "maxLength": 3}));
        assert_eq!(
            text.parse(" ab").unwrap(),
            json!(" ab"),
            "free text is kept as typed"
        );
        assert_eq!(
            text.parse("é").unwrap_err().0,
            "must be at least 2 characters long"
        );
        assert_eq!(
            text.parse("éééé").unwrap_err().0,
            "must be at most 3 characters long"
        );
        assert_eq!(
            text.parse("ééé").unwrap(),
            json!("ééé"),
            "lengths count characters"
        );
    }

    #[test]
    fn choices_are_picked_by_value_number_or_title() {
        let time = field(json!({"type": "string", "oneOf": [
            {"const": "18:00", "title": "Early"}, {"const": "19:00"}, {"const": "2", "title": "Two"}]}));
        assert_eq!(time.parse("18:00").unwrap(), json!("18:00"));
        assert_eq!(
            time.parse("2").unwrap(),
            json!("2"),
            "a value beats a number"
        );
        assert_eq!(time.parse("1").unwrap(), json!("18:00"));
        assert_eq!(time.parse(" early ").unwrap(), json!("18:00"));
        assert_eq!(time.parse("TWO").unwrap(), json!("2"));
        let err = time.parse("21:00").unwrap_err().0;
        assert_eq!(
            err,
            "`21:00` is not one of: Early (18:00), 19:00, Two (2) (type a choice or its number)"
        );
        assert!(time.parse("0").is_err() && time.parse("4").is_err());
        let colours = field(json!({"type": "array", "maxItems": 2,
            "items": {"type": "string", "enum": ["red", "green", "blue"]}}));
        assert_eq!(colours.parse("red, 3").unwrap(), json!(["red", "blue"]));
        assert_eq!(colours.parse("red,red,,").unwrap(), json!(["red"]));
        assert_eq!(colours.parse("").unwrap(), json!([]));
        assert_eq!(colours.parse("1,2,3").unwrap_err().0, "choose at most 2");
        assert!(colours.parse("red, pink").unwrap_err().0.contains("`pink`"));
        let at_least = field(json!({"type": "array", "minItems": 1, "items": {"enum": ["a"]}}));
        assert_eq!(at_least.parse(" ").unwrap_err().0, "choose at least 1");
    }
}

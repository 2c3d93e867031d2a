//! What each schema violation says: what is wrong with the value and what to
//! send instead, in words a model (and a person) can act on
//! (`"meh" is not one of "day", "week" or "year"`, `"5" is a string; expected
//! a number`, `11 is too large; expected 1 to 10`).
//!
//! Messages are made from the validator's error kinds and the schema around
//! the failing keyword (the other bounds of a range, the properties of a
//! closed object, the branches of a `oneOf`). A `oneOf`/`anyOf` (how schemars
//! writes enums with documented variants, `Option`s of them, data-carrying
//! variants and untagged enums) is explained by the branch the value came
//! closest to, the values its tag may take, or the forms it may have. Values
//! are quoted at most [`QUOTE_CHARS`] characters each, and lists of allowed
//! values or properties at most [`LISTED`] entries.

use std::cell::RefCell;

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
use serde_json::Value;

use super::{QUOTE_CHARS, Violation, escape_pointer, excerpt, quote};

/// Most allowed values, forms or properties a message lists.
pub(super) const LISTED: usize = 24;

/// How many unexpected members of one object are told the properties there
/// are (or the one they most likely meant); the others are named only.
const EXPLAINED_MEMBERS: usize = 32;

/// Objects with more properties than this are not searched for the one an
/// unexpected member meant.
const SEARCHED_PROPERTIES: usize = 256;

/// How deep `oneOf`/`anyOf` branches are followed.
const MAX_DEPTH: usize = 8;

/// Arrays up to this long are searched for the item they repeat.
const DUPLICATE_SEARCH: usize = 256;

/// Explains the errors of one value checked against `root`.
pub(super) struct Explain<'s> {
    root: &'s Value,
    /// The value checked.
    value: &'s Value,
    /// Objects whose members `additionalProperties: false` refused, listed
    /// once (see [`Explain::refused_members`]).
    refused: RefCell<Vec<String>>,
}

impl<'s> Explain<'s> {
    pub(super) fn new(root: &'s Value, value: &'s Value) -> Explain<'s> {
        Explain {
            root,
            value,
            refused: RefCell::new(Vec::new()),
        }
    }

    /// The violations `error` stands for (one, but for a missing or
    /// unexpected property each, and a `oneOf`'s branch with several).
    pub(super) fn violations(&self, error: &ValidationError<'_>, out: &mut dyn FnMut(Violation)) {
        self.explain(error, out, 0);
    }

    fn explain(&self, error: &ValidationError<'_>, out: &mut dyn FnMut(Violation), depth: usize) {
        let base = error.instance_path().as_str();
        let keyword = error.schema_path().as_str();
        match error.kind() {
            Kind::Required { property } => {
                let name = property
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| property.to_string());
                out(Violation {
                    path: format!("{base}/{}", escape_pointer(&name)),
                    message: format!("{} is a required property", quote(&name)),
                });
            }
            Kind::AdditionalProperties { unexpected }
            | Kind::UnevaluatedProperties { unexpected } => {
                let known = self.known_properties(keyword);
                for (i, name) in unexpected.iter().enumerate() {
                    // Past the first few, the bare message: a value with
                    // thousands of unknown members costs little.
                    let known = known.as_deref().filter(|_| i < EXPLAINED_MEMBERS);
                    out(Violation {
                        path: format!("{base}/{}", escape_pointer(name)),
                        message: unexpected_property(name, known),
                    });
                }
            }
            Kind::AnyOf { context } | Kind::OneOfNotValid { context } if depth < MAX_DEPTH => {
                self.alternatives(error, context, out, depth);
            }
            Kind::FalseSchema if keyword.ends_with("/additionalProperties") => {
                self.refused_members(base, keyword, out);
            }
            Kind::Type { .. } if self.said_by_sibling(error) => {
                // The `enum` or `const` beside this `type` failed too and
                // lists what is allowed; one message says it.
            }
            _ => out(Violation {
                path: base.to_owned(),
                message: self.message(error),
            }),
        }
    }

    /// The message for one error at its own path.
    fn message(&self, error: &ValidationError<'_>) -> String {
        let value: &Value = error.instance();
        let shown = excerpt(value);
        let keyword = error.schema_path().as_str();
        match error.kind() {
            Kind::Type { kind } => type_message(value, &shown, &expected_types(kind)),
            Kind::Enum { options } => {
                let options = options.as_array().map(Vec::as_slice).unwrap_or_default();
                not_one_of(&shown, &options.iter().map(Form::Value).collect::<Vec<_>>())
            }
            Kind::Constant { expected_value } => {
                format!(
                    "{shown} is not {} (the only value allowed)",
                    excerpt(expected_value)
                )
            }
            Kind::Minimum { .. }
            | Kind::ExclusiveMinimum { .. }
            | Kind::Maximum { .. }
            | Kind::ExclusiveMaximum { .. } => self.bound_message(error.kind(), keyword, &shown),
            Kind::MinLength { .. } | Kind::MaxLength { .. } => {
                let length = value.as_str().map_or(0, |s| s.chars().count());
                let expected = self.count_range(keyword, "minLength", "maxLength", "character");
                let length = counted(length as u64, "character");
                format!("{shown} is {length} long; expected {expected}")
            }
            Kind::MinItems { .. } | Kind::MaxItems { .. } => {
                let length = value.as_array().map_or(0, Vec::len);
                let expected = self.count_range(keyword, "minItems", "maxItems", "item");
                format!(
                    "{shown} has {}; expected {expected}",
                    counted(length as u64, "item")
                )
            }
            Kind::MinProperties { .. } | Kind::MaxProperties { .. } => {
                let length = value.as_object().map_or(0, serde_json::Map::len);
                let expected =
                    self.count_range(keyword, "minProperties", "maxProperties", "property");
                let length = counted(length as u64, "property");
                format!("{shown} has {length}; expected {expected}")
            }
            Kind::AdditionalItems { limit } => {
                format!(
                    "{shown} has more than {}; expected at most {limit}",
                    counted(*limit as u64, "item")
                )
            }
            Kind::UniqueItems => match repeated(value) {
                Some(item) => format!("{shown} repeats {}; expected each item once", excerpt(item)),
                None => format!("{shown} has repeated items; expected each item once"),
            },
            Kind::Pattern { pattern } => {
                format!("{shown} does not match the pattern {}", quote(pattern))
            }
            Kind::Format { format } => format!("{shown} is not {}", format_phrase(format)),
            Kind::MultipleOf { multiple_of } => {
                format!("{shown} is not a multiple of {multiple_of}")
            }
            Kind::Contains => self.contains_message(keyword, &shown),
            Kind::OneOfMultipleValid { .. } => self.one_of_many_message(keyword, &shown),
            Kind::Not { .. } | Kind::FalseSchema => format!("{shown} is not allowed here"),
            Kind::UnevaluatedItems { unexpected } => {
                let listed: Vec<String> = unexpected.iter().take(LISTED).cloned().collect();
                format!(
                    "unexpected items {}; expected fewer items",
                    listed.join(", ")
                )
            }
            Kind::PropertyNames { error } => {
                format!("invalid property name: {}", self.message(error))
            }
            Kind::ContentEncoding { content_encoding } => {
                format!("{shown} is not {} text", quote(content_encoding))
            }
            Kind::ContentMediaType { content_media_type } => {
                format!("{shown} is not {}", quote(content_media_type))
            }
            // `oneOf`/`anyOf` past `MAX_DEPTH`, and what has nothing to say
            // beyond the validator's own words (bounded by `masked_with`).
            _ => error.masked_with(shown).to_string(),
        }
    }

    /// A number out of its bounds (`minimum`, `exclusiveMinimum`, `maximum`,
    /// `exclusiveMaximum`, which `kind` is).
    fn bound_message(&self, kind: &Kind, keyword: &str, shown: &str) -> String {
        let low = matches!(kind, Kind::Minimum { .. } | Kind::ExclusiveMinimum { .. });
        let range = self.range(keyword, kind);
        let size = if low { "too small" } else { "too large" };
        format!("{shown} is {size}; expected {range}")
    }

    /// An array with no item that fits the `contains` at `keyword`.
    fn contains_message(&self, keyword: &str, shown: &str) -> String {
        let wanted = self
            .value_at(keyword)
            .map(|schema| or_list(&self.describe(schema, 0)))
            .unwrap_or_else(|| "of the kind required".to_owned());
        format!("{shown} has no item that is {wanted}; expected at least one")
    }

    /// A value that fits more than one branch of the `oneOf` at `keyword`.
    fn one_of_many_message(&self, keyword: &str, shown: &str) -> String {
        let forms = self
            .value_at(keyword)
            .and_then(Value::as_array)
            .map(|branches| or_list(&self.describe_all(branches, 0)))
            .unwrap_or_default();
        format!("{shown} fits more than one of {forms}; expected a value that fits exactly one")
    }

    /// A `oneOf`/`anyOf` none of whose branches the value fits.
    fn alternatives(
        &self,
        error: &ValidationError<'_>,
        branches: &[Vec<ValidationError<'static>>],
        out: &mut dyn FnMut(Violation),
        depth: usize,
    ) {
        let base = error.instance_path().as_str();
        let value: &Value = error.instance();
        let schemas = self
            .value_at(error.schema_path().as_str())
            .and_then(Value::as_array);
        // Only values are allowed (an enum of documented variants, an
        // `Option` of one): list them.
        if let Some(values) = schemas.and_then(|s| self.values_of_all(s, 0)) {
            let forms: Vec<Form<'_>> = values.iter().map(|v| Form::Value(v)).collect();
            out(Violation {
                path: base.to_owned(),
                message: not_one_of(&excerpt(value), &forms),
            });
            return;
        }
        let mut candidates: Vec<(usize, usize, usize)> = Vec::new();
        let mut tags: Vec<(&str, &ValidationError<'static>)> = Vec::new();
        for (i, errors) in branches.iter().enumerate() {
            let at_base: Vec<&ValidationError<'static>> = errors
                .iter()
                .filter(|e| e.instance_path().as_str() == base)
                .collect();
            let refused = at_base.iter().any(|e| {
                matches!(
                    e.kind(),
                    Kind::Type { .. }
                        | Kind::Enum { .. }
                        | Kind::Constant { .. }
                        | Kind::FalseSchema
                )
            });
            let tag = errors.iter().find(|e| {
                matches!(e.kind(), Kind::Constant { .. } | Kind::Enum { .. })
                    && child_of(e.instance_path().as_str(), base)
            });
            if let Some(tag) = tag {
                tags.push((tag.instance_path().as_str(), tag));
            } else if !refused {
                candidates.push((at_base.len(), errors.len(), i));
            }
        }
        candidates.sort();
        let shallow = |&(at_base, total, _): &(usize, usize, usize)| at_base == total;
        let chosen = match candidates.as_slice() {
            [] => None,
            [only] => Some(only.2),
            [best, next, ..] => {
                let tied = (best.0, best.1) == (next.0, next.1);
                (!(tied && shallow(best))).then_some(best.2)
            }
        };
        if let Some(i) = chosen {
            for inner in &branches[i] {
                self.explain(inner, out, depth + 1);
            }
            return;
        }
        // The value's tag names no variant: list the tags there are.
        if candidates.is_empty()
            && let Some((path, _)) = tags.first()
            && tags.iter().all(|(p, _)| p == path)
        {
            let mut allowed: Vec<&Value> = Vec::new();
            for (_, tag) in &tags {
                match tag.kind() {
                    Kind::Constant { expected_value } => allowed.push(expected_value),
                    Kind::Enum { options } => {
                        allowed.extend(options.as_array().into_iter().flatten());
                    }
                    _ => {}
                }
            }
            let forms: Vec<Form<'_>> = allowed.into_iter().map(Form::Value).collect();
            let tag: &Value = tags[0].1.instance();
            out(Violation {
                path: (*path).to_owned(),
                message: not_one_of(&excerpt(tag), &forms),
            });
            return;
        }
        let forms = schemas
            .map(|s| self.describe_all(s, depth))
            .unwrap_or_default();
        out(Violation {
            path: base.to_owned(),
            message: forms_message(value, &forms),
        });
    }

    /// `additionalProperties: false` beside no `properties` is reported by
    /// the validator as one `false` schema at the object (the instance one of
    /// its members): each member is unexpected, said once per object.
    fn refused_members(&self, base: &str, keyword: &str, out: &mut dyn FnMut(Violation)) {
        if self.refused.borrow().iter().any(|b| b == base) {
            return;
        }
        self.refused.borrow_mut().push(base.to_owned());
        let known = self.known_properties(keyword);
        let Some(object) = self.value.pointer(base).and_then(Value::as_object) else {
            return;
        };
        let taken = |name: &str| known.as_ref().is_some_and(|k| k.iter().any(|k| k == name));
        for (i, name) in object.keys().filter(|name| !taken(name)).enumerate() {
            let known = known.as_deref().filter(|_| i < EXPLAINED_MEMBERS);
            out(Violation {
                path: format!("{base}/{}", escape_pointer(name)),
                message: unexpected_property(name, known),
            });
        }
    }

    /// Whether a `type` error needs no message of its own: the `enum` or
    /// `const` beside it failed too (the value is not among them) and its
    /// message lists what is allowed.
    fn said_by_sibling(&self, error: &ValidationError<'_>) -> bool {
        let Some(schema) = self.parent_of(error.schema_path().as_str()) else {
            return false;
        };
        let value: &Value = error.instance();
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            return !options.contains(value);
        }
        schema.get("const").is_some_and(|c| c != value)
    }

    /// The schema value at the keyword location `pointer`.
    fn value_at(&self, pointer: &str) -> Option<&'s Value> {
        self.root.pointer(pointer)
    }

    /// The schema that holds the keyword at `pointer`.
    fn parent_of(&self, pointer: &str) -> Option<&'s Value> {
        let cut = pointer.rfind('/')?;
        self.root.pointer(&pointer[..cut])
    }

    /// The properties a closed object at the keyword `pointer` takes; `None`
    /// when they cannot be told (no schema there, or pattern properties).
    fn known_properties(&self, pointer: &str) -> Option<Vec<String>> {
        let schema = self.parent_of(pointer)?;
        if schema.get("patternProperties").is_some() {
            return None;
        }
        Some(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default(),
        )
    }

    /// "1 to 10", "0 or more", "less than 5": the range a number must be in,
    /// from the bounds beside the failing one.
    fn range(&self, pointer: &str, kind: &Kind) -> String {
        let schema = self.parent_of(pointer);
        let bound = |key: &str| schema.and_then(|s| s.get(key)).filter(|v| v.is_number());
        let failed = match kind {
            Kind::Minimum { limit }
            | Kind::ExclusiveMinimum { limit }
            | Kind::Maximum { limit }
            | Kind::ExclusiveMaximum { limit } => Some(limit),
            _ => None,
        };
        let pick = |key: &str, this: bool| if this { failed } else { bound(key) };
        let min = pick("minimum", matches!(kind, Kind::Minimum { .. }));
        let xmin = pick(
            "exclusiveMinimum",
            matches!(kind, Kind::ExclusiveMinimum { .. }),
        );
        let max = pick("maximum", matches!(kind, Kind::Maximum { .. }));
        let xmax = pick(
            "exclusiveMaximum",
            matches!(kind, Kind::ExclusiveMaximum { .. }),
        );
        let low = match (min, xmin) {
            (_, Some(x)) => Some(format!("more than {x}")),
            (Some(m), None) => Some(format!("{m} or more")),
            (None, None) => None,
        };
        let high = match (max, xmax) {
            (_, Some(x)) => Some(format!("less than {x}")),
            (Some(m), None) => Some(format!("{m} or less")),
            (None, None) => None,
        };
        match (min, xmin, max, xmax, low, high) {
            (Some(a), None, Some(b), None, _, _) => format!("{a} to {b}"),
            (.., Some(low), Some(high)) => format!("{low} and {high}"),
            (.., Some(one), None) | (.., None, Some(one)) => one,
            _ => "another value".to_owned(),
        }
    }

    /// "2 to 5 characters", "at least 1 item", "exactly 2 items".
    fn count_range(&self, pointer: &str, min_key: &str, max_key: &str, unit: &str) -> String {
        let schema = self.parent_of(pointer);
        let bound = |key: &str| schema.and_then(|s| s.get(key)).and_then(Value::as_u64);
        match (bound(min_key), bound(max_key)) {
            (Some(a), Some(b)) if a == b => format!("exactly {}", counted(a, unit)),
            (Some(a), Some(b)) => format!("{a} to {}", counted(b, unit)),
            (Some(a), None) => format!("at least {}", counted(a, unit)),
            (None, Some(b)) => format!("at most {}", counted(b, unit)),
            (None, None) => format!("another number of {}", plural(unit)),
        }
    }

    /// The values `schemas` allow, when each allows only values (`const`,
    /// `enum`, `null`, and `oneOf`/`anyOf` of those).
    fn values_of_all(&self, schemas: &'s [Value], depth: usize) -> Option<Vec<&'s Value>> {
        let mut all = Vec::new();
        for schema in schemas {
            all.extend(self.values_of(schema, depth)?);
        }
        Some(all)
    }

    fn values_of(&self, schema: &'s Value, depth: usize) -> Option<Vec<&'s Value>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let schema = self.resolve(schema, depth)?;
        if let Some(value) = schema.get("const") {
            return Some(vec![value]);
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            return Some(values.iter().collect());
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                return self.values_of_all(branches, depth + 1);
            }
        }
        (schema.get("type") == Some(&Value::from("null"))).then(|| vec![&NULL])
    }

    /// What each of `schemas` allows, briefly.
    fn describe_all(&self, schemas: &'s [Value], depth: usize) -> Vec<Form<'s>> {
        schemas
            .iter()
            .flat_map(|s| self.describe(s, depth))
            .collect()
    }

    /// What `schema` allows, briefly: its values, or its kinds of value
    /// (`an integer`, `{"kind": "circle", …}`).
    fn describe(&self, schema: &'s Value, depth: usize) -> Vec<Form<'s>> {
        if depth > MAX_DEPTH {
            return vec![Form::Kind("a value".to_owned())];
        }
        let Some(schema) = self.resolve(schema, depth) else {
            return Vec::new();
        };
        if let Some(values) = self.values_of(schema, depth) {
            return values.into_iter().map(Form::Value).collect();
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                return self.describe_all(branches, depth + 1);
            }
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if schema.get("properties").is_some() => vec!["object"],
            _ if schema.get("items").is_some() => vec!["array"],
            _ => return vec![Form::Kind("a value".to_owned())],
        };
        types
            .into_iter()
            .map(|t| match t {
                "object" => Form::Kind(object_form(schema)),
                "null" => Form::Value(&NULL),
                "string" => Form::Kind(match schema.get("format").and_then(Value::as_str) {
                    Some(format) if known_format(format) => format_phrase(format),
                    _ => "a string".to_owned(),
                }),
                other => Form::Kind(type_phrase(other)),
            })
            .collect()
    }

    /// `schema`, or the schema its local `$ref` names.
    fn resolve(&self, schema: &'s Value, depth: usize) -> Option<&'s Value> {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) if depth <= MAX_DEPTH => {
                let pointer = reference.strip_prefix('#')?;
                self.root.pointer(pointer)
            }
            Some(_) => None,
            None => Some(schema),
        }
    }
}

static NULL: Value = Value::Null;

/// One thing a schema allows: a value, or a kind of value in words.
enum Form<'a> {
    Value(&'a Value),
    Kind(String),
}

impl Form<'_> {
    fn text(&self) -> String {
        match self {
            Form::Value(v) => excerpt(v),
            Form::Kind(k) => k.clone(),
        }
    }
}

/// `"meh" is not one of "day", "week" or "year"`.
fn not_one_of(shown: &str, allowed: &[Form<'_>]) -> String {
    match allowed {
        [] => format!("{shown} is not allowed here"),
        [one] => format!("{shown} is not {} (the only value allowed)", one.text()),
        _ => format!("{shown} is not one of {}", or_list(allowed)),
    }
}

/// A value that fits none of `forms`: its kind against theirs when they are
/// all kinds, else the list.
fn forms_message(value: &Value, forms: &[Form<'_>]) -> String {
    let shown = excerpt(value);
    if forms.is_empty() {
        return format!("{shown} fits none of the allowed forms");
    }
    if forms.iter().all(|f| matches!(f, Form::Kind(_))) {
        return format!("{shown} is {}; expected {}", kind_of(value), or_list(forms));
    }
    not_one_of(&shown, forms)
}

/// "a, b or c", at most [`LISTED`] of them ("…, or one of 12 more").
fn or_list(forms: &[Form<'_>]) -> String {
    let mut texts: Vec<String> = forms.iter().take(LISTED).map(Form::text).collect();
    texts.dedup();
    let more = forms.len().saturating_sub(LISTED);
    if more > 0 {
        return format!("{}, or one of {more} more", texts.join(", "));
    }
    match texts.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The types a `type` keyword allows, what is meant first and absence last
/// ("a string or null").
fn expected_types(kind: &TypeKind) -> Vec<String> {
    let mut expected: Vec<String> = match kind {
        TypeKind::Single(t) => vec![t.to_string()],
        TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect(),
    };
    expected.sort_by_key(|t| t == "null");
    expected
}

/// `"5" is a string; expected a number`, `1.5 is not a whole number; ...`.
fn type_message(value: &Value, shown: &str, expected: &[String]) -> String {
    let phrase = or_list(
        &expected
            .iter()
            .map(|t| Form::Kind(type_phrase(t)))
            .collect::<Vec<_>>(),
    );
    let fraction = value.as_f64().is_some_and(|n| n.fract() != 0.0);
    if fraction && expected.iter().any(|t| t == "integer") {
        return format!("{shown} is not a whole number; expected {phrase}");
    }
    if value.is_null() {
        return format!("null is not allowed here; expected {phrase}");
    }
    format!("{shown} is {}; expected {phrase}", kind_of(value))
}

/// What a value is, in words.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON Schema type name in words.
fn type_phrase(name: &str) -> String {
    match name {
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "true or false",
        "array" => "an array",
        "object" => "an object",
        "null" => "null",
        other => return format!("a value of type {}", quote(other)),
    }
    .to_owned()
}

/// `{"kind": "circle", "r": …}`: an object by its required properties (a
/// property with a `const` shows it), or "an object".
fn object_form(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if required.is_empty() {
        return "an object".to_owned();
    }
    let mut members: Vec<String> = required
        .iter()
        .take(3)
        .map(|name| {
            let value = schema
                .get("properties")
                .and_then(|p| p.get(*name))
                .and_then(|p| p.get("const"))
                .map_or_else(|| "…".to_owned(), excerpt);
            format!("{}: {value}", quote(name))
        })
        .collect();
    if required.len() > 3 {
        members.push("…".to_owned());
    }
    format!("{{{}}}", members.join(", "))
}

/// The first item `value` (an array) repeats, when it is short enough to look.
fn repeated(value: &Value) -> Option<&Value> {
    let items = value.as_array()?;
    if items.len() > DUPLICATE_SEARCH {
        return None;
    }
    items
        .iter()
        .enumerate()
        .find(|(i, item)| items[..*i].contains(item))
        .map(|(_, item)| item)
}

/// Whether `path` is a member of `base`, one level down.
fn child_of(path: &str, base: &str) -> bool {
    path.strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| !rest.contains('/'))
}

/// "1 item", "3 characters", "no properties".
fn counted(n: u64, unit: &str) -> String {
    match n {
        0 => format!("no {}", plural(unit)),
        1 => format!("1 {unit}"),
        n => format!("{n} {}", plural(unit)),
    }
}

fn plural(unit: &str) -> String {
    match unit.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{unit}s"),
    }
}

/// `unexpected property "nmae"; did you mean "name"?`, or the properties
/// there are.
fn unexpected_property(name: &str, known: Option<&[String]>) -> String {
    let head = format!("unexpected property {}", quote(name));
    let Some(known) = known else { return head };
    if known.is_empty() {
        return format!("{head}; this object takes no properties");
    }
    let searched = known.len() <= SEARCHED_PROPERTIES;
    if let Some(meant) = searched.then(|| closest(name, known)).flatten() {
        return format!("{head}; did you mean {}?", quote(meant));
    }
    let mut listed: Vec<String> = known.iter().take(LISTED).map(|k| quote(k)).collect();
    if known.len() > LISTED {
        listed.push(format!("and {} more", known.len() - LISTED));
    }
    format!("{head}; known properties: {}", listed.join(", "))
}

/// The one known name `name` is a typo of: the same but for case, `_` and
/// `-`, or an edit or two away (one for short names).
fn closest<'k>(name: &str, known: &'k [String]) -> Option<&'k str> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let squashed = squash(name);
    if let Some(k) = known.iter().find(|k| squash(k) == squashed) {
        return Some(k);
    }
    let limit = if name.chars().count() <= 4 { 1 } else { 2 };
    let mut found: Vec<&str> = known
        .iter()
        .filter(|k| edits(&squashed, &squash(k), limit) <= limit)
        .map(String::as_str)
        .collect();
    (found.len() == 1).then(|| found.remove(0))
}

/// Edits (insert, delete, replace, swap neighbours) from `a` to `b`, counted
/// up to `limit + 1`; names longer than [`QUOTE_CHARS`] are not compared.
fn edits(a: &str, b: &str, limit: usize) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len() > QUOTE_CHARS || b.len() > QUOTE_CHARS || a.len().abs_diff(b.len()) > limit {
        return limit + 1;
    }
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Formats the validator checks, with an example of each.
fn known_format(format: &str) -> bool {
    !format_phrase(format).starts_with("a string in the ")
}

/// What a string in `format` is, in words, with an example.
fn format_phrase(format: &str) -> String {
    match format {
        "email" | "idn-email" => "an email address (e.g. \"name@example.com\")",
        "date-time" => "a date and time (RFC 3339, e.g. \"2025-01-31T09:30:00Z\")",
        "date" => "a date (e.g. \"2025-01-31\")",
        "time" => "a time (e.g. \"09:30:00Z\")",
        "duration" => "an ISO 8601 duration (e.g. \"PT30M\")",
        "uri" | "iri" => "an absolute URI (e.g. \"https://example.com/a\")",
        "uri-reference" | "iri-reference" => "a URI reference (e.g. \"/a?b=1\")",
        "uri-template" => "a URI template (e.g. \"/users/{id}\")",
        "uuid" => "a UUID (e.g. \"3f2504e0-4f89-41d3-9a0c-0305e82c3301\")",
        "ipv4" => "an IPv4 address (e.g. \"192.0.2.1\")",
        "ipv6" => "an IPv6 address (e.g. \"2001:db8::1\")",
        "hostname" | "idn-hostname" => "a host name (e.g. \"example.com\")",
        "regex" => "a regular expression",
        "json-pointer" => "a JSON pointer (e.g. \"/a/0\")",
        "relative-json-pointer" => "a relative JSON pointer (e.g. \"1/a\")",
        other => return format!("a string in the {} format", quote(other)),
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::super::{CompiledSchema, QUOTE_CHARS, input_schema_for};
    use super::LISTED;

    /// `(path, message)` of each violation of `value`.
    fn said(schema: &Value, value: Value) -> Vec<(String, String)> {
        CompiledSchema::compile(schema)
            .unwrap()
            .violations(&value)
            .into_iter()
            .map(|v| (v.path, v.message))
            .collect()
    }

    /// The one violation of `value`.
    fn one(schema: &Value, value: Value) -> (String, String) {
        let mut all = said(schema, value);
        assert_eq!(all.len(), 1, "{all:#?}");
        all.remove(0)
    }

    fn sorted(mut all: Vec<(String, String)>) -> Vec<(String, String)> {
        all.sort();
        all
    }

    fn at(path: &str, message: &str) -> (String, String) {
        (path.to_owned(), message.to_owned())
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    #[allow(dead_code)]
    enum Period {
        Day,
        Week,
        Year,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    #[allow(dead_code)]
    enum Documented {
        /// One day.
        Day,
        /// Seven days.
        Week,
        /// A year.
        Year,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    enum Mixed {
        A,
        B,
        C { x: u32 },
        D(String),
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(tag = "kind")]
    #[allow(dead_code)]
    enum Shape {
        Circle { r: f64 },
        Square { side: f64 },
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Untagged {
        N(u32),
        S(String),
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
        size: u32,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        period: Period,
        documented: Documented,
        maybe_period: Option<Period>,
        maybe_documented: Option<Documented>,
        mixed: Mixed,
        shape: Shape,
        untagged: Untagged,
        inner: Option<Inner>,
        #[schemars(range(min = 1, max = 10))]
        n: u8,
        small: Vec<u8>,
        count: u32,
        #[schemars(length(min = 2, max = 5), regex(pattern = r"^[a-z]+$"))]
        word: String,
        #[schemars(email)]
        email: String,
        #[schemars(length(min = 1, max = 2))]
        short: Vec<String>,
        set: std::collections::BTreeSet<u8>,
        pair: (u8, String),
        ratio: f64,
        whole: i64,
        flag: bool,
        note: Option<String>,
    }

    fn args() -> Value {
        input_schema_for::<Args>()
    }

    fn valid() -> Value {
        json!({
            "period": "day", "documented": "day", "mixed": "A", "shape": {"kind": "Circle", "r": 1},
            "untagged": 1, "n": 1, "small": [], "count": 1, "word": "ab", "email": "a@example.com",
            "short": ["a"], "set": [], "pair": [1, "a"], "ratio": 0.5, "whole": 1, "flag": true
        })
    }

    /// `valid()` with `key` set to `value`.
    fn with(key: &str, value: Value) -> Value {
        let mut params = valid();
        params[key] = value;
        params
    }

    #[test]
    fn the_valid_params_are_valid() {
        assert_eq!(said(&args(), valid()), []);
    }

    #[test]
    fn an_enum_value_lists_the_allowed_ones() {
        let schema = args();
        let expected = "\"meh\" is not one of \"day\", \"week\" or \"year\"";
        // Without docs schemars writes `enum`; with them, a `oneOf` of `const`s.
        assert_eq!(
            one(&schema, with("period", json!("meh"))),
            at("/period", expected)
        );
        assert_eq!(
            one(&schema, with("documented", json!("meh"))),
            at("/documented", expected)
        );
        // The same for an `Option` of either, with `null` among them; a value
        // of the wrong type gets the one message.
        let or_null = "is not one of \"day\", \"week\", \"year\" or null";
        assert_eq!(
            one(&schema, with("maybe_period", json!("meh"))),
            at("/maybe_period", &format!("\"meh\" {or_null}"))
        );
        assert_eq!(
            one(&schema, with("maybe_period", json!(5))),
            at("/maybe_period", &format!("5 {or_null}"))
        );
        assert_eq!(
            one(&schema, with("maybe_documented", json!(3))),
            at("/maybe_documented", &format!("3 {or_null}"))
        );
        let single = json!({"enum": ["only"]});
        assert_eq!(
            one(&single, json!("x")).1,
            "\"x\" is not \"only\" (the only value allowed)"
        );
        let constant = json!({"const": "y"});
        assert_eq!(
            one(&constant, json!("x")).1,
            "\"x\" is not \"y\" (the only value allowed)"
        );
    }

    #[test]
    fn long_enums_and_long_values_are_quoted_briefly() {
        let values: Vec<String> = (0..100).map(|i| format!("{i:0>80}")).collect();
        let schema = json!({"enum": values});
        let (_, message) = one(&schema, json!("x".repeat(100_000)));
        assert!(
            message.starts_with(&format!(
                "\"{}… is not one of ",
                "x".repeat(QUOTE_CHARS - 1)
            )),
            "{message}"
        );
        assert!(
            message.ends_with(&format!(", or one of {} more", 100 - LISTED)),
            "{message}"
        );
        assert!(
            message.len() < (LISTED + 1) * (QUOTE_CHARS + 8),
            "{}",
            message.len()
        );
        let documented = json!({"oneOf": values.iter().map(|v| json!({"const": v, "description": "d"})).collect::<Vec<_>>()});
        let (_, same) = one(&documented, json!("x".repeat(100_000)));
        assert_eq!(same, message);
    }

    #[test]
    fn variants_with_data_are_explained_by_the_one_the_value_meant() {
        let schema = args();
        assert_eq!(
            one(&schema, with("mixed", json!({"C": {"x": "1"}}))),
            at("/mixed/C/x", "\"1\" is a string; expected an integer")
        );
        let forms = "is not one of \"A\", \"B\", {\"C\": …} or {\"D\": …}";
        assert_eq!(
            one(&schema, with("mixed", json!("E"))),
            at("/mixed", &format!("\"E\" {forms}"))
        );
        assert_eq!(
            one(&schema, with("mixed", json!({"E": 1}))),
            at("/mixed", &format!("{{\"E\":1}} {forms}"))
        );
        // Internally tagged: the tag names a variant, or the tags are listed.
        assert_eq!(
            one(&schema, with("shape", json!({"kind": "Circle", "r": "x"}))),
            at("/shape/r", "\"x\" is a string; expected a number")
        );
        assert_eq!(
            one(&schema, with("shape", json!({"kind": "Circle"}))),
            at("/shape/r", "\"r\" is a required property")
        );
        assert_eq!(
            one(&schema, with("shape", json!({"kind": "tri", "r": 1}))),
            at(
                "/shape/kind",
                "\"tri\" is not one of \"Circle\" or \"Square\""
            )
        );
        // Untagged: the kinds there are.
        assert_eq!(
            one(&schema, with("untagged", json!(true))),
            at(
                "/untagged",
                "true is a boolean; expected an integer or a string"
            )
        );
        // An `Option` of a struct: what is wrong inside it.
        assert_eq!(
            one(&schema, with("inner", json!({"name": "a", "size": -1}))),
            at("/inner/size", "-1 is too small; expected 0 or more")
        );
    }

    #[test]
    fn wrong_types_say_what_they_are_and_what_was_expected() {
        let schema = args();
        for (key, value, message) in [
            ("ratio", json!("1"), "\"1\" is a string; expected a number"),
            (
                "whole",
                json!(1.5),
                "1.5 is not a whole number; expected an integer",
            ),
            ("flag", json!(1), "1 is an integer; expected true or false"),
            (
                "word",
                Value::Null,
                "null is not allowed here; expected a string",
            ),
            (
                "note",
                json!(5),
                "5 is an integer; expected a string or null",
            ),
            ("small", json!({}), "{} is an object; expected an array"),
        ] {
            assert_eq!(
                one(&schema, with(key, value)),
                at(&format!("/{key}"), message)
            );
        }
    }

    #[test]
    fn missing_and_unexpected_properties_name_the_ones_there_are() {
        let schema = args();
        let mut params = valid();
        params.as_object_mut().unwrap().remove("period");
        assert_eq!(
            one(&schema, params),
            at("/period", "\"period\" is a required property")
        );
        // A near miss: the property meant.
        for (key, meant) in [("peroid", "period"), ("Maybe-Period", "maybe_period")] {
            let message = format!("unexpected property \"{key}\"; did you mean \"{meant}\"?");
            assert_eq!(
                one(&schema, with(key, json!("day"))),
                at(&format!("/{key}"), &message)
            );
        }
        let closed = json!({
            "type": "object",
            "properties": {"a": {}, "b": {}},
            "additionalProperties": false
        });
        assert_eq!(
            one(&closed, json!({"zzz": 1})),
            at(
                "/zzz",
                "unexpected property \"zzz\"; known properties: \"a\", \"b\""
            )
        );
        let empty = json!({"type": "object", "additionalProperties": false});
        assert_eq!(
            said(&empty, json!({"x": 1, "y": 2}))[1],
            at(
                "/y",
                "unexpected property \"y\"; this object takes no properties"
            )
        );
        assert_eq!(
            one(&empty, json!({"x": 1})),
            at(
                "/x",
                "unexpected property \"x\"; this object takes no properties"
            )
        );
        let patterned = json!({
            "type": "object",
            "patternProperties": {"^x": {}},
            "additionalProperties": false
        });
        assert_eq!(
            one(&patterned, json!({"y": 1})),
            at("/y", "unexpected property \"y\"")
        );
    }

    #[test]
    fn many_unexpected_members_cost_little() {
        let properties: serde_json::Map<String, Value> = (0..300)
            .map(|i| (format!("known_{i:03}"), json!({})))
            .collect();
        let schema =
            json!({"type": "object", "properties": properties, "additionalProperties": false});
        let params: serde_json::Map<String, Value> = (0..5000)
            .map(|i| (format!("known_{i:04}"), json!(1)))
            .collect();
        let found = CompiledSchema::compile(&schema)
            .unwrap()
            .check(&Value::Object(params), 50);
        assert_eq!(found.total, 5000);
        let first = &found.listed[0].message;
        assert!(
            first.contains("; known properties: \"known_000\""),
            "{first}"
        );
        assert!(
            first.ends_with(&format!("and {} more", 300 - LISTED)),
            "{first}"
        );
        // Past the first members of an object, each is only named.
        assert_eq!(
            found.listed[49].message,
            "unexpected property \"known_0049\""
        );
    }

    #[test]
    fn bounds_say_the_range() {
        let schema = args();
        for (key, value, path, message) in [
            ("n", json!(11), "/n", "11 is too large; expected 1 to 10"),
            ("n", json!(0), "/n", "0 is too small; expected 1 to 10"),
            (
                "small",
                json!([1, 300]),
                "/small/1",
                "300 is too large; expected 0 to 255",
            ),
            (
                "count",
                json!(-1),
                "/count",
                "-1 is too small; expected 0 or more",
            ),
        ] {
            assert_eq!(one(&schema, with(key, value)), at(path, message));
        }
        let open = json!({"minimum": 0});
        assert_eq!(
            one(&open, json!(-1)).1,
            "-1 is too small; expected 0 or more"
        );
        let exclusive = json!({"exclusiveMinimum": 0, "maximum": 5});
        assert_eq!(
            one(&exclusive, json!(0)).1,
            "0 is too small; expected more than 0 and 5 or less"
        );
        let below = json!({"exclusiveMaximum": 5});
        assert_eq!(
            one(&below, json!(5)).1,
            "5 is too large; expected less than 5"
        );
        let step = json!({"multipleOf": 5});
        assert_eq!(one(&step, json!(7)).1, "7 is not a multiple of 5");
    }

    #[test]
    fn lengths_patterns_and_formats_say_what_fits() {
        let schema = args();
        assert_eq!(
            sorted(said(&schema, with("word", json!("A")))),
            [
                at("/word", "\"A\" does not match the pattern \"^[a-z]+$\""),
                at(
                    "/word",
                    "\"A\" is 1 character long; expected 2 to 5 characters"
                ),
            ]
        );
        assert_eq!(
            one(&schema, with("word", json!("abcdef"))),
            at(
                "/word",
                "\"abcdef\" is 6 characters long; expected 2 to 5 characters"
            )
        );
        assert_eq!(
            one(&schema, with("email", json!("x"))),
            at(
                "/email",
                "\"x\" is not an email address (e.g. \"name@example.com\")"
            )
        );
        let when = json!({"type": "string", "format": "date-time"});
        assert_eq!(
            one(&when, json!("tomorrow")).1,
            "\"tomorrow\" is not a date and time (RFC 3339, e.g. \"2025-01-31T09:30:00Z\")"
        );
        let at_least = json!({"minLength": 3});
        assert_eq!(
            one(&at_least, json!("")).1,
            "\"\" is no characters long; expected at least 3 characters"
        );
    }

    #[test]
    fn item_counts_and_repeats_say_what_fits() {
        let schema = args();
        for (key, value, message) in [
            ("short", json!([]), "[] has no items; expected 1 to 2 items"),
            (
                "short",
                json!(["a", "b", "c"]),
                "[\"a\",\"b\",\"c\"] has 3 items; expected 1 to 2 items",
            ),
            (
                "pair",
                json!([1]),
                "[1] has 1 item; expected exactly 2 items",
            ),
            (
                "set",
                json!([1, 2, 1]),
                "[1,2,1] repeats 1; expected each item once",
            ),
        ] {
            assert_eq!(
                one(&schema, with(key, value)),
                at(&format!("/{key}"), message)
            );
        }
        let props = json!({"type": "object", "minProperties": 1});
        assert_eq!(
            one(&props, json!({})).1,
            "{} has no properties; expected at least 1 property"
        );
    }

    #[test]
    fn recursive_schemas_are_read_through_their_references() {
        let schema = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "additionalProperties": false
            }}
        });
        assert_eq!(
            one(&schema, json!({"root": {"children": [{"nmae": "x"}]}})),
            at(
                "/root/children/0/nmae",
                "unexpected property \"nmae\"; did you mean \"name\"?"
            )
        );
        let either = json!({"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}], "$defs": {"Node": {"type": "object", "required": ["name"]}}});
        assert_eq!(
            one(&either, json!(3)).1,
            "3 is not one of {\"name\": …} or null"
        );
    }
}

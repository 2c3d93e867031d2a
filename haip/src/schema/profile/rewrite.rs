//! The rewrite behind each profile: a walk over the `full` schema that builds
//! the advertised one from scratch, taking over only the keywords the target
//! accepts and saying the rest in `description`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::SchemaProblem;
use crate::schema::generate::walk_schemas;

/// What a rewrite produces a schema for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Portable = 0,
    OpenAiStrict = 1,
    AnthropicStrict = 2,
}

/// How many times a recursive type is expanded inside itself (portable and
/// anthropic-strict, which cannot refer back): four levels in all.
pub(crate) const UNROLL: usize = 3;

/// How many `$ref`s in a row are followed before the reference counts as
/// unresolved.
const MAX_HOPS: usize = 32;

/// OpenAI strict mode's limits.
const OPENAI_MAX_DEPTH: usize = 10;
const OPENAI_MAX_PROPERTIES: usize = 5000;
const OPENAI_MAX_ENUM_VALUES: usize = 1000;
/// Anthropic strict tool use's limits.
const ANTHROPIC_MAX_OPTIONAL: usize = 24;
const ANTHROPIC_MAX_UNIONS: usize = 16;

/// The formats OpenAI strict mode knows (and Ajv's format plugin): what
/// openai-strict and anthropic-strict keep, and output schemas too.
pub(crate) const COMMON_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// The string formats portable keeps: all Gemini's `parameters` take (its
/// other one, `enum`, only restates `enum`). Any other format is said in the
/// description ("Format: email."); params are still validated against it.
pub(crate) const PORTABLE_FORMATS: [&str; 1] = ["date-time"];

/// Formats schemars writes for Rust's numbers: the range they mean is in
/// `minimum` / `maximum` (or their note) already.
const NUMBER_FORMATS: [&str; 16] = [
    "int8", "int16", "int32", "int64", "int128", "int", "uint8", "uint16", "uint32", "uint64",
    "uint128", "uint", "float", "double", "isize", "usize",
];

/// Rewrites the input schema `full` for `target`.
pub(crate) fn input(full: &Value, target: Target) -> (Value, Vec<SchemaProblem>) {
    let mut rewriter = Rewriter {
        target,
        root: full,
        cyclic: cyclic_defs(full),
        stack: Vec::new(),
        defs: BTreeMap::new(),
        problems: Vec::new(),
        optional: 0,
        unions: 0,
        properties: 0,
        enum_values: 0,
    };
    let mut schema = match rewriter.node(full, "", 0) {
        Out::Schema(map) => map,
        Out::Cut => Map::new(),
    };
    // The root describes params: always an object.
    if schema.get("type") != Some(&json!("object")) {
        rewriter.problem(
            "",
            "the params schema does not describe an object",
            "params are an object: describe them with `type: object` and `properties`",
            false,
        );
        schema.insert("type".into(), json!("object"));
        schema.entry("properties").or_insert_with(|| json!({}));
    }
    if !rewriter.defs.is_empty() {
        let defs: Map<String, Value> = std::mem::take(&mut rewriter.defs)
            .into_iter()
            .map(|(k, v)| (k, Value::Object(v)))
            .collect();
        schema.insert("$defs".into(), Value::Object(defs));
    }
    rewriter.limits();
    (Value::Object(schema), rewriter.problems)
}

/// An output schema as advertised by every profile but `full`: only
/// loosened, so that it still accepts every result the tool sends (a client
/// validates structured results against it): no `$schema`, and no formats
/// beyond the common ones (Ajv-based clients refuse unknown formats).
pub(crate) fn output(full: &Value) -> Value {
    let mut schema = full.clone();
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
    }
    walk_schemas(&mut schema, &mut |node| {
        let unknown = node
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| !COMMON_FORMATS.contains(&f));
        if unknown {
            node.remove("format");
        }
    });
    schema
}

/// A rewritten node, or the point where a recursive type stops being
/// described.
enum Out {
    Schema(Map<String, Value>),
    Cut,
}

struct Rewriter<'a> {
    target: Target,
    /// The schema as written, for `$ref`s.
    root: &'a Value,
    /// Definitions that refer back to themselves.
    cyclic: BTreeSet<String>,
    /// The definitions being expanded, innermost last.
    stack: Vec<String>,
    /// openai-strict: the recursive definitions, rewritten.
    defs: BTreeMap<String, Map<String, Value>>,
    problems: Vec<SchemaProblem>,
    optional: usize,
    unions: usize,
    properties: usize,
    enum_values: usize,
}

impl Rewriter<'_> {
    fn problem(&mut self, pointer: &str, reason: &str, fix: &str, refused: bool) {
        self.problems.push(SchemaProblem {
            pointer: pointer.to_owned(),
            reason: reason.to_owned(),
            fix: fix.to_owned(),
            refused,
        });
    }

    /// A `$ref` at `ptr` that names nothing here (or starts a chain longer
    /// than [`MAX_HOPS`]).
    fn unresolved(&mut self, ptr: &str, reference: &Value) {
        self.problem(
            ptr,
            &format!("cannot resolve the reference {reference}"),
            "refer only to definitions of the same schema (`#/$defs/...`)",
            true,
        );
    }

    fn strict(&self) -> bool {
        self.target != Target::Portable
    }

    /// A `$ref`'s definition name and schema (`#`, `#/$defs/X`, `#/definitions/X`).
    fn resolve(&self, reference: &str) -> Option<(String, &Value)> {
        if reference == "#" {
            return Some(("#".to_owned(), self.root));
        }
        let path = reference.strip_prefix("#/")?;
        let mut node = self.root;
        for token in path.split('/') {
            let token = token.replace("~1", "/").replace("~0", "~");
            node = node.get(&token)?;
        }
        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
        Some((name, node))
    }

    /// Rewrites one schema at `ptr` (a pointer into the schema as written),
    /// `depth` objects deep.
    fn node(&mut self, schema: &Value, ptr: &str, depth: usize) -> Out {
        let mut s = match schema {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let mut pushed = 0;
        let mut hops = 0;
        while let Some(reference) = s.remove("$ref") {
            hops += 1;
            let resolved = reference
                .as_str()
                .and_then(|r| self.resolve(r))
                .map(|(name, target)| (name, target.clone()));
            let Some((name, target)) = resolved.filter(|_| hops <= MAX_HOPS) else {
                self.unresolved(ptr, &reference);
                break;
            };
            if self.target == Target::OpenAiStrict && self.cyclic.contains(&name) {
                self.define(&name, &target, ptr);
                self.stack.truncate(self.stack.len() - pushed);
                // `$ref` takes no siblings in strict mode.
                let mut out = Map::new();
                out.insert("$ref".into(), json!(format!("#/$defs/{name}")));
                return Out::Schema(out);
            }
            if self.stack.iter().filter(|n| **n == name).count() >= UNROLL {
                self.stack.truncate(self.stack.len() - pushed);
                return Out::Cut;
            }
            s = under(&target, s);
            self.stack.push(name);
            pushed += 1;
        }
        let out = self.body(s, ptr, depth);
        self.stack.truncate(self.stack.len() - pushed);
        out
    }

    /// openai-strict: rewrites a recursive definition once, into `$defs`.
    fn define(&mut self, name: &str, target: &Value, ptr: &str) {
        if self.defs.contains_key(name) {
            return;
        }
        // A placeholder first: the definition refers to itself.
        self.defs.insert(name.to_owned(), Map::new());
        self.stack.push(name.to_owned());
        let rewritten = match self.node(target, ptr, 1) {
            Out::Schema(map) => map,
            Out::Cut => Map::new(),
        };
        self.stack.pop();
        self.defs.insert(name.to_owned(), rewritten);
    }

    fn body(&mut self, mut s: Map<String, Value>, ptr: &str, depth: usize) -> Out {
        // `allOf`: one schema, all of it.
        if let Some(Value::Array(all)) = s.remove("allOf") {
            for (i, sub) in all.iter().enumerate() {
                let sub = self.flatten_ref(sub, &format!("{ptr}/allOf/{i}"));
                merge_into(&mut s, sub);
            }
        }
        // `oneOf` says more than a model needs: one of them is any of them.
        if let Some(one) = s.remove("oneOf") {
            if s.contains_key("anyOf") {
                // Both: keep the first, which is as good a description.
            } else {
                s.insert("anyOf".into(), one);
            }
        }
        if let Some(value) = s.remove("const") {
            s.insert("enum".into(), json!([value]));
        }
        // Nullability: an optional property is not required; `null` is
        // said only by openai-strict (for every optional property).
        let mut nullable = false;
        let mut types: Vec<String> = match s.remove("type") {
            Some(Value::String(t)) => vec![t],
            Some(Value::Array(list)) => list
                .into_iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        if types.iter().any(|t| t == "null") {
            nullable = true;
            types.retain(|t| t != "null");
        }
        if let Some(Value::Array(values)) = s.get_mut("enum")
            && values.contains(&Value::Null)
        {
            nullable = true;
            values.retain(|v| !v.is_null());
        }
        if let Some(Value::Array(branches)) = s.get_mut("anyOf") {
            let before = branches.len();
            branches.retain(|b| b.get("type") != Some(&json!("null")));
            nullable |= branches.len() < before;
        }
        if types.is_empty() && nullable && !s.contains_key("anyOf") && !s.contains_key("enum") {
            // Only `null`.
            return self.finish(s, json_map("type", json!("null")), Vec::new(), false);
        }
        let out = self.typed(s, types, ptr, depth);
        match out {
            Out::Schema(map) if nullable && self.target == Target::OpenAiStrict => {
                Out::Schema(nullable_map(map))
            }
            other => other,
        }
    }

    /// A `$ref` followed to what it names (for merging `allOf`).
    fn flatten_ref(&mut self, sub: &Value, ptr: &str) -> Map<String, Value> {
        let mut s = sub.as_object().cloned().unwrap_or_default();
        let mut hops = 0;
        while let Some(reference) = s.remove("$ref") {
            hops += 1;
            match reference.as_str().and_then(|r| self.resolve(r)) {
                Some((_, target)) if hops <= MAX_HOPS => s = under(target, s),
                _ => {
                    self.unresolved(ptr, &reference);
                    break;
                }
            }
        }
        s
    }

    fn typed(
        &mut self,
        mut s: Map<String, Value>,
        types: Vec<String>,
        ptr: &str,
        depth: usize,
    ) -> Out {
        if let Some(Value::Array(branches)) = s.remove("anyOf") {
            return self.any_of(s, &branches, ptr, depth);
        }
        match types.len() {
            0 => {}
            1 => return self.one_type(s, &types[0], ptr, depth),
            _ => {
                // Several types: one branch each.
                self.unions += 1;
                let mut branches = Vec::new();
                for t in &types {
                    let mut branch = s.clone();
                    branch.remove("description");
                    branch.remove("title");
                    branch.remove("default");
                    if let Out::Schema(b) = self.one_type(branch, t, ptr, depth) {
                        branches.push(Value::Object(b));
                    }
                }
                let out = json_map("anyOf", Value::Array(branches));
                return self.finish(s, out, Vec::new(), false);
            }
        }
        match infer_type(&s) {
            Some(t) => self.one_type(s, t, ptr, depth),
            None => {
                let refused = self.target == Target::OpenAiStrict;
                self.problem(
                    ptr,
                    "this value may be any JSON: it has no type, which model providers need",
                    "give it a concrete type (a struct, a string, a number, a list of ...)",
                    refused,
                );
                self.finish(s, Map::new(), Vec::new(), false)
            }
        }
    }

    fn any_of(
        &mut self,
        s: Map<String, Value>,
        branches: &[Value],
        ptr: &str,
        depth: usize,
    ) -> Out {
        let mut out_branches = Vec::new();
        for (i, branch) in branches.iter().enumerate() {
            if let Out::Schema(b) = self.node(branch, &format!("{ptr}/anyOf/{i}"), depth) {
                out_branches.push(b);
            }
        }
        match out_branches.len() {
            0 => return Out::Cut,
            1 => {
                let only = out_branches.pop().unwrap_or_default();
                return self.finish(s, only, Vec::new(), true);
            }
            _ => {}
        }
        // Unit variants with their own descriptions: one string enum.
        let all_strings = out_branches.iter().all(|b| {
            b.get("type") == Some(&json!("string"))
                && b.get("enum")
                    .and_then(Value::as_array)
                    .is_some_and(|e| !e.is_empty())
                && b.keys()
                    .all(|k| matches!(k.as_str(), "type" | "enum" | "description" | "title"))
        });
        if all_strings {
            let mut values = Vec::new();
            let mut notes = Vec::new();
            for b in &out_branches {
                let these = b["enum"].as_array().cloned().unwrap_or_default();
                if let Some(d) = b.get("description").and_then(Value::as_str) {
                    let names: Vec<String> = these.iter().map(|v| v.to_string()).collect();
                    notes.push(format!("{}: {}", names.join(", "), d.trim_end_matches('.')));
                }
                values.extend(these);
            }
            let mut out = json_map("type", json!("string"));
            out.insert("enum".into(), Value::Array(values));
            // One sentence for the variants: `"a": what a is; "b": ...`.
            let notes = if notes.is_empty() {
                Vec::new()
            } else {
                let mut joined = notes.join("; ");
                if !joined.ends_with('.') {
                    joined.push('.');
                }
                vec![joined]
            };
            return self.finish(s, out, notes, false);
        }
        self.unions += 1;
        let out = json_map(
            "anyOf",
            Value::Array(out_branches.into_iter().map(Value::Object).collect()),
        );
        self.finish(s, out, Vec::new(), false)
    }

    fn one_type(&mut self, s: Map<String, Value>, ty: &str, ptr: &str, depth: usize) -> Out {
        match ty {
            "object" => self.object(s, ptr, depth),
            "array" => self.array(s, ptr, depth),
            "string" => self.scalar(s, "string", ptr),
            "integer" | "number" => self.scalar(s, ty, ptr),
            "boolean" => self.scalar(s, "boolean", ptr),
            "null" => self.finish(s, json_map("type", json!("null")), Vec::new(), false),
            other => {
                self.problem(
                    ptr,
                    &format!("`{other}` is not a JSON Schema type"),
                    "use object, array, string, integer, number, boolean or null",
                    true,
                );
                self.finish(s, Map::new(), Vec::new(), false)
            }
        }
    }

    fn object(&mut self, mut s: Map<String, Value>, ptr: &str, depth: usize) -> Out {
        let props = match s.remove("properties") {
            Some(Value::Object(props)) => props,
            _ => Map::new(),
        };
        let required = required_of(&mut s, &props);
        let extra = s.remove("additionalProperties");
        if props.is_empty()
            && let Some(Value::Object(values)) = &extra
        {
            return self.map_as_pairs(s, &Value::Object(values.clone()), ptr, depth);
        }
        if self.target == Target::OpenAiStrict && depth > OPENAI_MAX_DEPTH {
            self.problem(
                ptr,
                &format!(
                    "objects nested more than {OPENAI_MAX_DEPTH} deep (OpenAI strict mode's limit)"
                ),
                "flatten the nesting of the params",
                true,
            );
        }
        let mut out = json_map("type", json!("object"));
        let mut notes = Vec::new();
        let (out_props, optional_names) = self.properties_of(&props, &required, ptr, depth);
        let free_form = props.is_empty() && !matches!(extra, Some(Value::Bool(false)));
        if free_form && !ptr.is_empty() {
            self.free_form_problem(ptr);
        }
        if matches!(extra, Some(Value::Object(_))) && !props.is_empty() {
            notes.push("Other members are accepted too.".to_owned());
            if self.strict() {
                self.problem(
                    &format!("{ptr}/additionalProperties"),
                    "members beyond the declared ones cannot be sent in strict mode",
                    "declare every member, or move the extra ones into a map property",
                    false,
                );
            }
        }
        // `required` in its own order (a signature's), the optional ones
        // after it where strict mode wants every property.
        let mut out_required: Vec<Value> = required
            .iter()
            .filter(|r| out_props.contains_key(*r))
            .map(|r| json!(r))
            .collect();
        out_required.extend(optional_names);
        out.insert("properties".into(), Value::Object(out_props));
        if !out_required.is_empty() || self.target == Target::OpenAiStrict {
            out.insert("required".into(), Value::Array(out_required));
        }
        if self.strict() {
            out.insert("additionalProperties".into(), json!(false));
        }
        for (key, what) in [("minProperties", "At least"), ("maxProperties", "At most")] {
            if let Some(n) = s.remove(key) {
                if self.target == Target::Portable {
                    out.insert(key.into(), n);
                } else {
                    notes.push(format!("{what} {n} members."));
                }
            }
        }
        self.finish(s, out, notes, false)
    }

    /// An object's properties, rewritten in their order, and the names of
    /// the optional ones that strict mode lists as required (nullable).
    fn properties_of(
        &mut self,
        props: &Map<String, Value>,
        required: &[String],
        ptr: &str,
        depth: usize,
    ) -> (Map<String, Value>, Vec<Value>) {
        let mut out_props = Map::new();
        let mut optional_names = Vec::new();
        for (name, sub) in props {
            let at = format!("{ptr}/properties/{}", escape(name));
            let is_required = required.contains(name);
            match self.node(sub, &at, depth + 1) {
                Out::Cut => {
                    if is_required {
                        self.problem(
                            &at,
                            "a recursive type with no end (every level requires the next)",
                            "make the recursion optional (`Option<Box<T>>`) or a list",
                            true,
                        );
                    }
                }
                Out::Schema(mut child) => {
                    self.properties += 1;
                    if !is_required {
                        self.optional += 1;
                        if self.target == Target::OpenAiStrict {
                            child = nullable_map(child);
                            optional_names.push(json!(name));
                        }
                    }
                    out_props.insert(name.clone(), Value::Object(child));
                }
            }
        }
        (out_props, optional_names)
    }

    /// An object below the top with no declared properties: what each
    /// target makes of it.
    fn free_form_problem(&mut self, ptr: &str) {
        let (reason, refused) = match self.target {
            Target::Portable => (
                "an object with no declared properties: Gemini refuses it, other providers get no shape to fill",
                false,
            ),
            _ => (
                "an object with no declared properties: strict mode closes it, so a model can only send `{}`",
                false,
            ),
        };
        self.problem(
            ptr,
            reason,
            "describe its members with a struct, or use a map of a known value type",
            refused,
        );
    }

    /// A map (`additionalProperties` schema, no properties) as a list of
    /// `{key, value}` pairs: no profile but `full` can say "any key".
    fn map_as_pairs(
        &mut self,
        mut s: Map<String, Value>,
        values: &Value,
        ptr: &str,
        depth: usize,
    ) -> Out {
        let value = match self.node(values, &format!("{ptr}/additionalProperties"), depth + 2) {
            Out::Schema(v) => v,
            Out::Cut => json_map("type", json!("object")),
        };
        let mut key = json_map("type", json!("string"));
        if let Some(pattern) = s
            .remove("propertyNames")
            .and_then(|p| p.get("pattern").cloned())
        {
            key.insert("pattern".into(), pattern);
        }
        let mut item = json_map("type", json!("object"));
        let mut item_props = Map::new();
        item_props.insert("key".into(), Value::Object(key));
        item_props.insert("value".into(), Value::Object(value));
        item.insert("properties".into(), Value::Object(item_props));
        item.insert("required".into(), json!(["key", "value"]));
        if self.strict() {
            item.insert("additionalProperties".into(), json!(false));
        }
        let mut out = json_map("type", json!("array"));
        out.insert("items".into(), Value::Object(item));
        let mut notes = vec!["A list of key-value pairs, each key at most once.".to_owned()];
        self.list_bounds(
            &mut s,
            &mut out,
            &mut notes,
            ("minProperties", "maxProperties"),
        );
        self.finish(s, out, notes, false)
    }

    fn array(&mut self, mut s: Map<String, Value>, ptr: &str, depth: usize) -> Out {
        let mut out = json_map("type", json!("array"));
        let mut notes = Vec::new();
        let items = match (s.remove("prefixItems"), s.remove("items")) {
            (Some(Value::Array(prefix)), _) => {
                let mut each = Vec::new();
                for (i, item) in prefix.iter().enumerate() {
                    if let Out::Schema(b) =
                        self.node(item, &format!("{ptr}/prefixItems/{i}"), depth)
                    {
                        each.push(b);
                    }
                }
                let n = prefix.len();
                notes.push(format!("Exactly {n} items, each as described in order."));
                s.insert("minItems".into(), json!(n));
                s.insert("maxItems".into(), json!(n));
                if each.windows(2).all(|w| w[0] == w[1]) {
                    each.into_iter().next().unwrap_or_default()
                } else {
                    self.unions += 1;
                    json_map(
                        "anyOf",
                        Value::Array(each.into_iter().map(Value::Object).collect()),
                    )
                }
            }
            (_, Some(items @ Value::Object(_))) => {
                match self.node(&items, &format!("{ptr}/items"), depth) {
                    Out::Schema(b) => b,
                    Out::Cut => {
                        notes.push("Nested too deep to describe here: leave it empty.".to_owned());
                        s.insert("maxItems".into(), json!(0));
                        s.remove("minItems");
                        let mut shallow = json_map("type", json!("object"));
                        shallow.insert("properties".into(), json!({}));
                        if self.strict() {
                            shallow.insert("additionalProperties".into(), json!(false));
                            if self.target == Target::OpenAiStrict {
                                shallow.insert("required".into(), json!([]));
                            }
                        }
                        shallow
                    }
                }
            }
            _ => match self.node(&json!({}), &format!("{ptr}/items"), depth) {
                Out::Schema(b) => b,
                Out::Cut => Map::new(),
            },
        };
        out.insert("items".into(), Value::Object(items));
        if s.remove("uniqueItems") == Some(json!(true)) {
            notes.push("The items are distinct.".to_owned());
        }
        self.list_bounds(&mut s, &mut out, &mut notes, ("minItems", "maxItems"));
        self.finish(s, out, notes, false)
    }

    /// `minItems` / `maxItems` of a list (read from `keys` of `s`), as the
    /// target takes them.
    fn list_bounds(
        &mut self,
        s: &mut Map<String, Value>,
        out: &mut Map<String, Value>,
        notes: &mut Vec<String>,
        keys: (&str, &str),
    ) {
        let min = s.remove(keys.0).and_then(|v| v.as_u64());
        let max = s.remove(keys.1).and_then(|v| v.as_u64());
        match self.target {
            Target::Portable | Target::OpenAiStrict => {
                if let Some(min) = min {
                    out.insert("minItems".into(), json!(min));
                }
                if let Some(max) = max {
                    out.insert("maxItems".into(), json!(max));
                }
            }
            Target::AnthropicStrict => {
                // Anthropic takes `minItems` of 0 or 1 only, and no `maxItems`.
                if let Some(m @ (0 | 1)) = min {
                    out.insert("minItems".into(), json!(m));
                }
                if let Some(note) = bounds_note(
                    min.filter(|m| *m > 1).map(|m| json!(m)),
                    max.map(|m| json!(m)),
                    "items",
                ) {
                    notes.push(note);
                }
            }
        }
    }

    fn scalar(&mut self, mut s: Map<String, Value>, ty: &str, ptr: &str) -> Out {
        let mut out = json_map("type", json!(ty));
        let mut notes = Vec::new();
        if let Some(Value::Array(values)) = s.remove("enum") {
            self.enumeration(ty, values, &mut out, &mut notes, ptr);
        }
        if let Some(format) = s.remove("format") {
            let name = format.as_str().unwrap_or_default();
            let keep = match self.target {
                Target::Portable => PORTABLE_FORMATS.contains(&name),
                Target::OpenAiStrict => COMMON_FORMATS.contains(&name),
                Target::AnthropicStrict => COMMON_FORMATS.contains(&name) || name == "uri",
            };
            if keep && ty == "string" {
                out.insert("format".into(), format);
            } else if !NUMBER_FORMATS.contains(&name) {
                notes.push(format!("Format: {name}."));
            }
        }
        if ty == "string" {
            if let Some(pattern) = s.remove("pattern") {
                out.insert("pattern".into(), pattern);
            }
            let min = s.remove("minLength");
            let max = s.remove("maxLength");
            if self.target == Target::Portable {
                if let Some(min) = min {
                    out.insert("minLength".into(), min);
                }
                if let Some(max) = max {
                    out.insert("maxLength".into(), max);
                }
            } else if let Some(note) = bounds_note(min, max, "characters") {
                notes.push(note);
            }
        }
        if ty == "integer" || ty == "number" {
            let min = s.remove("minimum");
            let max = s.remove("maximum");
            let xmin = s.remove("exclusiveMinimum");
            let xmax = s.remove("exclusiveMaximum");
            let multiple = s.remove("multipleOf");
            match self.target {
                Target::Portable => {
                    keep(&mut out, "minimum", min);
                    keep(&mut out, "maximum", max);
                }
                Target::OpenAiStrict => {
                    keep(&mut out, "minimum", min);
                    keep(&mut out, "maximum", max);
                    keep(&mut out, "exclusiveMinimum", xmin.clone());
                    keep(&mut out, "exclusiveMaximum", xmax.clone());
                    keep(&mut out, "multipleOf", multiple.clone());
                }
                Target::AnthropicStrict => {
                    if let Some(note) = bounds_note(min, max, "") {
                        notes.push(note);
                    }
                }
            }
            if self.target != Target::OpenAiStrict {
                if let Some(x) = xmin {
                    notes.push(format!("Greater than {x}."));
                }
                if let Some(x) = xmax {
                    notes.push(format!("Less than {x}."));
                }
                if let Some(m) = multiple {
                    notes.push(format!("A multiple of {m}."));
                }
            }
        }
        self.finish(s, out, notes, false)
    }

    fn enumeration(
        &mut self,
        ty: &str,
        values: Vec<Value>,
        out: &mut Map<String, Value>,
        notes: &mut Vec<String>,
        ptr: &str,
    ) {
        self.enum_values += values.len();
        // Gemini takes string enums only: other values are said instead.
        if self.target == Target::Portable
            && (ty != "string" || !values.iter().all(Value::is_string))
        {
            let listed: Vec<String> = values.iter().map(Value::to_string).collect();
            notes.push(format!("One of {}.", listed.join(", ")));
            return;
        }
        let fitting: Vec<Value> = values
            .into_iter()
            .filter(|v| match ty {
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                _ => true,
            })
            .collect();
        if fitting.is_empty() {
            self.problem(
                &format!("{ptr}/enum"),
                &format!("no value of the enum is a {ty}"),
                "make the enum's values match its type",
                false,
            );
            return;
        }
        out.insert("enum".into(), Value::Array(fitting));
    }

    /// Completes a node: the annotations of `s` (description, title,
    /// default) and the notes of what the target could not say. With
    /// `merge`, `out` is a branch standing in for `s`: its own annotations
    /// are kept unless `s` has its own.
    fn finish(
        &mut self,
        mut s: Map<String, Value>,
        mut out: Map<String, Value>,
        mut notes: Vec<String>,
        merge: bool,
    ) -> Out {
        if let Some(default) = s.remove("default") {
            if self.target == Target::OpenAiStrict {
                notes.push(format!("Default: {default}."));
            } else {
                out.insert("default".into(), default);
            }
        }
        if let Some(title) = s.remove("title").filter(Value::is_string) {
            out.insert("title".into(), title);
        }
        let own = s
            .remove("description")
            .and_then(|d| d.as_str().map(str::to_owned));
        let branch = out
            .remove("description")
            .and_then(|d| d.as_str().map(str::to_owned));
        let mut text: Vec<String> = Vec::new();
        match (own, branch) {
            // A branch standing in for its use site: both say something.
            (Some(own), Some(branch)) if merge && own != branch => {
                text.push(own);
                text.push(branch);
            }
            (Some(own), _) => text.push(own),
            (None, Some(branch)) => text.push(branch),
            (None, None) => {}
        }
        text.append(&mut notes);
        if !text.is_empty() {
            out.insert("description".into(), json!(text.join(" ")));
        }
        Out::Schema(out)
    }

    /// The limits a whole schema must keep in the strict profiles.
    fn limits(&mut self) {
        let (provider, limits) = match self.target {
            Target::Portable => return,
            Target::OpenAiStrict => (
                "OpenAI strict mode",
                [
                    (
                        self.properties,
                        OPENAI_MAX_PROPERTIES,
                        "properties in all",
                        "split the tool",
                    ),
                    (
                        self.enum_values,
                        OPENAI_MAX_ENUM_VALUES,
                        "enum values in all",
                        "use a string for long lists of choices",
                    ),
                ],
            ),
            Target::AnthropicStrict => (
                "Anthropic strict tool use",
                [
                    (
                        self.optional,
                        ANTHROPIC_MAX_OPTIONAL,
                        "optional properties",
                        "make some of them required, or split the tool",
                    ),
                    (
                        self.unions,
                        ANTHROPIC_MAX_UNIONS,
                        "properties with a choice of types",
                        "use fewer enums with data, or split the tool",
                    ),
                ],
            ),
        };
        for (count, max, what, fix) in limits {
            if count > max {
                let reason = format!("{count} {what} ({provider} takes {max})");
                self.problem("", &reason, fix, true);
            }
        }
    }
}

/// A definition `$ref`'d to: its keywords, then those of the use site, `s`,
/// on top.
fn under(definition: &Value, s: Map<String, Value>) -> Map<String, Value> {
    let mut merged = definition.as_object().cloned().unwrap_or_default();
    merged.extend(s);
    merged
}

/// The note for bounds a target cannot express (`unit` after the numbers).
fn bounds_note(min: Option<Value>, max: Option<Value>, unit: &str) -> Option<String> {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    match (min, max) {
        (Some(a), Some(b)) if a == b => Some(format!("Exactly {a}{unit}.")),
        (Some(a), Some(b)) => Some(format!("Between {a} and {b}{unit}.")),
        (Some(a), None) => Some(format!("At least {a}{unit}.")),
        (None, Some(b)) => Some(format!("At most {b}{unit}.")),
        (None, None) => None,
    }
}

fn keep(out: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        out.insert(key.into(), v);
    }
}

fn json_map(key: &str, value: Value) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert(key.into(), value);
    map
}

/// An object's `required`, taken out of `s`: the names it lists that are
/// properties, in its order.
fn required_of(s: &mut Map<String, Value>, props: &Map<String, Value>) -> Vec<String> {
    match s.remove("required") {
        Some(Value::Array(list)) => list
            .into_iter()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .filter(|r| props.contains_key(r))
            .collect(),
        _ => Vec::new(),
    }
}

/// openai-strict: a schema that also takes `null`.
fn nullable_map(mut map: Map<String, Value>) -> Map<String, Value> {
    if map.contains_key("$ref") {
        return json_map("anyOf", json!([Value::Object(map), {"type": "null"}]));
    }
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        if !branches
            .iter()
            .any(|b| b.get("type") == Some(&json!("null")))
        {
            branches.push(json!({"type": "null"}));
        }
        return map;
    }
    match map.get("type").cloned() {
        Some(Value::String(t)) if t != "null" => {
            map.insert("type".into(), json!([t, "null"]));
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.push(Value::Null);
            }
            map
        }
        Some(_) => map,
        None => json_map("anyOf", json!([Value::Object(map), {"type": "null"}])),
    }
}

/// The type a schema without `type` describes, from its keywords.
fn infer_type(s: &Map<String, Value>) -> Option<&'static str> {
    let has = |k: &str| s.contains_key(k);
    if has("properties") || has("additionalProperties") || has("required") {
        return Some("object");
    }
    if has("items") || has("prefixItems") {
        return Some("array");
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        if !values.is_empty() && values.iter().all(Value::is_string) {
            return Some("string");
        }
        if !values.is_empty() && values.iter().all(|v| v.is_i64() || v.is_u64()) {
            return Some("integer");
        }
        if !values.is_empty() && values.iter().all(Value::is_number) {
            return Some("number");
        }
        if !values.is_empty() && values.iter().all(Value::is_boolean) {
            return Some("boolean");
        }
    }
    if has("pattern") || has("minLength") || has("maxLength") {
        return Some("string");
    }
    if has("minimum") || has("maximum") || has("multipleOf") {
        return Some("number");
    }
    None
}

/// Merges an `allOf` member into `s`: properties and `required` are joined,
/// other keywords taken where `s` has none.
fn merge_into(s: &mut Map<String, Value>, sub: Map<String, Value>) {
    for (key, value) in sub {
        match (key.as_str(), s.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    mine.entry(k).or_insert(v);
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for r in theirs {
                    if !mine.contains(&r) {
                        mine.push(r);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                s.insert(key, value);
            }
        }
    }
}

/// The definitions of `$defs` / `definitions` that refer back to themselves,
/// directly or through others.
fn cyclic_defs(root: &Value) -> BTreeSet<String> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for section in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = root.get(section) {
            for (name, def) in defs {
                let mut refs = BTreeSet::new();
                collect_refs(def, &mut refs);
                edges.entry(name.clone()).or_default().extend(refs);
            }
        }
    }
    let mut cyclic = BTreeSet::new();
    for start in edges.keys() {
        // Depth-first from `start`: does it come back?
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = edges[start].iter().collect();
        while let Some(next) = todo.pop() {
            if next == start {
                cyclic.insert(start.clone());
                break;
            }
            if seen.insert(next.clone())
                && let Some(more) = edges.get(next)
            {
                todo.extend(more.iter());
            }
        }
    }
    cyclic
}

/// The definition names `value` refers to (`#/$defs/X`, `#/definitions/X`).
fn collect_refs(value: &Value, refs: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(Value::as_str)
                && let Some(name) = r
                    .strip_prefix("#/$defs/")
                    .or_else(|| r.strip_prefix("#/definitions/"))
            {
                refs.insert(name.replace("~1", "/").replace("~0", "~"));
            }
            map.values().for_each(|v| collect_refs(v, refs));
        }
        Value::Array(list) => list.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

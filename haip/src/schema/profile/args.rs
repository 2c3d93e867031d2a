//! Calls shaped by any profile, taken as the schema as written means them
//! (docs/protocol.md §6.14): before params are validated, a `null` given for an
//! optional property is removed (openai-strict asks for one for every
//! optional property the model leaves out), and a list of `{key, value}`
//! pairs where the schema has a map becomes that map (how every profile but
//! `full` describes maps). Nothing else changes: what the profiles describe
//! otherwise (a one-value `enum` for a `const`, a recursive value four levels
//! deep) is valid as it is.

use serde_json::{Map, Value};

use crate::schema::generate::walk_schemas;

/// How deep the walk follows `$ref`s and nesting (values deeper than this
/// are validated as they are).
const MAX_DEPTH: usize = 64;

/// Whether any call could need normalising: the schema has an optional
/// property or a map somewhere. Most tools' calls then skip the walk.
pub(crate) fn needed(schema: &Value) -> bool {
    let mut found = false;
    let mut copy = schema.clone();
    walk_schemas(&mut copy, &mut |node| {
        let optional = match (node.get("properties"), node.get("required")) {
            (Some(Value::Object(props)), Some(Value::Array(required))) => {
                props.keys().any(|k| !required.iter().any(|r| r == k))
            }
            (Some(Value::Object(props)), None) => !props.is_empty(),
            _ => false,
        };
        let map = node
            .get("additionalProperties")
            .is_some_and(Value::is_object);
        found |= optional || map;
    });
    found
}

/// Rewrites `params` in place as described in the module's documentation,
/// following `schema` (the `full` one).
pub(crate) fn normalize(schema: &Value, params: &mut Value) {
    Walk { root: schema }.value(schema, params, 0);
}

struct Walk<'a> {
    root: &'a Value,
}

impl<'a> Walk<'a> {
    /// `schema` with its `$ref`s followed.
    fn deref(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..16 {
            let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let target = if reference == "#" {
                Some(self.root)
            } else {
                reference.strip_prefix("#/").and_then(|path| {
                    path.split('/').try_fold(self.root, |node, token| {
                        node.get(token.replace("~1", "/").replace("~0", "~"))
                    })
                })
            };
            match target {
                Some(t) => schema = t,
                None => break,
            }
        }
        schema
    }

    fn value(&self, schema: &'a Value, value: &mut Value, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let schema = self.deref(schema);
        let Value::Object(s) = schema else { return };
        // The branches a value may follow: each is tried, which is harmless
        // (only nulls of optional properties and pairs where a map is
        // expected ever change).
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = s.get(key) {
                for branch in branches {
                    self.value(branch, value, depth + 1);
                }
            }
        }
        match value {
            Value::Object(members) => self.object(s, members, depth),
            Value::Array(items) => {
                if let Some(map) = self.pairs_as_map(s, items) {
                    *value = Value::Object(map);
                    if let Value::Object(members) = value {
                        self.object(s, members, depth);
                    }
                    return;
                }
                match (s.get("items"), s.get("prefixItems")) {
                    (_, Some(Value::Array(prefix))) => {
                        for (item, schema) in items.iter_mut().zip(prefix) {
                            self.value(schema, item, depth + 1);
                        }
                    }
                    (Some(item_schema), None) => {
                        for item in items.iter_mut() {
                            self.value(item_schema, item, depth + 1);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn object(&self, s: &'a Map<String, Value>, members: &mut Map<String, Value>, depth: usize) {
        let props = s.get("properties").and_then(Value::as_object);
        if let Some(props) = props {
            let required = |name: &str| {
                s.get("required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.iter().any(|x| x == name))
            };
            members.retain(|name, v| !(v.is_null() && props.contains_key(name) && !required(name)));
            for (name, member) in members.iter_mut() {
                if let Some(sub) = props.get(name) {
                    self.value(sub, member, depth + 1);
                }
            }
        }
        if let Some(extra @ Value::Object(_)) = s.get("additionalProperties") {
            for (name, member) in members.iter_mut() {
                if props.is_none_or(|p| !p.contains_key(name)) {
                    self.value(extra, member, depth + 1);
                }
            }
        }
    }

    /// `[{key, value}, ...]` where `s` is a map: the map, if every item is
    /// exactly such a pair with a string key (else the list stays as sent,
    /// and validation says what is wrong).
    fn pairs_as_map(
        &self,
        s: &Map<String, Value>,
        items: &mut [Value],
    ) -> Option<Map<String, Value>> {
        let is_map = s.get("additionalProperties").is_some_and(Value::is_object)
            && s.get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty);
        let takes_arrays = match s.get("type") {
            Some(Value::String(t)) => t == "array",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
            _ => false,
        };
        if !is_map || takes_arrays {
            return None;
        }
        let pair = |item: &Value| {
            let obj = item.as_object()?;
            (obj.len() == 2 && obj.get("key")?.is_string() && obj.contains_key("value"))
                .then_some(())
        };
        if !items.iter().all(|i| pair(i).is_some()) {
            return None;
        }
        let mut map = Map::new();
        for item in items.iter_mut() {
            if let Value::Object(obj) = item.take() {
                let key = obj
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let value = obj.get("value").cloned().unwrap_or(Value::Null);
                map.insert(key, value);
            }
        }
        Some(map)
    }
}

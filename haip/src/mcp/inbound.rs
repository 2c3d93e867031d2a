//! What a `/mcp` request body must be before the MCP server sees it: one
//! JSON-RPC 2.0 message. [`check`] reads it once, without building it (a
//! serde walk that keeps only a few short fields), and says what parsing it
//! will cost, or answers the JSON-RPC error a client should get: `-32700`
//! for what is not JSON, `-32600` for what is not one JSON-RPC message,
//! `-32601` for a method name no server has (and `logging/setLevel` in a
//! request of MCP 2026-07-28, which removed it), `-32602` for params of
//! `tools/call` and `logging/setLevel` of the wrong shape, and for a progress
//! token too long to repeat in every progress notification.
//!
//! The cost is an upper bound of what the message takes in memory once
//! parsed into JSON values, so that the server can count requests in flight
//! by what they hold, not by their bytes: at most [`MAX_COST_MULTIPLE`]
//! times the message's length (an array of single digits is the worst case).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

pub(crate) use crate::protocol::jsonrpc::{
    INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};

/// The longest method name taken (the longest MCP method has 38 bytes).
pub(crate) const MAX_METHOD_BYTES: usize = 128;
/// The longest request id and progress token taken: both are repeated in
/// what the server sends back.
pub(crate) const MAX_TOKEN_BYTES: usize = 256;
/// The most characters of client text an error message or a log line quotes.
pub(crate) const QUOTE_CHARS: usize = 40;

/// What one JSON value takes once parsed: `serde_json::Value` itself.
const NODE: usize = std::mem::size_of::<Value>();
/// What a string's heap allocation takes beyond its bytes, at most.
const STRING_OVERHEAD: usize = 16;
/// What an object member takes beyond its key's bytes and its value: the
/// key's `String` and the map's share of a node.
const MEMBER_OVERHEAD: usize = 24 + 24;

/// [`Checked::cost`] is at most this many times the message's length: one
/// `Value` (32 bytes) for every two bytes of `[0,0,0,…]`, plus the array.
pub(crate) const MAX_COST_MULTIPLE: usize = NODE / 2 + 1;

/// The log levels `logging/setLevel` takes (RFC 5424, as MCP names them).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A message that passed [`check`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checked {
    /// The method of a request or notification; `None` for a response (a
    /// client answering the server's request, in MCP sessions).
    pub(crate) method: Option<String>,
    /// A request's (or a response's) id; `None` for notifications.
    pub(crate) id: Option<Value>,
    /// What the message takes once parsed, in bytes (an upper bound).
    pub(crate) cost: usize,
}

/// A message refused before the MCP server sees it: the JSON-RPC error to
/// answer with, and the HTTP status to answer it under.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    /// `400` for what is not one JSON-RPC message, `200` for a request the
    /// server understood and refuses (JSON-RPC's own error response), `404`
    /// for a method that MCP 2026-07-28 removed, in a request of that
    /// revision (as the MCP server answers its `-32601`).
    pub(crate) status: u16,
    pub(crate) code: i32,
    pub(crate) message: String,
    /// The request's id when it had a usable one, else `null`.
    pub(crate) id: Value,
}

impl Refusal {
    pub(crate) fn new(status: u16, code: i32, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code,
            message: message.into(),
            id: Value::Null,
        }
    }

    fn with_id(mut self, id: Option<&Value>) -> Refusal {
        self.id = id.cloned().unwrap_or(Value::Null);
        self
    }

    /// The JSON-RPC error response.
    pub(crate) fn body(&self) -> String {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
        .to_string()
    }
}

/// At most [`QUOTE_CHARS`] characters of `text`, with `…` when cut.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Checks one request body (see the module's documentation).
pub(crate) fn check(body: &[u8]) -> Result<Checked, Refusal> {
    let (mut found, root) = walk(body)?;
    one_message(&root.kind)?;
    let id = id_of(&mut found)?;
    if !matches!(&found.jsonrpc, Some(Kind::Str(v)) if v == "2.0") {
        return Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: \"jsonrpc\" must be \"2.0\"",
        )
        .with_id(id.as_ref()));
    }
    let Some(method) = method_of(&mut found, id.as_ref())? else {
        // A response: a client answering the server's request.
        return Ok(Checked {
            method: None,
            id,
            cost: root.cost,
        });
    };
    if id.is_some() {
        check_request(&found, &method, id.as_ref())?;
    }
    Ok(Checked {
        method: Some(method),
        id,
        cost: root.cost,
    })
}

/// Reads the body once, keeping the few fields the check looks at; refuses
/// what is not JSON.
fn walk(body: &[u8]) -> Result<(Found, Seen), Refusal> {
    let mut found = Found::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let root = Walk {
        spot: Spot::Root,
        found: &mut found,
    }
    .deserialize(&mut de)
    .and_then(|seen| de.end().map(|()| seen))
    .map_err(|e| {
        Refusal::new(
            400,
            PARSE_ERROR,
            format!("Parse error: the body is not JSON ({e})"),
        )
    })?;
    Ok((found, root))
}

/// A message is one JSON object: not a batch, not a scalar.
fn one_message(root: &Kind) -> Result<(), Refusal> {
    match root {
        Kind::Object => Ok(()),
        Kind::Array => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: JSON-RPC batches are not supported; send one message per request",
        )),
        _ => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: a JSON-RPC message is an object",
        )),
    }
}

/// The message's id: a string of at most [`MAX_TOKEN_BYTES`] or an integer;
/// `None` without one (or `null`).
fn id_of(found: &mut Found) -> Result<Option<Value>, Refusal> {
    match found.id.take() {
        None | Some(Kind::Null) => Ok(None),
        Some(Kind::Integer(n)) => Ok(Some(Value::from(n))),
        Some(Kind::Str(s)) => Ok(Some(Value::String(s))),
        Some(Kind::LongStr(_)) => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            format!("Invalid request: id longer than {MAX_TOKEN_BYTES} bytes"),
        )),
        Some(_) => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: id must be a string or an integer",
        )),
    }
}

/// The method of a request or notification; `None` for a response.
fn method_of(found: &mut Found, id: Option<&Value>) -> Result<Option<String>, Refusal> {
    match found.method.take() {
        None if found.answer => Ok(None),
        None => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: no \"method\" (and not a response)",
        )
        .with_id(id)),
        Some(Kind::Str(method)) if method.len() <= MAX_METHOD_BYTES => Ok(Some(method)),
        Some(Kind::Str(method)) => Err(Refusal::new(
            200,
            METHOD_NOT_FOUND,
            format!("Method not found: {}", quote(&method)),
        )
        .with_id(id)),
        Some(Kind::LongStr(len)) => Err(Refusal::new(
            200,
            METHOD_NOT_FOUND,
            format!("Method not found: a method name of {len} bytes"),
        )
        .with_id(id)),
        Some(_) => Err(Refusal::new(
            400,
            INVALID_REQUEST,
            "Invalid request: \"method\" must be a string",
        )
        .with_id(id)),
    }
}

/// A request's params, refused as `-32602` with the request's id.
fn invalid_params(why: impl Into<String>, id: Option<&Value>) -> Refusal {
    Refusal::new(200, INVALID_PARAMS, why).with_id(id)
}

/// The params of a request (a message with an id): their shape, then what
/// its method needs of them.
fn check_request(found: &Found, method: &str, id: Option<&Value>) -> Result<(), Refusal> {
    check_params(found).map_err(|why| invalid_params(why, id))?;
    match method {
        "tools/call" => check_tool_call(found).map_err(|why| invalid_params(why, id)),
        // Removed in MCP 2026-07-28: a request of that revision is
        // answered as a method this server does not have (HTTP 404, as
        // the MCP server answers `-32601` to such requests).
        "logging/setLevel" if per_request(found.protocol_version.as_ref()) => Err(Refusal::new(
            404,
            METHOD_NOT_FOUND,
            "Method not found: logging/setLevel (removed in MCP 2026-07-28: \
             a request names its level in _meta io.modelcontextprotocol/logLevel)",
        )
        .with_id(id)),
        "logging/setLevel" => check_log_level(found).map_err(|why| invalid_params(why, id)),
        _ => Ok(()),
    }
}

/// Any request's params, `_meta` and progress token; why not, if not.
fn check_params(found: &Found) -> Result<(), String> {
    match &found.params {
        None | Some(Kind::Object) => {}
        Some(_) => return Err("Invalid params: params must be an object".into()),
    }
    if !matches!(found.meta, None | Some(Kind::Object)) {
        return Err("Invalid params: _meta must be an object".into());
    }
    match &found.progress_token {
        None | Some(Kind::Str(_) | Kind::Integer(_)) => Ok(()),
        Some(Kind::LongStr(len)) => Err(format!(
            "Invalid params: a progressToken of {len} bytes (at most {MAX_TOKEN_BYTES})"
        )),
        Some(_) => Err("Invalid params: progressToken must be a string or an integer".into()),
    }
}

/// The params of `tools/call`; why not, if not.
fn check_tool_call(found: &Found) -> Result<(), String> {
    if found.params.is_none() {
        return Err("Invalid params: tools/call needs params".into());
    }
    match &found.name {
        Some(Kind::Str(_) | Kind::LongStr(_)) => {}
        None => return Err("Invalid params: tools/call needs a tool \"name\"".into()),
        Some(_) => return Err("Invalid params: \"name\" must be a string".into()),
    }
    if !matches!(found.arguments, None | Some(Kind::Null | Kind::Object)) {
        return Err("Invalid params: \"arguments\" must be an object".into());
    }
    if !matches!(found.input_responses, None | Some(Kind::Object)) {
        return Err(
            "Invalid params: \"inputResponses\" must be an object of answers by key".into(),
        );
    }
    if !matches!(
        found.request_state,
        None | Some(Kind::Str(_) | Kind::LongStr(_))
    ) {
        return Err("Invalid params: \"requestState\" must be the string the server sent".into());
    }
    Ok(())
}

/// The params of `logging/setLevel` (of a revision before MCP 2026-07-28);
/// why not, if not.
fn check_log_level(found: &Found) -> Result<(), String> {
    match &found.level {
        Some(Kind::Str(level)) if LOG_LEVELS.contains(&level.as_str()) => Ok(()),
        Some(Kind::Str(level)) => Err(format!(
            "Invalid params: unknown log level {:?}; expected one of {}",
            quote(level),
            LOG_LEVELS.join(", ")
        )),
        _ => Err(format!(
            "Invalid params: logging/setLevel needs a \"level\", one of {}",
            LOG_LEVELS.join(", ")
        )),
    }
}

/// Whether a request's `_meta` protocol version is MCP 2026-07-28 or later
/// (dates compare as text).
fn per_request(version: Option<&Kind>) -> bool {
    matches!(version, Some(Kind::Str(v)) if v.as_str() >= "2026-07-28")
}

/// A large `tools/call` taken apart before the MCP server parses it: the
/// message with its arguments' large values left out, and the whole
/// arguments, parsed here, off the runtime's workers; `None` when there is
/// nothing to take (the arguments are not an object). What stays is what
/// the `Mcp-Param-*` header checks read (SEP-2243): small top-level scalars,
/// and whatever scalar sits at a path `header_paths` gives for the called
/// tool (the properties its input schema annotates with `x-mcp-header`,
/// see [`header_paths`]), however long.
pub(crate) fn split_arguments(
    body: &[u8],
    header_paths: impl FnOnce(&str) -> Vec<Vec<String>>,
) -> Option<(Vec<u8>, Map<String, Value>)> {
    let mut message: Value = serde_json::from_slice(body).ok()?;
    let params = message.get_mut("params")?;
    let paths = match params.get("name").and_then(Value::as_str) {
        Some(name) => header_paths(name),
        None => Vec::new(),
    };
    let arguments = params.get_mut("arguments")?;
    if !arguments.is_object() {
        return None;
    }
    let Value::Object(whole) = arguments.take() else {
        return None;
    };
    let mut kept: Map<String, Value> = whole
        .iter()
        .filter(|(_, v)| match v {
            Value::String(s) => s.len() <= MAX_TOKEN_BYTES,
            Value::Array(_) | Value::Object(_) => false,
            _ => true,
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for path in &paths {
        keep_at(&whole, &mut kept, path);
    }
    *arguments = Value::Object(kept);
    Some((serde_json::to_vec(&message).ok()?, whole))
}

/// Copies the scalar at `path` in `whole` (through objects) into `kept`,
/// making the objects on the way.
fn keep_at(whole: &Map<String, Value>, kept: &mut Map<String, Value>, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut from = whole;
    let mut into = kept;
    for key in parents {
        let Some(Value::Object(next)) = from.get(key) else {
            return;
        };
        from = next;
        let slot = into
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        let Value::Object(slot) = slot else {
            return;
        };
        into = slot;
    }
    if let Some(value) = from.get(last).filter(|v| !v.is_array() && !v.is_object()) {
        into.insert(last.clone(), value.clone());
    }
}

/// How deep [`header_paths`] looks into nested `properties`.
const MAX_HEADER_DEPTH: usize = 32;

/// The paths (through `properties` alone, from the root) of the properties
/// an input schema annotates with `x-mcp-header` (SEP-2243): their values
/// travel in `Mcp-Param-*` headers too, which `/mcp` checks against the
/// body.
pub(crate) fn header_paths(schema: &Value) -> Vec<Vec<String>> {
    annotations(schema)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// Whether an input schema annotates any property with `x-mcp-header`
/// ([`header_paths`] is not empty), found without building the paths: asked
/// for every `tools/call` served on the fast path.
pub(crate) fn has_header_params(schema: &Value) -> bool {
    fn walk(schema: &Value, depth: usize) -> bool {
        if depth >= MAX_HEADER_DEPTH {
            return false;
        }
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return false;
        };
        properties
            .values()
            .any(|property| property.get("x-mcp-header").is_some() || walk(property, depth + 1))
    }
    walk(schema, 0)
}

/// The properties an input schema annotates with a header name
/// (`x-mcp-header`: a string that is not empty), each with its path and
/// the header's name (after `Mcp-Param-`).
pub(crate) fn header_params(schema: &Value) -> Vec<(Vec<String>, String)> {
    annotations(schema)
        .into_iter()
        .filter_map(|(path, header)| match header {
            Value::String(name) if !name.is_empty() => Some((path, name.clone())),
            _ => None,
        })
        .collect()
}

/// Every `x-mcp-header` annotation along `properties` chains from the root,
/// with its path.
fn annotations(schema: &Value) -> Vec<(Vec<String>, &Value)> {
    fn walk<'s>(
        schema: &'s Value,
        path: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, &'s Value)>,
    ) {
        if path.len() >= MAX_HEADER_DEPTH {
            return;
        }
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            path.push(name.clone());
            if let Some(header) = property.get("x-mcp-header") {
                out.push((path.clone(), header));
            }
            walk(property, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

// ----- the walk -------------------------------------------------------------------------

/// What the walk keeps of the fields it looks at.
#[derive(Debug, Default)]
struct Found {
    jsonrpc: Option<Kind>,
    method: Option<Kind>,
    id: Option<Kind>,
    params: Option<Kind>,
    /// `result` or `error` at the top: a response.
    answer: bool,
    name: Option<Kind>,
    arguments: Option<Kind>,
    level: Option<Kind>,
    meta: Option<Kind>,
    progress_token: Option<Kind>,
    input_responses: Option<Kind>,
    request_state: Option<Kind>,
    /// `_meta`'s protocol version: a request of MCP 2026-07-28 or later.
    protocol_version: Option<Kind>,
}

/// A value's JSON type, with short strings and integers kept.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Null,
    Bool,
    Integer(i64),
    Number,
    /// A string of at most [`MAX_TOKEN_BYTES`].
    Str(String),
    /// A longer string: its length only.
    LongStr(usize),
    Array,
    Object,
}

/// A value seen: its kind and what it costs parsed.
struct Seen {
    kind: Kind,
    cost: usize,
}

/// Where in the message a value is: the walk keeps fields only at these spots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spot {
    Root,
    Params,
    Meta,
    /// A kept field's value: its kind is kept, not what is inside it.
    Keep,
    /// Anywhere else: measured, not kept.
    Other,
}

struct Walk<'f> {
    spot: Spot,
    found: &'f mut Found,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Seen;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Seen, D::Error> {
        deserializer.deserialize_any(self)
    }
}

fn scalar(kind: Kind) -> Seen {
    Seen { kind, cost: NODE }
}

fn string(s: &str) -> Seen {
    let kind = if s.len() <= MAX_TOKEN_BYTES {
        Kind::Str(s.to_owned())
    } else {
        Kind::LongStr(s.len())
    };
    Seen {
        kind,
        cost: NODE + s.len() + STRING_OVERHEAD,
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Seen;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Seen, E> {
        Ok(scalar(Kind::Null))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Seen, E> {
        Ok(scalar(Kind::Bool))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Seen, E> {
        Ok(scalar(Kind::Integer(n)))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Seen, E> {
        Ok(scalar(i64::try_from(n).map_or(Kind::Number, Kind::Integer)))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Seen, E> {
        Ok(scalar(Kind::Number))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Seen, E> {
        // Only the fields kept need the text; others, just the length.
        if self.spot == Spot::Other && !s.is_empty() {
            return Ok(Seen {
                kind: Kind::LongStr(s.len()),
                cost: NODE + s.len() + STRING_OVERHEAD,
            });
        }
        Ok(string(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        let mut cost = NODE;
        let mut ignored = Found::default();
        while let Some(seen) = seq.next_element_seed(Walk {
            spot: Spot::Other,
            found: &mut ignored,
        })? {
            cost = cost.saturating_add(seen.cost);
        }
        Ok(Seen {
            kind: Kind::Array,
            cost,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        let mut cost = NODE;
        let found = self.found;
        let mut ignored = Found::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            cost = cost.saturating_add(MEMBER_OVERHEAD + key.len);
            let field = key.field(self.spot);
            let spot = match field {
                Field::Params => Spot::Params,
                Field::Meta => Spot::Meta,
                Field::Other | Field::Answer => Spot::Other,
                _ => Spot::Keep,
            };
            let into = if spot == Spot::Other {
                &mut ignored
            } else {
                &mut *found
            };
            let seen = map.next_value_seed(Walk { spot, found: into })?;
            cost = cost.saturating_add(seen.cost);
            let slot = match field {
                Field::Jsonrpc => &mut found.jsonrpc,
                Field::Method => &mut found.method,
                Field::Id => &mut found.id,
                Field::Params => &mut found.params,
                Field::Answer => {
                    found.answer = true;
                    continue;
                }
                Field::Name => &mut found.name,
                Field::Arguments => &mut found.arguments,
                Field::Level => &mut found.level,
                Field::Meta => &mut found.meta,
                Field::ProgressToken => &mut found.progress_token,
                Field::InputResponses => &mut found.input_responses,
                Field::RequestState => &mut found.request_state,
                Field::ProtocolVersion => &mut found.protocol_version,
                Field::Other => continue,
            };
            *slot = Some(seen.kind);
        }
        Ok(Seen {
            kind: Kind::Object,
            cost,
        })
    }
}

/// The fields the walk keeps, by where they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Jsonrpc,
    Method,
    Id,
    Params,
    Answer,
    Name,
    Arguments,
    Level,
    Meta,
    ProgressToken,
    InputResponses,
    RequestState,
    ProtocolVersion,
    Other,
}

/// An object key: which field it names, and its length.
struct Key {
    name: Option<&'static str>,
    len: usize,
}

const KEPT_KEYS: [&str; 13] = [
    "jsonrpc",
    "method",
    "id",
    "params",
    "result",
    "error",
    "name",
    "arguments",
    "level",
    "_meta",
    "inputResponses",
    "requestState",
    "io.modelcontextprotocol/protocolVersion",
];

impl Key {
    fn field(&self, spot: Spot) -> Field {
        match (spot, self.name) {
            (Spot::Root, Some("jsonrpc")) => Field::Jsonrpc,
            (Spot::Root, Some("method")) => Field::Method,
            (Spot::Root, Some("id")) => Field::Id,
            (Spot::Root, Some("params")) => Field::Params,
            (Spot::Root, Some("result" | "error")) => Field::Answer,
            (Spot::Params, Some("name")) => Field::Name,
            (Spot::Params, Some("arguments")) => Field::Arguments,
            (Spot::Params, Some("level")) => Field::Level,
            (Spot::Params, Some("_meta")) => Field::Meta,
            (Spot::Params, Some("inputResponses")) => Field::InputResponses,
            (Spot::Params, Some("requestState")) => Field::RequestState,
            (Spot::Meta, Some("progressToken")) => Field::ProgressToken,
            (Spot::Meta, Some("io.modelcontextprotocol/protocolVersion")) => Field::ProtocolVersion,
            _ => Field::Other,
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
        let name = KEPT_KEYS.iter().find(|k| **k == s).copied();
        // `progressToken` is kept only inside `_meta`; `field` decides.
        let name = name.or((s == "progressToken").then_some("progressToken"));
        Ok(Key { name, len: s.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> Refusal {
        check(body.as_bytes()).expect_err(body)
    }

    fn call(params: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
    }

    #[test]
    fn requests_notifications_and_responses_pass() {
        let c = check(
            call(r#"{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":"p1"}}"#)
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(c.method.as_deref(), Some("tools/call"));
        assert_eq!(c.id, Some(json!(7)));
        let c = check(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert_eq!(c.id, None);
        let c = check(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert_eq!(c.method, None);
        assert!(check(br#" {"params":{},"method":"ping","id":"x","jsonrpc":"2.0"} "#).is_ok());
        assert!(
            check(call(r#"{"name":"echo","arguments":null}"#).as_bytes()).is_ok(),
            "null arguments are no arguments"
        );
        assert!(
            check(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"name":5,"_meta":3}}}"#)
                .is_ok(),
            "fields are looked at only where they mean something"
        );
    }

    #[test]
    fn what_is_not_one_json_rpc_message_is_refused_with_its_code() {
        for (body, code) in [
            ("", PARSE_ERROR),
            ("{", PARSE_ERROR),
            ("nope", PARSE_ERROR),
            (
                r#"{"jsonrpc":"2.0","method":"ping","id":1} trailing"#,
                PARSE_ERROR,
            ),
            (
                &format!("{}0{}", "[".repeat(200), "]".repeat(200)),
                PARSE_ERROR,
            ),
            ("[]", INVALID_REQUEST),
            (
                r#"[{"jsonrpc":"2.0","method":"ping","id":1}]"#,
                INVALID_REQUEST,
            ),
            ("5", INVALID_REQUEST),
            (r#"{"method":"ping","id":1}"#, INVALID_REQUEST),
            (
                r#"{"jsonrpc":"1.0","method":"ping","id":1}"#,
                INVALID_REQUEST,
            ),
            (r#"{"jsonrpc":"2.0","method":5,"id":1}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (
                r#"{"jsonrpc":"2.0","method":"ping","id":{}}"#,
                INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"ping","id":1.5}"#,
                INVALID_REQUEST,
            ),
        ] {
            let r = refused(body);
            assert_eq!(r.code, code, "{body:.60}");
            assert_eq!(r.status, 400, "{body:.60}");
        }
        let long_id = format!(
            r#"{{"jsonrpc":"2.0","method":"ping","id":"{}"}}"#,
            "i".repeat(300)
        );
        assert_eq!(refused(&long_id).code, INVALID_REQUEST);
    }

    #[test]
    fn bad_params_are_invalid_params_with_the_id() {
        for params in [
            "5",
            "[]",
            r#"{"name":"echo","arguments":5}"#,
            r#"{"name":"echo","arguments":"x"}"#,
            r#"{"name":"echo","arguments":[1]}"#,
            r#"{"arguments":{}}"#,
            r#"{"name":3}"#,
            r#"{"name":"echo","_meta":5}"#,
            r#"{"name":"echo","_meta":{"progressToken":{}}}"#,
            r#"{"name":"echo","_meta":{"progressToken":1.5}}"#,
            r#"{"name":"echo","inputResponses":null}"#,
            r#"{"name":"echo","inputResponses":[1]}"#,
            r#"{"name":"echo","requestState":5}"#,
        ] {
            let r = refused(&call(params));
            assert_eq!((r.status, r.code), (200, INVALID_PARAMS), "{params}");
            assert_eq!(r.id, json!(7));
            assert_eq!(
                serde_json::from_str::<Value>(&r.body()).unwrap()["error"]["code"],
                json!(INVALID_PARAMS)
            );
        }
        let token = format!(
            r#"{{"name":"echo","_meta":{{"progressToken":"{}"}}}}"#,
            "t".repeat(9000)
        );
        let r = refused(&call(&token));
        assert_eq!(r.code, INVALID_PARAMS);
        assert!(r.message.contains("9000 bytes"), "{}", r.message);
        assert!(r.body().len() < 200, "the token is not echoed");
        let no_params = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;
        assert_eq!(refused(no_params).code, INVALID_PARAMS);
        for level in [r#"{"level":"loud"}"#, r#"{"level":3}"#, "{}"] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{level}}}"#
            );
            let r = refused(&body);
            assert_eq!(r.code, INVALID_PARAMS, "{level}");
            assert!(
                r.message.contains("warning"),
                "lists the levels: {}",
                r.message
            );
        }
        assert!(
            check(br#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}"#).is_ok()
        );
        // Removed in 2026-07-28: not found, with or without a level.
        for params in ["", r#""level":"debug","#] {
            let modern = format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{{{params}"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}}}"#
            );
            let r = refused(&modern);
            assert_eq!(
                (r.status, r.code, r.id.clone()),
                (404, METHOD_NOT_FOUND, json!(9)),
                "{modern}"
            );
            assert!(r.message.contains("logLevel"), "{}", r.message);
        }
        // An earlier revision named in `_meta` still has it.
        let older = r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#;
        assert!(check(older.as_bytes()).is_ok());
        let retry = call(&format!(
            r#"{{"name":"t","inputResponses":{{"k":{{"action":"accept"}}}},"requestState":"{}"}}"#,
            "s".repeat(5000)
        ));
        assert!(check(retry.as_bytes()).is_ok());
    }

    #[test]
    fn long_method_names_are_quoted_briefly() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#,
            "m".repeat(1_000_000)
        );
        let r = refused(&body);
        assert_eq!(r.code, METHOD_NOT_FOUND);
        assert!(r.body().len() < 200, "{}", r.body());
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#,
            "é".repeat(100)
        );
        let r = refused(&body);
        assert_eq!(
            r.message,
            format!("Method not found: {}…", "é".repeat(QUOTE_CHARS))
        );
    }

    #[test]
    fn large_arguments_are_taken_out_of_the_message() {
        let body = call(
            r#"{"name":"echo","arguments":{"message":"hi","n":3,"junk":[0,0,0],"deep":{"a":1}}}"#,
        );
        let (stub, whole) = split_arguments(body.as_bytes(), |_| Vec::new()).unwrap();
        let stub: Value = serde_json::from_slice(&stub).unwrap();
        assert_eq!(
            stub["params"]["arguments"],
            json!({"message": "hi", "n": 3})
        );
        assert_eq!(stub["params"]["name"], "echo");
        assert_eq!(stub["id"], 7);
        assert_eq!(
            Value::Object(whole),
            json!({"message": "hi", "n": 3, "junk": [0, 0, 0], "deep": {"a": 1}})
        );
        assert!(split_arguments(call(r#"{"name":"echo"}"#).as_bytes(), |_| Vec::new()).is_none());
    }

    #[test]
    fn values_that_travel_in_headers_stay_in_the_message_however_long() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "where": {"type": "object", "properties": {
                "zone": {"type": "string", "x-mcp-header": "Zone"},
                "note": {"type": "string"}
            }},
            "text": {"type": "string"}
        }});
        let paths = header_paths(&schema);
        assert!(has_header_params(&schema));
        let deep = json!({"properties": {"a": {"properties": {"b": {"x-mcp-header": "B"}}}}});
        assert!(has_header_params(&deep));
        assert!(!has_header_params(
            &json!({"properties": {"a": {"type": "string"}}})
        ));
        assert!(!has_header_params(&json!({"type": "object"})));
        assert_eq!(
            paths,
            [
                vec!["region".to_owned()],
                vec!["where".to_owned(), "zone".to_owned()]
            ]
        );
        let long = "r".repeat(1000);
        let body = call(&format!(
            r#"{{"name":"regional","arguments":{{"region":"{long}","where":{{"zone":"{long}","note":"{long}"}},"text":"{long}"}}}}"#
        ));
        let mut asked = None;
        let (stub, whole) = split_arguments(body.as_bytes(), |name| {
            asked = Some(name.to_owned());
            paths.clone()
        })
        .unwrap();
        assert_eq!(asked.as_deref(), Some("regional"));
        let stub: Value = serde_json::from_slice(&stub).unwrap();
        assert_eq!(
            stub["params"]["arguments"],
            json!({"region": long, "where": {"zone": long}}),
            "the annotated values stay, the rest goes"
        );
        assert_eq!(whole["text"], json!(long));
    }

    #[test]
    fn the_cost_bounds_the_parsed_form_and_the_bytes() {
        // The worst case: single digits, one `Value` each.
        let n = 100_000;
        let digits = format!("[{}0]", "0,".repeat(n - 1));
        let body = call(&format!(
            r#"{{"name":"echo","arguments":{{"a":{digits}}}}}"#
        ));
        let c = check(body.as_bytes()).unwrap();
        assert!(c.cost >= n * NODE, "every element counted: {}", c.cost);
        assert!(
            c.cost <= body.len() * MAX_COST_MULTIPLE,
            "{} for {} bytes",
            c.cost,
            body.len()
        );
        // Long strings cost about their length.
        let text = "x".repeat(n);
        let body = call(&format!(
            r#"{{"name":"echo","arguments":{{"message":"{text}"}}}}"#
        ));
        let c = check(body.as_bytes()).unwrap();
        assert!(c.cost >= n && c.cost < 2 * body.len(), "{}", c.cost);
        // Objects: every member counted.
        let members: Vec<String> = (0..10_000).map(|i| format!(r#""k{i}":0"#)).collect();
        let body = call(&format!(
            r#"{{"name":"e","arguments":{{{}}}}}"#,
            members.join(",")
        ));
        let c = check(body.as_bytes()).unwrap();
        assert!(c.cost >= 10_000 * (NODE + MEMBER_OVERHEAD));
        assert!(c.cost <= body.len() * MAX_COST_MULTIPLE);
    }
}

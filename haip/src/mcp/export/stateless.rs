//! Requests `/mcp` serves on their own, with no MCP session: every request
//! when sessions are off (`mcp_sessions(false)`), and with them on, the
//! requests that name their revision in their own `_meta` (MCP 2026-07-28)
//! which the fast path (`direct.rs`) did not take: those whose headers
//! disagree with their body, calls of tools with `x-mcp-header`
//! parameters, methods served nowhere else.
//!
//! A request is first checked against its headers ([`check`]), in this
//! order, each refusal `400`:
//!
//! - `MCP-Protocol-Version`: an `initialize`'s must name the revision its
//!   params ask for (`-32600`); any other request's must be a revision the
//!   server knows, unless the request names its own in `_meta` (a line of
//!   text); none means 2025-03-26.
//! - From 2026-07-28 on, the standard headers (SEP-2243): `Mcp-Method` says
//!   the method, `Mcp-Name` the called tool (or task), and each
//!   `Mcp-Param-*` the argument its tool's input schema annotates with
//!   `x-mcp-header`, in the schema profile the client was shown; a value
//!   may be Base64-wrapped (`=?base64?…?=`); none may be repeated
//!   (`-32020`).
//! - A request's `_meta` revision needs the header, and the same one
//!   (`-32020`); a `server/discover`, or any request under a 2026-07-28
//!   header, needs its `_meta` revision and client capabilities (`-32602`).
//!
//! Then it is served: a notification is accepted (`202`) and nothing is
//! kept of it; an answer has no question of the server's to answer (`400`);
//! a request is answered as its revision asks (`ping` and
//! `logging/setLevel` only before 2026-07-28, `subscriptions/listen` and
//! `server/discover` only from then on). A request that names its revision
//! in `_meta` gets the HTTP status its error names (`direct.rs`); one that
//! does not is answered `200` whatever its JSON-RPC error. A call's
//! progress and log lines go on its answer's SSE stream before its result;
//! a call with nothing before its result is answered as plain JSON. A
//! `logging/setLevel` lasts for its own request: nothing of a request is
//! kept for the next.
//!
//! Security, per route: behind the server's `Origin`/`Host` guard and
//! authentication like every route, the caller's scopes checked by the
//! front door; each request holds a place among `max_sessions` stateless
//! requests, at most `max_sessions_per_caller` of them its caller's
//! (`http.rs`), and a listen stream one among half as many (`listen.rs`).

use std::borrow::Cow;

use crate::mcp::model::McpError;
use crate::mcp::model::{
    CallToolRequestParams, ClientCapabilities, DiscoverResult, ErrorCode, InitializeRequestParams,
    ProtocolVersion, RequestId, ServerResult, SetLevelRequestParams, SubscriptionFilter,
};
use base64::Engine;
use http_body_util::{BodyExt, Empty};
use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::ExportService;
use super::direct::{self, Body, CallOf, TaskMethod};
use super::logs::per_request;
use super::session::{Incoming, Message, TaskParams, parse};
use crate::mcp::inbound;
use crate::mcp::listen::Listening;

use super::header_names::{METHOD, NAME, PROTOCOL_VERSION as VERSION_HEADER};
/// The `_meta` key of a request's own revision.
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of what a request's client declared.
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// The prefix of an `Mcp-Param-*` header.
const PARAM_HEADER: &str = "mcp-param-";

/// The first revision whose requests carry their revision and capabilities
/// in `_meta`, and the standard headers.
fn modern() -> &'static str {
    ProtocolVersion::V_2026_07_28.as_str()
}

/// Why a request is refused before it is served: `400`.
#[derive(Debug)]
pub(crate) enum Refused {
    /// A revision header the server cannot read: a line of text.
    Text(String),
    /// A JSON-RPC error answering the request `id`, if it has one.
    Rpc(Option<RequestId>, McpError),
}

impl Refused {
    /// The refusal as the client gets it.
    pub(crate) fn response(&self) -> Response<Body> {
        match self {
            Refused::Text(text) => {
                let body = http_body_util::Full::new(bytes::Bytes::from(text.clone()));
                let mut response = Response::new(body.boxed_unsync());
                *response.status_mut() = StatusCode::BAD_REQUEST;
                response
            }
            Refused::Rpc(id, error) => {
                let message = match id {
                    Some(id) => direct::error_message(id, error),
                    None => direct::encode(&serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": error,
                    })),
                };
                direct::json(StatusCode::BAD_REQUEST, &message)
            }
        }
    }
}

/// Checks `message` against its `headers` (see the module's
/// documentation). `schema`: the input schema the client was shown of a
/// tool, for its `Mcp-Param-*` headers.
pub(crate) fn check(
    headers: &HeaderMap,
    message: &Message,
    schema: impl FnOnce(&str) -> Option<Value>,
) -> Result<(), Refused> {
    let id = message.id.clone();
    let method = message.method.as_deref();
    let request = id.is_some() && method.is_some();
    let params = message.params.as_ref();
    let initialize = request && method.is_some_and(|m| handshake(m, params));
    let meta_version = if request { meta_version(params) } else { None };
    if let Some(value) = headers.get(VERSION_HEADER) {
        if initialize {
            let Ok(said) = value.to_str() else {
                let why = "Invalid Request: MCP-Protocol-Version header is not valid UTF-8";
                return Err(Refused::Rpc(id, McpError::invalid_request(why, None)));
            };
            let asked = params
                .and_then(|p| p.get("protocolVersion"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if said != asked {
                let why = format!(
                    "Invalid Request: MCP-Protocol-Version header ({}) does not match \
                     initialize params.protocolVersion ({})",
                    inbound::quote(said),
                    inbound::quote(asked)
                );
                return Err(Refused::Rpc(id, McpError::invalid_request(why, None)));
            }
        } else {
            let Ok(said) = value.to_str() else {
                let why = "Bad Request: Invalid MCP-Protocol-Version header encoding";
                return Err(Refused::Text(why.to_owned()));
            };
            let known = ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|v| v.as_str() == said);
            if meta_version.is_none() && !known {
                let why = format!(
                    "Bad Request: Unsupported MCP-Protocol-Version: {}",
                    inbound::quote(said)
                );
                return Err(Refused::Text(why));
            }
        }
    }
    let header = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok());
    if let Some(method) = method
        && header.is_some_and(|v| v >= modern())
    {
        let standard = if initialize {
            initialize_method(headers)
        } else {
            standard_headers(headers, method, params, schema)
        };
        if let Err(why) = standard {
            let error = McpError::new(ErrorCode::HEADER_MISMATCH, why, None);
            return Err(Refused::Rpc(id, error));
        }
    }
    if !request || initialize {
        return Ok(());
    }
    match (meta_version, header) {
        (None, _) if method == Some("server/discover") || header.is_some_and(|v| v >= modern()) => {
            let missing = missing_meta(params).join(", ");
            let why = format!(
                "Invalid params: request _meta is missing or has malformed required fields: {missing}"
            );
            Err(Refused::Rpc(id, McpError::invalid_params(why, None)))
        }
        (None, _) => Ok(()),
        (Some(_), None) => {
            let why = "request _meta protocolVersion requires MCP-Protocol-Version header";
            let error = McpError::new(ErrorCode::HEADER_MISMATCH, why, None);
            Err(Refused::Rpc(id, error))
        }
        (Some(own), Some(header)) if own != header => {
            let why = format!(
                "MCP-Protocol-Version header ({}) does not match request _meta protocolVersion ({})",
                inbound::quote(header),
                inbound::quote(own)
            );
            let error = McpError::new(ErrorCode::HEADER_MISMATCH, why, None);
            Err(Refused::Rpc(id, error))
        }
        (Some(_), Some(_)) => Ok(()),
    }
}

/// `initialize` with the revision it asks for: the handshake of revisions
/// before 2026-07-28. (One without is a 2026-07-28 client's, which has no
/// such method.)
fn handshake(method: &str, params: Option<&Map<String, Value>>) -> bool {
    method == "initialize"
        && params
            .and_then(|p| p.get("protocolVersion"))
            .is_some_and(Value::is_string)
}

/// The `_meta` of `params`, if it has one.
fn meta_of(params: Option<&Map<String, Value>>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// The revision a request names in its `_meta`.
fn meta_version(params: Option<&Map<String, Value>>) -> Option<&str> {
    meta_of(params)?.get(VERSION_KEY)?.as_str()
}

/// What a request's client declared in its `_meta`, when it reads.
fn meta_capabilities(params: Option<&Map<String, Value>>) -> Option<ClientCapabilities> {
    ClientCapabilities::deserialize(meta_of(params)?.get(CAPABILITIES_KEY)?).ok()
}

/// The `_meta` keys a 2026-07-28 request lacks (or has malformed).
fn missing_meta(params: Option<&Map<String, Value>>) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if meta_version(params).is_none() {
        missing.push(VERSION_KEY);
    }
    if meta_capabilities(params).is_none() {
        missing.push(CAPABILITIES_KEY);
    }
    missing
}

/// An `initialize` need not carry the standard headers, but an
/// `Mcp-Method` it carries must be one, and say `initialize`.
fn initialize_method(headers: &HeaderMap) -> Result<(), String> {
    let mut values = headers.get_all(METHOD).iter();
    let Some(first) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err(
            "multiple Mcp-Method header values supplied; initialize requires exactly one".into(),
        );
    }
    if first != "initialize" {
        let said = String::from_utf8_lossy(first.as_bytes());
        return Err(format!(
            "Mcp-Method header `{}` does not match body method `initialize`",
            inbound::quote(&said)
        ));
    }
    Ok(())
}

/// The standard headers of a 2026-07-28 message (SEP-2243) against its body:
/// why they disagree, if they do.
fn standard_headers(
    headers: &HeaderMap,
    method: &str,
    params: Option<&Map<String, Value>>,
    schema: impl FnOnce(&str) -> Option<Value>,
) -> Result<(), String> {
    match single(headers, METHOD.as_str())? {
        None => return Err("missing required Mcp-Method header".into()),
        Some(said) if said != method => {
            return Err(format!(
                "Mcp-Method header `{}` does not match body method `{}`",
                inbound::quote(said),
                inbound::quote(method)
            ));
        }
        Some(_) => {}
    }
    // What `Mcp-Name` repeats, for the methods that have one.
    let named = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    let expected = named.and_then(|key| params?.get(key)?.as_str());
    if let Some(expected) = expected {
        let Some(raw) = single(headers, NAME.as_str())? else {
            return Err(format!("missing required Mcp-Name header for `{method}`"));
        };
        let said = decoded(raw).ok_or("Mcp-Name header is not valid Base64")?;
        if said != expected {
            return Err(format!(
                "Mcp-Name header `{}` does not match body value `{}`",
                inbound::quote(&said),
                inbound::quote(expected)
            ));
        }
    }
    if method != "tools/call" {
        return Ok(());
    }
    let Some(schema) = expected.and_then(schema) else {
        return Ok(());
    };
    let arguments = params.and_then(|p| p.get("arguments"));
    for (path, header) in inbound::header_params(&schema) {
        let property = path.join(".");
        let name = format!("{PARAM_HEADER}{header}");
        let said = single(headers, &name)?;
        let value = arguments
            .and_then(|a| path.iter().try_fold(a, |v, key| v.get(key)))
            .and_then(primitive);
        let shown = format!("Mcp-Param-{header}");
        match (said, value) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "unexpected {shown} header for absent or null `{property}`"
                ));
            }
            (None, Some(_)) => return Err(format!("missing {shown} header for `{property}`")),
            (Some(raw), Some(expected)) => {
                let said =
                    decoded(raw).ok_or_else(|| format!("{shown} header is not valid Base64"))?;
                if said != expected {
                    return Err(format!(
                        "{shown} header `{}` does not match body value `{}`",
                        inbound::quote(&said),
                        inbound::quote(&expected)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The one value of header `name`, if there is one; repeated, or not
/// visible ASCII, it is refused.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, String> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("duplicate {name} header"));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| format!("{name} header contains invalid characters"))
}

/// A header's value, unwrapped from `=?base64?…?=` when it is wrapped;
/// `None` when the wrapping holds no Base64 of UTF-8.
fn decoded(raw: &str) -> Option<Cow<'_, str>> {
    let Some(inner) = raw
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    else {
        return Some(Cow::Borrowed(raw));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok().map(Cow::Owned)
}

/// A string, boolean or number as its header form; anything else (`null`
/// included) has none.
fn primitive(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// How a checked request is served: what its revision is, and what its
/// client declared.
struct Lifecycle {
    version: ProtocolVersion,
    /// It names its revision in `_meta` (or is `server/discover`): its
    /// errors are answered with the HTTP status they name.
    negotiated: bool,
    /// Its lifecycle is 2026-07-28's: no `ping` nor `logging/setLevel`; a
    /// listen stream.
    modern: bool,
    capabilities: ClientCapabilities,
}

/// The lifecycle of a checked request of `method`; `Err` is the error that
/// refuses it (`400`).
fn lifecycle(
    service: &ExportService,
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Lifecycle, McpError> {
    let params = Some(params);
    let initialize = handshake(method, params);
    let own = if initialize {
        None
    } else {
        meta_version(params)
    };
    let supported = service.supported_protocol_versions();
    let version = match own {
        Some(own) => match supported.iter().find(|v| v.as_str() == own) {
            Some(version) => version.clone(),
            None => {
                let asked: ProtocolVersion = serde_json::from_value(Value::from(own))
                    .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
                return Err(McpError::unsupported_protocol_version(asked, supported));
            }
        },
        None => headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| supported.iter().find(|known| known.as_str() == v))
            .cloned()
            .unwrap_or(ProtocolVersion::V_2025_03_26),
    };
    let modern = !initialize
        && (method == "server/discover" || own.is_some_and(|own| own >= self::modern()));
    if modern {
        let missing = missing_meta(params);
        if !missing.is_empty() {
            return Err(McpError::invalid_params(
                format!(
                    "request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
                None,
            ));
        }
    }
    let negotiated = !initialize && (own.is_some() || method == "server/discover");
    let capabilities = if negotiated {
        meta_capabilities(params).unwrap_or_default()
    } else {
        ClientCapabilities::default()
    };
    Ok(Lifecycle {
        version,
        negotiated,
        modern,
        capabilities,
    })
}

/// `subscriptions/listen` params.
#[derive(Deserialize)]
struct ListenParams {
    notifications: SubscriptionFilter,
}

impl ExportService {
    /// Serves a message [`check`] let through, for the caller `incoming`
    /// names; `listening`: the place the front door took for a
    /// `subscriptions/listen` stream.
    pub(crate) async fn serve_stateless(
        self,
        headers: &HeaderMap,
        message: Message,
        incoming: Incoming,
        listening: Option<Listening>,
    ) -> Response<Body> {
        let Message {
            id, method, params, ..
        } = message;
        let (id, method) = match (id, method) {
            (Some(id), Some(method)) => (id, method),
            // A notification: nothing is kept of it (a call's client cancels
            // it by going away).
            (None, Some(_)) => return accepted(),
            _ => {
                let why = "stateless server does not accept JSON-RPC responses";
                return Refused::Rpc(None, McpError::invalid_request(why, None)).response();
            }
        };
        let mut params = params.unwrap_or_default();
        let lifecycle = match lifecycle(&self, headers, &method, &params) {
            Ok(lifecycle) => lifecycle,
            Err(error) => return Refused::Rpc(Some(id), error).response(),
        };
        let caller = incoming.caller.as_deref();
        let answered = match method.as_str() {
            "tools/call" => {
                let meta = match params.remove("_meta") {
                    Some(Value::Object(meta)) => meta,
                    _ => Map::new(),
                };
                let call = match parse::<CallToolRequestParams>(Value::Object(params)) {
                    Ok(call) => call,
                    Err(error) => return reply(&id, Err(error), &lifecycle),
                };
                let of = CallOf {
                    meta,
                    version: lifecycle.version,
                    capabilities: lifecycle.capabilities,
                    caller: incoming.caller,
                    key: incoming.key,
                    arguments: incoming.arguments,
                    large: incoming.large,
                    statuses: lifecycle.negotiated,
                };
                return self.answer_call(id, call, of).await;
            }
            "subscriptions/listen" if lifecycle.modern => {
                let requested = match parse::<ListenParams>(Value::Object(params)) {
                    Ok(listen) => listen.notifications,
                    Err(error) => return reply(&id, Err(error), &lifecycle),
                };
                let Some(listening) = listening else {
                    let error = McpError::internal_error("a listen stream without its place", None);
                    return reply(&id, Err(error), &lifecycle);
                };
                return self.listen(id, requested, listening, caller);
            }
            "initialize" if !lifecycle.modern => {
                parse::<InitializeRequestParams>(Value::Object(params)).map(|params| {
                    let mut info = self.negotiate_initialize(&params);
                    // No session: no stream to be told of list changes on.
                    if let Some(tools) = &mut info.capabilities.tools {
                        tools.list_changed = None;
                    }
                    ServerResult::Initialize(info)
                })
            }
            "ping" if !lifecycle.modern => Ok(ServerResult::empty(())),
            "tools/list" => Ok(ServerResult::ListTools(
                self.tool_list(incoming.profile, caller),
            )),
            // It would last for this request only: nothing is kept.
            "logging/setLevel" if !per_request(Some(&lifecycle.version)) => {
                parse::<SetLevelRequestParams>(Value::Object(params))
                    .map(|_| ServerResult::empty(()))
            }
            "server/discover" => {
                let versions = self.supported_protocol_versions().to_vec();
                let discovered = DiscoverResult::from_server_info(versions, self.get_info());
                Ok(ServerResult::Discover(discovered))
            }
            task @ ("tasks/get" | "tasks/update" | "tasks/cancel") => {
                let kind = match task {
                    "tasks/get" => TaskMethod::Get,
                    "tasks/update" => TaskMethod::Update,
                    _ => TaskMethod::Cancel,
                };
                match parse::<TaskParams>(Value::Object(params)) {
                    Ok(task) => {
                        // A client of a session's revision declared nothing
                        // to this request.
                        let checked = lifecycle.negotiated.then_some(&lifecycle.capabilities);
                        self.task(kind, &task.task_id, task.input_responses, checked, caller)
                            .await
                    }
                    Err(error) => Err(error),
                }
            }
            _ => Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                inbound::quote(&method),
                None,
            )),
        };
        reply(&id, answered, &lifecycle)
    }
}

/// The answer to the request `id`, as plain JSON: with the HTTP status its
/// error names when the request named its revision in `_meta`, else `200`.
fn reply(
    id: &RequestId,
    answered: Result<ServerResult, McpError>,
    lifecycle: &Lifecycle,
) -> Response<Body> {
    let (status, message) = direct::reply(id, answered);
    let status = if lifecycle.negotiated {
        status
    } else {
        StatusCode::OK
    };
    direct::json(status, &message)
}

/// `202`: a notification taken.
fn accepted() -> Response<Body> {
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::export::direct::tests::headers;
    use hyper::header::HeaderValue;
    use serde_json::json;

    fn message(value: Value) -> Message {
        serde_json::from_value(value).expect("a message")
    }

    fn call(arguments: Value) -> Message {
        message(json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {
                "name": "regional", "arguments": arguments,
                "_meta": {VERSION_KEY: "2026-07-28", CAPABILITIES_KEY: {}}
            }
        }))
    }

    fn regional() -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "zone": {"type": "object", "properties": {"id": {"type": "integer", "x-mcp-header": "Zone"}}}
            }
        }))
    }

    fn code(refused: Result<(), Refused>) -> i32 {
        match refused {
            Err(Refused::Rpc(_, error)) => error.code.0,
            other => panic!("not a JSON-RPC refusal: {other:?}"),
        }
    }

    const MODERN: [(&str, &str); 3] = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "regional"),
    ];

    #[test]
    fn param_headers_must_say_what_the_annotated_arguments_do() {
        let body = call(json!({"region": "eu-west", "zone": {"id": 3}}));
        let mut good = headers(&MODERN);
        good.insert("mcp-param-region", HeaderValue::from_static("eu-west"));
        good.insert("mcp-param-zone", HeaderValue::from_static("3"));
        assert!(check(&good, &body, |_| regional()).is_ok());
        // Base64-wrapped values are unwrapped.
        let mut wrapped = good.clone();
        wrapped.insert(
            "mcp-param-region",
            HeaderValue::from_static("=?base64?ZXUtd2VzdA==?="),
        );
        assert!(check(&wrapped, &body, |_| regional()).is_ok());
        // Missing, different, repeated, or not Base64.
        let mut missing = good.clone();
        missing.remove("mcp-param-zone");
        assert_eq!(code(check(&missing, &body, |_| regional())), -32020);
        let mut wrong = good.clone();
        wrong.insert("mcp-param-region", HeaderValue::from_static("us-east"));
        assert_eq!(code(check(&wrong, &body, |_| regional())), -32020);
        let mut twice = good.clone();
        twice.append("mcp-param-region", HeaderValue::from_static("eu-west"));
        assert_eq!(code(check(&twice, &body, |_| regional())), -32020);
        let mut broken = good.clone();
        broken.insert(
            "mcp-param-region",
            HeaderValue::from_static("=?base64?!!?="),
        );
        assert_eq!(code(check(&broken, &body, |_| regional())), -32020);
        // A header for an argument the body does not have.
        let absent = call(json!({"zone": {"id": 3}}));
        assert_eq!(code(check(&good, &absent, |_| regional())), -32020);
        // A tool whose schema the client was shown without annotations.
        assert!(check(&headers(&MODERN), &body, |_| None).is_ok());
    }

    #[test]
    fn method_name_and_revision_must_agree_with_the_body() {
        let body = call(json!({}));
        for skip in ["mcp-method", "mcp-name"] {
            let mut partial = headers(&MODERN);
            partial.remove(skip);
            assert_eq!(code(check(&partial, &body, |_| None)), -32020, "{skip}");
        }
        let mut other = headers(&MODERN);
        other.insert("mcp-name", HeaderValue::from_static("other"));
        assert_eq!(code(check(&other, &body, |_| None)), -32020);
        let mut older = headers(&MODERN);
        older.insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2025-11-25"),
        );
        assert_eq!(code(check(&older, &body, |_| None)), -32020);
        // No header at all for a request naming its revision.
        assert_eq!(code(check(&HeaderMap::new(), &body, |_| None)), -32020);
        // A 2026-07-28 header and no `_meta` revision.
        let bare = message(json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}
        }));
        let mut list = headers(&MODERN);
        list.insert("mcp-method", HeaderValue::from_static("tools/list"));
        assert_eq!(code(check(&list, &bare, |_| None)), -32602);
    }

    #[test]
    fn a_revision_header_the_server_does_not_know_is_refused_unless_meta_names_one() {
        let bare = message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let unknown = headers(&[("mcp-protocol-version", "1999-01-01")]);
        assert!(matches!(
            check(&unknown, &bare, |_| None),
            Err(Refused::Text(text)) if text.contains("1999-01-01")
        ));
        assert!(check(&HeaderMap::new(), &bare, |_| None).is_ok());
        let known = headers(&[("mcp-protocol-version", "2025-06-18")]);
        assert!(check(&known, &bare, |_| None).is_ok());
    }

    #[test]
    fn an_initialize_header_must_name_what_its_params_ask() {
        let init = message(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }));
        assert!(check(&HeaderMap::new(), &init, |_| None).is_ok());
        let same = headers(&[("mcp-protocol-version", "2025-06-18")]);
        assert!(check(&same, &init, |_| None).is_ok());
        let other = headers(&[("mcp-protocol-version", "2025-11-25")]);
        assert_eq!(code(check(&other, &init, |_| None)), -32600);
        let method = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ]);
        let modern = message(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2026-07-28", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }));
        assert_eq!(code(check(&method, &modern, |_| None)), -32020);
        // A 2026-07-28 client's `initialize` (no such method in its
        // revision) is checked as any of its requests, and not found later.
        let removed = message(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"_meta": {VERSION_KEY: "2026-07-28", CAPABILITIES_KEY: {}}}
        }));
        let headers = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "initialize"),
        ]);
        assert!(check(&headers, &removed, |_| None).is_ok());
    }

    #[test]
    fn notifications_and_answers_need_no_revision_in_meta() {
        let note = message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let old = headers(&[("mcp-protocol-version", "2025-06-18")]);
        assert!(check(&old, &note, |_| None).is_ok());
        let answer = message(json!({"jsonrpc": "2.0", "id": 4, "result": {}}));
        assert!(check(&headers(&MODERN), &answer, |_| None).is_ok());
    }
}

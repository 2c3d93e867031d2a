//! Rich results: [`Content`] blocks (text, images, audio, resources), alone,
//! as a list, or beside a structured value ([`Rich`]) (docs/protocol.md §6.12).
//!
//! A tool returning `Content`, `Vec<Content>` or `Rich<T>` gets a `TOOL_DONE`
//! whose `result` is `{"content": [...]}` (with `"structured": {...}` for
//! `Rich<T>`), each block shaped as in MCP, and the MCP export hands the
//! blocks to MCP clients one to one. A tool returning any other value keeps
//! the plain `result` it always had.
//!
//! ```
//! use haip::{Content, Rich};
//!
//! /// A chart of the week's sales, and the numbers behind it.
//! #[haip::haip_tool]
//! async fn sales_chart() -> Rich<Vec<u32>> {
//!     let png: Vec<u8> = vec![0x89, b'P', b'N', b'G']; // a real PNG in real life
//!     Rich::new(vec![12, 15, 9])
//!         .with(Content::text("Sales this week"))
//!         .with(Content::image(&png, "image/png"))
//! }
//! ```

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One content block of a tool's result (docs/protocol.md §6.12), shaped as an MCP
/// content block: `{"type": "text", "text": ...}`, `{"type": "image", "data":
/// <base64>, "mimeType": ...}`, and so on.
///
/// Build blocks with the constructors ([`Content::text`], [`Content::image`],
/// [`Content::audio`], [`Content::resource_text`], [`Content::resource_blob`],
/// [`Content::link`]); binary data is base64-encoded for you.
///
/// ```
/// use haip::Content;
///
/// let block = Content::image(&[1, 2, 3], "image/png");
/// assert_eq!(
///     serde_json::to_value(&block).unwrap(),
///     serde_json::json!({"type": "image", "data": "AQID", "mimeType": "image/png"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// The image bytes, base64.
        data: String,
        /// Its MIME type, e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio.
    Audio {
        /// The audio bytes, base64.
        data: String,
        /// Its MIME type, e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A resource, embedded: its contents travel with the result.
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
    /// A link to a resource the client can fetch.
    ResourceLink {
        /// Its URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its MIME type.
        #[serde(default, rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// The resource inside [`Content::Resource`]: a URI and its contents, as text
/// or as base64 bytes (`blob`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddedResource {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(default, rename = "mimeType", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its contents as text (set this or `blob`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its contents as base64 bytes (set this or `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Content {
        Content::Text { text: text.into() }
    }

    /// An image block from its bytes (base64-encoded here) and MIME type.
    pub fn image(bytes: impl AsRef<[u8]>, mime_type: impl Into<String>) -> Content {
        Content::Image {
            data: BASE64.encode(bytes),
            mime_type: mime_type.into(),
        }
    }

    /// An audio block from its bytes (base64-encoded here) and MIME type.
    pub fn audio(bytes: impl AsRef<[u8]>, mime_type: impl Into<String>) -> Content {
        Content::Audio {
            data: BASE64.encode(bytes),
            mime_type: mime_type.into(),
        }
    }

    /// An embedded text resource.
    pub fn resource_text(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Content {
        Content::Resource {
            resource: EmbeddedResource {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: Some(text.into()),
                blob: None,
            },
        }
    }

    /// An embedded binary resource (its bytes base64-encoded here).
    pub fn resource_blob(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        bytes: impl AsRef<[u8]>,
    ) -> Content {
        Content::Resource {
            resource: EmbeddedResource {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: None,
                blob: Some(BASE64.encode(bytes)),
            },
        }
    }

    /// A link to a resource.
    pub fn link(uri: impl Into<String>, name: impl Into<String>) -> Content {
        Content::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            description: None,
            mime_type: None,
        }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Content::Text { text } => Some(text),
            _ => None,
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Content {
        Content::text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Content {
        Content::text(text)
    }
}

/// A structured value with content blocks beside it: the result is
/// `{"content": [...], "structured": <value>}` (docs/protocol.md §6.12), and an MCP
/// client gets the blocks as `content` and the value as `structuredContent`.
///
/// ```
/// use haip::{Content, Rich};
///
/// let rich = Rich::new(serde_json::json!({"total": 3})).with(Content::text("3 items"));
/// assert_eq!(
///     serde_json::to_value(&rich).unwrap(),
///     serde_json::json!({"content": [{"type": "text", "text": "3 items"}], "structured": {"total": 3}})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rich<T> {
    /// The blocks, in order.
    pub content: Vec<Content>,
    /// The structured value.
    pub structured: T,
}

impl<T> Rich<T> {
    /// The value with no blocks yet.
    pub fn new(structured: T) -> Rich<T> {
        Rich {
            content: Vec::new(),
            structured,
        }
    }

    /// Adds a block after the others.
    pub fn with(mut self, block: impl Into<Content>) -> Rich<T> {
        self.content.push(block.into());
        self
    }
}

/// The keyword marking the schemas of [`Content`] and [`Rich`], so that a
/// tool's result type can be recognised from its schema (and removed from
/// what clients see).
const MARK: &str = "x-haip-content";

impl JsonSchema for Content {
    fn schema_name() -> Cow<'static, str> {
        "Content".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "haip::Content".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut schema = block_schema();
        schema.insert(MARK.into(), "block".into());
        schema
    }
}

impl<T: JsonSchema> JsonSchema for Rich<T> {
    fn schema_name() -> Cow<'static, str> {
        format!("Rich_{}", T::schema_name()).into()
    }

    fn schema_id() -> Cow<'static, str> {
        format!("haip::Rich<{}>", T::schema_id()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let structured = generator.subschema_for::<T>();
        let mut schema = json_schema!({
            "type": "object",
            "properties": {
                "content": {"type": "array", "items": block_schema()},
                "structured": structured,
            },
            "required": ["content", "structured"],
        });
        schema.insert(MARK.into(), "rich".into());
        schema
    }
}

/// The schema of one block, unmarked.
fn block_schema() -> Schema {
    let mime = json_schema!({"type": "string"});
    json_schema!({
        "type": "object",
        "oneOf": [
            {"properties": {"type": {"const": "text"}, "text": {"type": "string"}}, "required": ["type", "text"]},
            {"properties": {"type": {"const": "image"}, "data": {"type": "string", "contentEncoding": "base64"}, "mimeType": mime}, "required": ["type", "data", "mimeType"]},
            {"properties": {"type": {"const": "audio"}, "data": {"type": "string", "contentEncoding": "base64"}, "mimeType": mime}, "required": ["type", "data", "mimeType"]},
            {"properties": {"type": {"const": "resource"}, "resource": {
                "type": "object",
                "properties": {"uri": {"type": "string"}, "mimeType": mime, "text": {"type": "string"}, "blob": {"type": "string", "contentEncoding": "base64"}},
                "required": ["uri"],
            }}, "required": ["type", "resource"]},
            {"properties": {"type": {"const": "resource_link"}, "uri": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"}, "mimeType": mime}, "required": ["type", "uri", "name"]},
        ],
    })
}

/// How a tool's result relates to content blocks, read from its output schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Shape {
    /// A plain value: the result as returned.
    #[default]
    Plain,
    /// One [`Content`]: the result is `{"content": [it]}`.
    Block,
    /// `Vec<Content>`: the result is `{"content": it}`.
    List,
    /// [`Rich<T>`]: `{"content": [...], "structured": ...}` as returned.
    Rich,
}

impl Shape {
    /// The shape an output schema describes, and the schema clients see:
    /// the result's wire shape, without haip's marks.
    pub(crate) fn of(schema: Option<Value>) -> (Shape, Option<Value>) {
        let Some(mut schema) = schema else {
            return (Shape::Plain, None);
        };
        let mark = |s: &Value| s.get(MARK).and_then(Value::as_str).map(str::to_owned);
        let shape = match mark(&schema).as_deref() {
            Some("block") => Shape::Block,
            Some("rich") => Shape::Rich,
            _ if schema.get("type").and_then(Value::as_str) == Some("array")
                && schema.get("items").and_then(mark).as_deref() == Some("block") =>
            {
                Shape::List
            }
            _ => Shape::Plain,
        };
        unmark(&mut schema);
        let schema = match shape {
            Shape::Plain | Shape::Rich => schema,
            Shape::Block | Shape::List => {
                let items = match shape {
                    Shape::Block => schema,
                    _ => schema.get_mut("items").map(Value::take).unwrap_or_default(),
                };
                serde_json::json!({
                    "type": "object",
                    "properties": {"content": {"type": "array", "items": items}},
                    "required": ["content"],
                })
            }
        };
        (shape, Some(schema))
    }

    /// The result a returned value becomes.
    pub(crate) fn wrap(self, value: Value) -> Value {
        match self {
            Shape::Plain | Shape::Rich => value,
            Shape::Block => wrap_content(Value::Array(vec![value])),
            Shape::List => wrap_content(value),
        }
    }

    /// Whether results carry content blocks.
    #[cfg(feature = "mcp")]
    pub(crate) fn has_content(self) -> bool {
        self != Shape::Plain
    }
}

fn wrap_content(blocks: Value) -> Value {
    let mut map = Map::new();
    map.insert("content".into(), blocks);
    Value::Object(map)
}

/// Removes haip's marks from a schema, everywhere in it.
fn unmark(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove(MARK);
            map.values_mut().for_each(unmark);
        }
        Value::Array(items) => items.iter_mut().for_each(unmark),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::output_schema_for;
    use serde_json::json;

    #[test]
    fn blocks_have_the_mcp_shape() {
        let cases = [
            (Content::text("hi"), json!({"type": "text", "text": "hi"})),
            (
                Content::audio(b"RIFF", "audio/wav"),
                json!({"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}),
            ),
            (
                Content::resource_text("test://r", "text/plain", "body"),
                json!({"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "body"}}),
            ),
            (
                Content::resource_blob("test://b", "application/octet-stream", [0xff]),
                json!({"type": "resource", "resource": {"uri": "test://b", "mimeType": "application/octet-stream", "blob": "/w=="}}),
            ),
            (
                Content::link("file:///a.txt", "a.txt"),
                json!({"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"}),
            ),
        ];
        for (block, expected) in cases {
            let value = serde_json::to_value(&block).unwrap();
            assert_eq!(value, expected);
            let back: Content = serde_json::from_value(value).unwrap();
            assert_eq!(back, block);
        }
    }

    #[test]
    fn result_types_are_recognised_from_their_schemas() {
        let (shape, schema) = Shape::of(output_schema_for::<Content>());
        assert_eq!(shape, Shape::Block);
        let schema = schema.unwrap();
        assert_eq!(schema["required"], json!(["content"]));
        assert!(!schema.to_string().contains(MARK), "{schema}");

        let (shape, schema) = Shape::of(output_schema_for::<Vec<Content>>());
        assert_eq!(shape, Shape::List);
        assert_eq!(schema.unwrap()["properties"]["content"]["type"], "array");

        let (shape, schema) = Shape::of(output_schema_for::<Rich<u32>>());
        assert_eq!(shape, Shape::Rich);
        let schema = schema.unwrap();
        assert_eq!(schema["properties"]["structured"]["type"], "integer");
        assert!(!schema.to_string().contains(MARK), "{schema}");

        assert_eq!(
            Shape::of(output_schema_for::<Vec<String>>()).0,
            Shape::Plain
        );
        assert_eq!(Shape::of(None), (Shape::Plain, None));
    }

    #[test]
    fn returned_values_become_content_results() {
        let block = serde_json::to_value(Content::text("a")).unwrap();
        assert_eq!(
            Shape::Block.wrap(block.clone()),
            json!({"content": [{"type": "text", "text": "a"}]})
        );
        assert_eq!(
            Shape::List.wrap(json!([block])),
            json!({"content": [{"type": "text", "text": "a"}]})
        );
        assert_eq!(Shape::Plain.wrap(json!(5)), json!(5));
    }

    #[test]
    fn wrapped_results_satisfy_the_advertised_schema() {
        for (shape_schema, value) in [
            (
                output_schema_for::<Vec<Content>>(),
                json!([{"type": "text", "text": "a"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}]),
            ),
            (
                output_schema_for::<Content>(),
                json!({"type": "resource", "resource": {"uri": "u", "text": "t"}}),
            ),
        ] {
            let (shape, schema) = Shape::of(shape_schema);
            let compiled = crate::schema::CompiledSchema::compile(&schema.unwrap()).unwrap();
            assert!(compiled.check(&shape.wrap(value), 10).is_empty());
        }
    }
}

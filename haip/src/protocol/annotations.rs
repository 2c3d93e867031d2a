//! What a tool says about itself beside its name and schemas (docs/protocol.md §6.13,
//! MCP's tool annotations): behaviour hints and icons. The same types serve
//! the tool itself ([`Tool::annotations`](crate::Tool::annotations)), the
//! `TOOL_LIST` and `TOOL_SCHEMA` payloads and the Rust client; decoding is
//! lenient (a value of the wrong type is absent), encoding writes only what
//! is declared.

use serde::Serialize;
use serde_json::Value;

/// Hints about how a tool behaves, for the people and programs that call it
/// (docs/protocol.md §6.13; MCP's `ToolAnnotations`, with MCP's meaning).
///
/// Every hint is optional, and an absent one has MCP's default: a tool is
/// assumed **not** read-only, destructive, **not** idempotent and open-world
/// unless it says otherwise. Only what a tool declares is sent; a tool that
/// declares nothing sends no `annotations` at all. They are hints: a client
/// should not trust them from a server it does not trust.
///
/// ```
/// use haip::{Tool, ToolAnnotations};
/// use serde_json::json;
///
/// let delete = Tool::builder("delete_repo")
///     .title("Delete a repository")
///     .annotations(ToolAnnotations::new().destructive(true).idempotent(true))
///     .handler(|_, _| async { Ok(json!({"deleted": true})) })
///     .build()
///     .unwrap();
/// assert_eq!(delete.annotations().destructive_hint, Some(true));
/// assert_eq!(delete.annotations().read_only_hint, None); // not declared
/// assert!(delete.annotations().declares_destructive());
/// assert_eq!(
///     serde_json::to_value(delete.annotations()).unwrap(),
///     json!({"destructiveHint": true, "idempotentHint": true})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// `readOnlyHint`: the tool does not modify its environment (MCP's
    /// default: `false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`: the tool may destroy or overwrite things; `false`
    /// means it only adds. Meaningful only when the tool is not read-only
    /// (MCP's default: `true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`: calling it again with the same params has no further
    /// effect. Meaningful only when the tool is not read-only (MCP's default:
    /// `false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`: the tool reaches things outside the server, such as
    /// the web (`false`: a closed domain, such as its own memory) (MCP's
    /// default: `true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// No hints: every one at MCP's default.
    pub fn new() -> ToolAnnotations {
        ToolAnnotations::default()
    }

    /// Declares `readOnlyHint`.
    pub fn read_only(mut self, read_only: bool) -> ToolAnnotations {
        self.read_only_hint = Some(read_only);
        self
    }

    /// Declares `destructiveHint`.
    pub fn destructive(mut self, destructive: bool) -> ToolAnnotations {
        self.destructive_hint = Some(destructive);
        self
    }

    /// Declares `idempotentHint`.
    pub fn idempotent(mut self, idempotent: bool) -> ToolAnnotations {
        self.idempotent_hint = Some(idempotent);
        self
    }

    /// Declares `openWorldHint`.
    pub fn open_world(mut self, open_world: bool) -> ToolAnnotations {
        self.open_world_hint = Some(open_world);
        self
    }

    /// Whether no hint is declared (and `annotations` is left out).
    pub fn is_empty(&self) -> bool {
        *self == ToolAnnotations::default()
    }

    /// Whether the tool declares itself destructive: `destructiveHint` is
    /// `true` and `readOnlyHint` is not (MCP: `destructiveHint` means nothing
    /// for a read-only tool). What `haip call` and the inspector ask a person
    /// to confirm before calling. A tool that declares nothing is not asked
    /// about, although MCP's default for it is destructive: otherwise nearly
    /// every call would be.
    pub fn declares_destructive(&self) -> bool {
        self.destructive_hint == Some(true) && self.read_only_hint != Some(true)
    }

    /// The hints of a JSON object, leniently: a hint that is not a boolean,
    /// or a value that is not an object, counts as absent.
    pub(crate) fn from_value(value: Option<Value>) -> ToolAnnotations {
        let Some(Value::Object(map)) = value else {
            return ToolAnnotations::default();
        };
        let hint = |key: &str| map.get(key).and_then(Value::as_bool);
        ToolAnnotations {
            read_only_hint: hint("readOnlyHint"),
            destructive_hint: hint("destructiveHint"),
            idempotent_hint: hint("idempotentHint"),
            open_world_hint: hint("openWorldHint"),
        }
    }
}

/// An icon for a tool (docs/protocol.md §6.13; MCP's `Icon`): an image a client may
/// show beside the tool's name.
///
/// ```
/// use haip::{Icon, IconTheme};
/// use serde_json::json;
///
/// let icon = Icon::new("https://example.com/trash.svg")
///     .with_mime_type("image/svg+xml")
///     .with_sizes(["any"])
///     .with_theme(IconTheme::Dark);
/// assert_eq!(
///     serde_json::to_value(&icon).unwrap(),
///     json!({"src": "https://example.com/trash.svg", "mimeType": "image/svg+xml",
///            "sizes": ["any"], "theme": "dark"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Icon {
    /// `src`: where the image is, an `https:` URL or a `data:` URL.
    pub src: String,
    /// `mimeType`, when the URL's own type is missing or too vague.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// `sizes`: each `"WxH"` (`"48x48"`), or `"any"` for a scalable image;
    /// empty when not said, and then not written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// `theme`: the background it is drawn for; any when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theme: Option<IconTheme>,
}

impl Icon {
    /// An icon at `src`, with nothing else said about it.
    pub fn new(src: impl Into<String>) -> Icon {
        Icon {
            src: src.into(),
            mime_type: None,
            sizes: Vec::new(),
            theme: None,
        }
    }

    /// Sets `mimeType` (`"image/png"`, `"image/svg+xml"`).
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Icon {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets `sizes` (`["48x48", "96x96"]`, or `["any"]`).
    pub fn with_sizes<I>(mut self, sizes: I) -> Icon
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.sizes = sizes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `theme`.
    pub fn with_theme(mut self, theme: IconTheme) -> Icon {
        self.theme = Some(theme);
        self
    }

    /// The icons of a JSON array, leniently: an element without a string
    /// `src` is dropped, a field of the wrong type is absent, and `sizes`
    /// may also be one space-separated string (as in HTML and earlier MCP
    /// drafts).
    pub(crate) fn list_from_value(value: Option<Value>) -> Vec<Icon> {
        let Some(Value::Array(items)) = value else {
            return Vec::new();
        };
        items
            .into_iter()
            .filter_map(|item| {
                let Value::Object(mut map) = item else {
                    return None;
                };
                let Some(Value::String(src)) = map.remove("src") else {
                    return None;
                };
                let sizes = match map.remove("sizes") {
                    Some(Value::Array(sizes)) => sizes
                        .into_iter()
                        .filter_map(|s| match s {
                            Value::String(s) => Some(s),
                            _ => None,
                        })
                        .collect(),
                    Some(Value::String(sizes)) => {
                        sizes.split_whitespace().map(str::to_owned).collect()
                    }
                    _ => Vec::new(),
                };
                Some(Icon {
                    src,
                    mime_type: match map.remove("mimeType") {
                        Some(Value::String(m)) => Some(m),
                        _ => None,
                    },
                    sizes,
                    theme: map
                        .get("theme")
                        .and_then(Value::as_str)
                        .and_then(IconTheme::parse),
                })
            })
            .collect()
    }
}

/// The background an [`Icon`] is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum IconTheme {
    /// `"light"`: for a light background.
    Light,
    /// `"dark"`: for a dark background.
    Dark,
}

impl IconTheme {
    /// Its name on the wire: `"light"` or `"dark"`.
    pub fn as_str(self) -> &'static str {
        match self {
            IconTheme::Light => "light",
            IconTheme::Dark => "dark",
        }
    }

    /// The theme of a wire name; `None` for any other.
    pub(crate) fn parse(name: &str) -> Option<IconTheme> {
        match name {
            "light" => Some(IconTheme::Light),
            "dark" => Some(IconTheme::Dark),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_declared_hints_are_written() {
        assert!(ToolAnnotations::new().is_empty());
        assert_eq!(
            serde_json::to_value(ToolAnnotations::new()).unwrap(),
            json!({})
        );
        let all = ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true);
        assert!(!all.is_empty());
        assert_eq!(
            serde_json::to_value(&all).unwrap(),
            json!({"readOnlyHint": false, "destructiveHint": true,
                   "idempotentHint": false, "openWorldHint": true})
        );
        assert_eq!(
            ToolAnnotations::from_value(Some(serde_json::to_value(&all).unwrap())),
            all
        );
    }

    #[test]
    fn destructive_only_when_declared_and_not_read_only() {
        assert!(!ToolAnnotations::new().declares_destructive());
        assert!(
            ToolAnnotations::new()
                .destructive(true)
                .declares_destructive()
        );
        assert!(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .declares_destructive()
        );
        assert!(
            !ToolAnnotations::new()
                .read_only(true)
                .destructive(true)
                .declares_destructive()
        );
        assert!(
            !ToolAnnotations::new()
                .destructive(false)
                .declares_destructive()
        );
    }

    #[test]
    fn decoding_is_lenient() {
        assert!(ToolAnnotations::from_value(None).is_empty());
        assert!(ToolAnnotations::from_value(Some(json!("yes"))).is_empty());
        let a = ToolAnnotations::from_value(Some(json!({
            "readOnlyHint": "true", "destructiveHint": true, "title": "ignored"
        })));
        assert_eq!(a, ToolAnnotations::new().destructive(true));

        assert!(Icon::list_from_value(Some(json!({"src": "x"}))).is_empty());
        let icons = Icon::list_from_value(Some(json!([
            {"src": "a.png", "mimeType": 5, "sizes": ["48x48", 7], "theme": "dim"},
            {"mimeType": "image/png"},
            "b.png",
            {"src": "c.svg", "mimeType": "image/svg+xml", "sizes": "16x16 32x32", "theme": "light"}
        ])));
        assert_eq!(
            icons,
            [
                Icon::new("a.png").with_sizes(["48x48"]),
                Icon::new("c.svg")
                    .with_mime_type("image/svg+xml")
                    .with_sizes(["16x16", "32x32"])
                    .with_theme(IconTheme::Light),
            ]
        );
        assert_eq!(
            serde_json::to_value(Icon::new("a.png")).unwrap(),
            json!({"src": "a.png"})
        );
    }
}

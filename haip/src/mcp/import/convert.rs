//! An MCP tool as a haip tool: its name (under the import's prefix),
//! description, schemas, title, hints and icons, and a handler that forwards
//! its calls (`forward.rs`). The title, hints and icons go the other way in
//! the MCP export (`export/render.rs`): the same fields both ways.

use std::sync::Arc;

use serde_json::Value;

use crate::Context;
use crate::mcp::McpContent;
use crate::protocol::{Icon, IconTheme, ToolAnnotations};
use crate::tool::{Tool, ToolError};

use super::builder::McpImport;
use super::forward::{Upstream, call};

/// Builds the haip tool for one MCP tool.
pub(super) fn imported_tool(
    import: &McpImport,
    link: &Arc<Upstream>,
    remote: rmcp::model::Tool,
) -> Result<Tool, String> {
    let remote_name = remote.name.to_string();
    let name = format!("{}{}", import.prefix, remote_name);
    let description = remote
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map(str::to_owned)
        .or_else(|| remote.title.clone())
        .unwrap_or_else(|| format!("`{remote_name}` from the MCP server {}", link.label));
    let mut builder = Tool::builder(name.clone())
        .mark(McpContent)
        .description(description)
        .input_schema(Value::Object((*remote.input_schema).clone()))
        .annotations(annotations_of(&remote));
    if let Some(title) = title_of(&remote) {
        builder = builder.title(title);
    }
    for icon in remote.icons.iter().flatten() {
        builder = builder.icon(icon_of(icon));
    }
    if let Some(output) = &remote.output_schema {
        builder = builder.output_schema(Value::Object((**output).clone()));
    }
    let link = Arc::clone(link);
    let has_output_schema = remote.output_schema.is_some();
    builder
        .handler(move |params: Value, ctx: Context| {
            let link = Arc::clone(&link);
            let remote_name = remote_name.clone();
            async move {
                // The call's trace goes on to the server called (in the
                // request's `_meta`), under a span of this call to it.
                let (upstream, trace) = ctx.trace().upstream(&remote_name, &link.label);
                let result = call(&link, remote_name, params, ctx, has_output_schema, trace).await;
                upstream.end(result.as_ref().err().map(ToolError::message));
                result
            }
        })
        .build()
        .map_err(|e| format!("MCP tool `{name}`: {e}"))
}

/// An MCP tool's title: `title`, else the older `annotations.title` (MCP's
/// order for a display name).
fn title_of(remote: &rmcp::model::Tool) -> Option<String> {
    remote
        .title
        .clone()
        .or_else(|| remote.annotations.as_ref()?.title.clone())
}

/// An MCP tool's hints, as declared (docs/protocol.md §6.13 keeps MCP's meaning).
fn annotations_of(remote: &rmcp::model::Tool) -> ToolAnnotations {
    let Some(a) = &remote.annotations else {
        return ToolAnnotations::default();
    };
    ToolAnnotations {
        read_only_hint: a.read_only_hint,
        destructive_hint: a.destructive_hint,
        idempotent_hint: a.idempotent_hint,
        open_world_hint: a.open_world_hint,
    }
}

/// An MCP icon as ours.
fn icon_of(icon: &rmcp::model::Icon) -> Icon {
    Icon {
        src: icon.src.clone(),
        mime_type: icon.mime_type.clone(),
        sizes: icon.sizes.clone().unwrap_or_default(),
        theme: match icon.theme {
            Some(rmcp::model::IconTheme::Light) => Some(IconTheme::Light),
            Some(rmcp::model::IconTheme::Dark) => Some(IconTheme::Dark),
            // A theme a later MCP names: for any background, as far as we know.
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use crate::mcp::export::render::set_title_hints_icons;

    /// What the MCP export sets on a tool beside its name, description and
    /// schemas (its `mcp_tool` calls the same code).
    fn exported(tool: &Tool) -> rmcp::model::Tool {
        let mut out = crate::mcp::model::Tool::new(
            tool.name().to_owned(),
            String::new(),
            Arc::new(Map::new()),
        );
        set_title_hints_icons(&mut out, tool);
        // As a client reads it off the wire.
        serde_json::from_value(serde_json::to_value(&out).unwrap()).unwrap()
    }

    #[test]
    fn titles_hints_and_icons_survive_export_and_import() {
        let noop = |_: Value, _: Context| async { Ok(Value::Null) };
        let declared = Tool::builder("wipe")
            .title("Wipe the disk")
            .annotations(ToolAnnotations::new().destructive(true).open_world(false))
            .icon(
                Icon::new("https://example.com/wipe.svg")
                    .with_mime_type("image/svg+xml")
                    .with_sizes(["any"])
                    .with_theme(IconTheme::Dark),
            )
            .icon(Icon::new("data:image/png;base64,AAAA"))
            .handler(noop)
            .build()
            .unwrap();
        let remote = exported(&declared);
        assert_eq!(
            serde_json::to_value(&remote).unwrap(),
            json!({
                "name": "wipe", "description": "", "inputSchema": {},
                "title": "Wipe the disk",
                "annotations": {"destructiveHint": true, "openWorldHint": false},
                "icons": [
                    {"src": "https://example.com/wipe.svg", "mimeType": "image/svg+xml",
                     "sizes": ["any"], "theme": "dark"},
                    {"src": "data:image/png;base64,AAAA"}
                ]
            }),
            "MCP's field names, only what was declared"
        );
        assert_eq!(title_of(&remote).as_deref(), declared.title());
        assert_eq!(&annotations_of(&remote), declared.annotations());
        let icons: Vec<Icon> = remote.icons.iter().flatten().map(icon_of).collect();
        assert_eq!(icons, declared.icons());

        // Nothing declared: nothing sent, nothing imported.
        let plain = Tool::builder("plain").handler(noop).build().unwrap();
        let remote = exported(&plain);
        let sent = serde_json::to_value(&remote).unwrap();
        for key in ["title", "annotations", "icons"] {
            assert!(sent.get(key).is_none(), "{key}: {sent}");
        }
        assert_eq!(title_of(&remote), None);
        assert!(annotations_of(&remote).is_empty());

        // The older place for a title is read too.
        let mut old = rmcp::model::Tool::new("old", "", Arc::new(Map::new()));
        old.annotations =
            Some(rmcp::model::ToolAnnotations::with_title("Old style").read_only(true));
        assert_eq!(title_of(&old).as_deref(), Some("Old style"));
        assert_eq!(annotations_of(&old), ToolAnnotations::new().read_only(true));
    }
}

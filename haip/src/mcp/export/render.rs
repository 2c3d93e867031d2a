//! What an MCP client sees of a haip tool and of its results: the tool as
//! `tools/list` shows it (schemas in the request's profile, annotations,
//! icons), and a call's value or failure as a `CallToolResult`.

use std::sync::Arc;

use crate::mcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};

use crate::content::Shape;
use crate::protocol::payload::ToolFailure;
use crate::protocol::{Icon, IconTheme};
use crate::schema::SchemaProfile;
use crate::tool::Tool;

/// A haip tool as an MCP tool, its schemas in `profile` (docs/protocol.md §6.14);
/// `None` when the profile cannot serve it. The output schema is advertised
/// only when it describes an object (MCP's `structuredContent` must be one).
pub(crate) fn mcp_tool(tool: &Tool, profile: SchemaProfile) -> Option<crate::mcp::model::Tool> {
    let input = match tool.advertised_input_schema(profile)? {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut out = crate::mcp::model::Tool::new(
        tool.name().to_owned(),
        tool.description().to_owned(),
        Arc::new(input),
    );
    if let Some(Value::Object(output)) = structured_schema(tool, profile)
        && describes_object(output)
    {
        out.output_schema = Some(Arc::new(output.clone()));
    }
    set_title_hints_icons(&mut out, tool);
    // MCP has no field for tags; `_meta` is where a server says more about
    // a tool, under a key of its own. (HAIP's `TOOL_LIST` has no such place.)
    if !tool.tags().is_empty() {
        let mut meta = crate::mcp::model::MetaObject::new();
        meta.insert(TAGS_META.to_owned(), Value::from(tool.tags()));
        out.meta = Some(meta);
    }
    Some(out)
}

/// The `_meta` key of a tool's tags in `tools/list`.
pub(crate) const TAGS_META: &str = "haip/tags";

/// The schema of a tool's structured results: its output schema, or for a
/// tool returning `Rich<T>`, `T`'s; `None` for content-only results.
fn structured_schema(tool: &Tool, profile: SchemaProfile) -> Option<&Value> {
    let schema = tool.advertised_output_schema(profile)?;
    match tool.shape() {
        Shape::Plain => Some(schema),
        Shape::Rich => schema.get("properties")?.get("structured"),
        Shape::Block | Shape::List => None,
    }
}

fn describes_object(schema: &Map<String, Value>) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Whether `tool` was imported from an MCP server (its results hold content blocks).
pub(super) fn imported(tool: &Tool) -> bool {
    #[cfg(feature = "mcp-import")]
    return tool.mark::<crate::mcp::McpContent>().is_some();
    #[cfg(not(feature = "mcp-import"))]
    {
        let _ = tool;
        false
    }
}

/// A successful result: `structuredContent` when the tool advertises an
/// object output schema, and always the value as text (a string as itself,
/// anything else as JSON) for clients that read only `content`. An imported
/// MCP tool's content blocks pass through as they are.
///
/// With it, when it is known without writing the result out, the most
/// bytes it can take as JSON ([`RESULT_FRAME`] and its parts at their most
/// escaped), so that a small result is not measured byte by byte.
pub(super) fn success_result(tool: &Tool, value: Value) -> (CallToolResult, Option<usize>) {
    if imported(tool)
        && let Some(blocks) = passthrough_blocks(&value)
    {
        return (CallToolResult::success(blocks), None);
    }
    if tool.shape().has_content() {
        return (content_result(value), None);
    }
    // As JSON, the value takes exactly its text's bytes; a string value, at
    // most its bytes each escaped (`\u001f`).
    let (text, value_most) = match &value {
        Value::String(s) => (s.clone(), s.len() * MOST_ESCAPED + 2),
        Value::Null => (String::new(), 4),
        other => {
            let text = other.to_string();
            let len = text.len();
            (text, len)
        }
    };
    let mut most = RESULT_FRAME + text.len() * MOST_ESCAPED + 2;
    let content = if text.is_empty() {
        Vec::new()
    } else {
        vec![ContentBlock::text(text)]
    };
    let mut result = CallToolResult::success(content);
    let structured = matches!(tool.output_schema(), Some(Value::Object(s)) if describes_object(s));
    if structured {
        result.structured_content = Some(value);
        most += value_most;
    }
    (result, Some(most))
}

/// The most bytes one byte of a string takes in JSON (`\u0000`).
const MOST_ESCAPED: usize = 6;
/// More than a plain result takes besides its text and structured value:
/// `{"content":[{"type":"text","text":…}],"structuredContent":…,"isError":false}`.
const RESULT_FRAME: usize = 128;

/// A `{"content": [...], "structured"?: ...}` result (docs/protocol.md §6.12): the
/// blocks one to one, the structured value as `structuredContent`.
fn content_result(mut value: Value) -> CallToolResult {
    let blocks = value
        .get_mut("content")
        .map(Value::take)
        .and_then(|c| serde_json::from_value::<Vec<ContentBlock>>(c).ok())
        .unwrap_or_default();
    let mut result = CallToolResult::success(blocks);
    result.structured_content = value
        .get_mut("structured")
        .map(Value::take)
        .filter(Value::is_object);
    result
}

/// The blocks of an imported tool's `{"content": [...]}` result.
pub(super) fn passthrough_blocks(value: &Value) -> Option<Vec<ContentBlock>> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    serde_json::from_value(map.get("content")?.clone()).ok()
}

/// The violations of a call's params, as a tool error the model can read.
pub(super) fn invalid_params_result(
    tool: &Tool,
    found: &crate::schema::Violations,
) -> CallToolResult {
    let mut text = format!("Invalid params for tool {}:", tool.name());
    for v in &found.listed {
        let path = if v.path.is_empty() {
            "(params)"
        } else {
            &v.path
        };
        text.push_str(&format!("\n- {path}: {}", v.message));
    }
    let unlisted = found.total - found.listed.len();
    if unlisted > 0 || !found.exhaustive {
        let more = if found.exhaustive { "" } else { "at least " };
        text.push_str(&format!("\n(and {more}{unlisted} more)"));
    }
    error_result(text, None)
}

/// A tool error the model can read: the message, then the code and any details.
pub(super) fn failure_result(failure: ToolFailure) -> CallToolResult {
    error_result(
        format!("{} ({})", failure.message, failure.code),
        failure.details,
    )
}

pub(super) fn error_result(message: String, details: Option<Value>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(message)];
    if let Some(details) = details {
        content.push(ContentBlock::text(details.to_string()));
    }
    CallToolResult::error(content)
}

/// A haip tool's title, hints and icons on the MCP tool `out`, as the MCP
/// export shows them (docs/protocol.md §6.13: the same fields one to one;
/// an import reads them back, `import/convert.rs`): the
/// hints only when declared, the icons only when there are any.
pub(crate) fn set_title_hints_icons(out: &mut crate::mcp::model::Tool, tool: &Tool) {
    out.title = tool.title().map(str::to_owned);
    let hints = tool.annotations();
    if !hints.is_empty() {
        // The title goes in `Tool.title`, not the older `annotations.title`.
        out.annotations = Some(crate::mcp::model::ToolAnnotations {
            read_only_hint: hints.read_only_hint,
            destructive_hint: hints.destructive_hint,
            idempotent_hint: hints.idempotent_hint,
            open_world_hint: hints.open_world_hint,
        });
    }
    if !tool.icons().is_empty() {
        out.icons = Some(tool.icons().iter().map(mcp_icon).collect());
    }
}

/// Our icon as an MCP icon.
fn mcp_icon(icon: &Icon) -> crate::mcp::model::Icon {
    crate::mcp::model::Icon {
        src: icon.src.clone(),
        mime_type: icon.mime_type.clone(),
        sizes: (!icon.sizes.is_empty()).then(|| icon.sizes.clone()),
        theme: icon.theme.map(|theme| match theme {
            IconTheme::Light => crate::mcp::model::IconTheme::Light,
            IconTheme::Dark => crate::mcp::model::IconTheme::Dark,
        }),
    }
}

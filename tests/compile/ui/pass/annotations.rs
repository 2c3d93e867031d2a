//! A title, MCP's hints (alone or `= true/false`) and icons (a URL, or every
//! field), reached through `haip::__private` only.
use haip::{IconTheme, haip_tool};

/// Delete a repository.
#[haip_tool(
    title = "Delete a repository",
    destructive,
    idempotent = true,
    open_world = false,
    icon = "https://example.com/trash.svg",
    icon(src = "https://example.com/trash-dark.png", mime_type = "image/png", sizes = ["48x48", "96x96"], theme = "dark"),
)]
async fn delete_repo(name: String) -> bool {
    !name.is_empty()
}

/// Look something up.
#[haip_tool(read_only, destructive = false)]
fn lookup(key: String) -> String {
    key
}

/// Declares nothing.
#[haip_tool]
async fn plain() {}

fn main() {
    let tool = delete_repo::tool();
    assert_eq!(tool.title(), Some("Delete a repository"));
    let hints = tool.annotations();
    assert_eq!(
        (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint),
        (None, Some(true), Some(true), Some(false))
    );
    assert_eq!(tool.icons().len(), 2);
    assert_eq!(tool.icons()[0].src, "https://example.com/trash.svg");
    assert_eq!(tool.icons()[1].mime_type.as_deref(), Some("image/png"));
    assert_eq!(tool.icons()[1].sizes, ["48x48", "96x96"]);
    assert_eq!(tool.icons()[1].theme, Some(IconTheme::Dark));

    let tool = lookup::tool();
    assert_eq!(tool.annotations().read_only_hint, Some(true));
    assert_eq!(tool.annotations().destructive_hint, Some(false));
    assert!(!tool.annotations().declares_destructive());

    let tool = plain::tool();
    assert_eq!(tool.title(), None);
    assert!(tool.annotations().is_empty());
    assert!(tool.icons().is_empty());
}

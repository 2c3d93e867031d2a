//! `scopes = [...]`, alone and beside the other options: the tool requires
//! them, sorted and without duplicates.
use haip::{Context, haip_tool};

/// Close a ticket.
#[haip_tool(scopes = ["tickets:write"])]
async fn close_ticket(id: u64) -> bool {
    id > 0
}

/// Delete a repository.
#[haip_tool(destructive, scopes = ["repos:delete", "repos:admin", "repos:delete"], task)]
async fn delete_repo(ctx: Context, name: String) -> String {
    ctx.progress(100.0);
    name
}

/// Requires nothing.
#[haip_tool(scopes = [])]
fn open() -> bool {
    true
}

fn main() {
    assert_eq!(close_ticket::tool().scopes(), ["tickets:write"]);
    assert_eq!(delete_repo::tool().scopes(), ["repos:admin", "repos:delete"]);
    assert!(open::tool().scopes().is_empty());
}

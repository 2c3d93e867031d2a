//! Scopes that are not OAuth scope tokens, and a `scopes` that is not a list
//! of strings: one error each, at what is wrong.
use haip::haip_tool;

/// Two scopes in one string, an empty one, a quote, and a number.
#[haip_tool(scopes = ["tickets:read tickets:write", "", "say\"hi", 7])]
async fn close_ticket(id: u64) -> bool {
    id > 0
}

/// Not a list.
#[haip_tool(scopes = "tickets:write")]
async fn reopen_ticket(id: u64) -> bool {
    id > 0
}

fn main() {}

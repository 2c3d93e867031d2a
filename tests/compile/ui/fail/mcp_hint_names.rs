// MCP's names for the hints, and near misses: each says which option is meant.
#[haip::haip_tool(readOnlyHint, destructive_hint = false, idempotentHint = true, timout = "5s")]
async fn f() {}

fn main() {}

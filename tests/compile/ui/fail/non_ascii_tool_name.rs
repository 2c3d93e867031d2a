// A Rust identifier may be non-ASCII; a tool name may not (MCP's rule).
#[haip::haip_tool]
async fn café() {}

fn main() {}

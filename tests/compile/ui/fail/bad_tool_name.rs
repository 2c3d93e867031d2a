// A name MCP does not allow: the error names the characters it refuses.
#[haip::haip_tool(name = "bad name!")]
async fn f() {}

fn main() {}

// Without `name = "..."` the tool's name is the function's: here 129
// characters, one more than MCP allows. The error points at the function.
#[haip::haip_tool]
async fn a_tool_name_longer_than_mcp_allows_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx() {}

fn main() {}

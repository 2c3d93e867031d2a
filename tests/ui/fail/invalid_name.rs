#[haip::haip_tool(name = "not a valid name")]
async fn f() {}

fn main() {}

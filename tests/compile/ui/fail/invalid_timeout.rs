#[haip::haip_tool(timeout = "30 parsecs")]
async fn f() {}

fn main() {}

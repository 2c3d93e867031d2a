#[haip::haip_tool(task = "always")]
async fn f() {}

fn main() {}

#[haip::haip_tool(idempotent = "yes")]
async fn f() {}

fn main() {}

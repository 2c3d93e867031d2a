#[haip::haip_tool(timeout = "1s", timeout = "2s")]
async fn f() {}

fn main() {}

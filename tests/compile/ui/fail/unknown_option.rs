#[haip::haip_tool(cache = true)]
async fn f() {}

fn main() {}

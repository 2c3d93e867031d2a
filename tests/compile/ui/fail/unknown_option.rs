#[haip::haip_tool(nmae = "x")]
async fn f() {}

fn main() {}

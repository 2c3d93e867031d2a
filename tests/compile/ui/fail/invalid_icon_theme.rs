#[haip::haip_tool(icon(src = "https://example.com/i.svg", theme = "sepia"))]
async fn f() {}

fn main() {}

#[haip::haip_tool(task = true)]
async fn f() {}

fn main() {}

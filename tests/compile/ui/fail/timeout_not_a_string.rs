// A timeout is a string with its unit.
#[haip::haip_tool(timeout = 30)]
async fn f() {}

#[haip::haip_tool(timeout = std::time::Duration::from_millis(1500))]
async fn g() {}

fn main() {}

//! `crate = "..."` for a renamed dependency.
use haip as my_haip;

/// Echo.
#[my_haip::haip_tool(crate = "my_haip")]
async fn echo(message: String) -> String {
    message
}

fn main() {
    let _ = echo::tool();
}

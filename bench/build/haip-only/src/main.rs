//! One tool, served by `haip::serve()`.

use haip::haip_tool;

/// What `echo` answers.
#[haip::data]
struct Echoed {
    echoed: String,
}

/// Echo back the input.
#[haip_tool]
async fn echo(message: String) -> Echoed {
    Echoed { echoed: message }
}

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip::serve().await
}

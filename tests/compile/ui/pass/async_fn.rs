//! An async fn with documented parameters and a derived result type.
use haip::haip_tool;

#[haip::data]
struct Sum {
    result: f64,
}

/// Add two numbers.
#[haip_tool]
async fn add(
    /// First operand.
    a: f64,
    /// Second operand.
    b: f64,
) -> Sum {
    Sum { result: a + b }
}

fn main() {
    let tool = add::tool();
    assert_eq!(tool.description(), "Add two numbers.");
    assert_eq!(tool.input_schema()["properties"]["a"]["description"], "First operand.");
    // The function stays callable.
    let _future = add(1.0, 2.0);
}

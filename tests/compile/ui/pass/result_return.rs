//! `Result<T, E>` with `ToolError` or any `Display` error; aliases such as `io::Result`.
use haip::{ToolError, haip_tool};

#[haip_tool]
async fn checked(n: i64) -> Result<i64, ToolError> {
    n.checked_mul(2).ok_or_else(|| ToolError::execution("overflow"))
}

#[haip_tool]
fn parse(text: String) -> Result<i64, std::num::ParseIntError> {
    text.parse()
}

#[haip_tool]
async fn read(path: String) -> std::io::Result<String> {
    Ok(path)
}

fn main() {
    assert!(checked::tool().output_schema().is_some());
    assert_eq!(parse("7".into()), Ok(7));
    let _ = read::tool();
}

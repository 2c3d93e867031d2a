//! A `Result` alias under another name is fallible: the output schema is `T`'s.
use haip::haip_tool;

#[derive(Debug)]
struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}

type Res<T> = std::result::Result<T, MyError>;
type Fixed = core::result::Result<String, haip::ToolError>;

#[haip_tool]
async fn count(n: u32) -> Res<u32> {
    if n > 0 { Ok(n) } else { Err(MyError) }
}

#[haip_tool]
fn fixed() -> Fixed {
    Ok(String::new())
}

#[haip_tool]
fn nothing() -> Res<()> {
    Ok(())
}

fn main() {
    let schema = count::tool().output_schema().cloned().unwrap();
    assert_eq!(schema["type"], "integer", "{schema}");
    assert_eq!(fixed::tool().output_schema().unwrap()["type"], "string");
    assert!(nothing::tool().output_schema().is_none());
}

//! A type of your own named `Result` is a plain value, not a `Result`.
#[haip::data]
struct Result<T> {
    ok: bool,
    value: T,
}

#[haip::haip_tool]
async fn wrap(n: u32) -> Result<u32> {
    Result { ok: true, value: n }
}

#[haip::haip_tool]
fn wrap_unit() -> Result<()> {
    Result { ok: true, value: () }
}

fn main() {
    let schema = wrap::tool().output_schema().cloned().unwrap();
    assert_eq!(schema["type"], "object", "{schema}");
    assert!(schema["properties"].get("ok").is_some(), "{schema}");
    assert!(wrap_unit::tool().output_schema().is_some());
}

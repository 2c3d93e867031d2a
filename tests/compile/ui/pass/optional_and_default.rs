//! `Option<T>` and `#[haip(default = ...)]` make parameters optional.
#[haip::haip_tool]
async fn greet(name: Option<String>, #[haip(default = 1)] times: u8) -> String {
    name.unwrap_or_default().repeat(times.into())
}

fn main() {
    let schema = greet::tool().input_schema().clone();
    assert!(schema.get("required").is_none_or(|r| r.as_array().unwrap().is_empty()));
}

//! No return value: no output schema, no result.
#[haip::haip_tool(description = "Does nothing")]
async fn noop() {}

#[haip::haip_tool]
async fn also_noop() -> Result<(), haip::ToolError> {
    Ok(())
}

fn main() {
    assert!(noop::tool().output_schema().is_none());
    assert!(also_noop::tool().output_schema().is_none());
    assert_eq!(noop::tool().description(), "Does nothing");
}

//! A type of your own named `State` is data, not injected state: it is a
//! property of the params, and the server needs no `.state(...)` for it.
use haip::haip_tool;

#[haip::data]
struct State<T> {
    value: T,
}

/// Store a value.
#[haip_tool]
async fn store(state: State<u32>, ctx: haip::Context) -> u32 {
    ctx.progress(100.0);
    state.value
}

fn main() {
    let tool = store::tool();
    let schema = tool.input_schema();
    assert_eq!(schema["required"], haip::__private::serde_json::json!(["state"]));
    assert_eq!(schema["properties"]["state"]["properties"]["value"]["type"], "integer");
    assert!(schema["properties"].get("ctx").is_none());
    assert!(haip::Server::builder().tool(tool).build().is_ok());
}

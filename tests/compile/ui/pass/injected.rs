//! `Context` and `State<T>` are injected, not part of the schema.
use haip::{Context, State, haip_tool};

struct Db {
    name: &'static str,
}

/// Look a key up.
#[haip_tool(name = "db.lookup", timeout = "250ms")]
async fn lookup(key: String, ctx: Context, db: State<Db>) -> String {
    ctx.progress(50.0);
    format!("{}:{key}", db.name)
}

fn main() {
    let tool = lookup::tool();
    assert_eq!(tool.name(), "db.lookup");
    assert_eq!(tool.timeout(), Some(std::time::Duration::from_millis(250)));
    assert_eq!(tool.input_schema()["required"], haip::__private::serde_json::json!(["key"]));
    assert!(haip::Server::builder().state(Db { name: "db" }).tool(tool).build().is_ok());
}

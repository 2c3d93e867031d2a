//! The common forms: docs, Option, defaults, Context, State, Result, sync fns, unit.
use haip::{Context, State, ToolError, haip_tool};

#[haip::data]
struct Sum {
    result: f64,
}

struct Db {
    name: &'static str,
}

/// Add two numbers.
#[haip_tool]
async fn add(
    /// First operand.
    a: f64,
    /// Second operand.
    #[haip(default = 1.0)]
    b: f64,
    /// Optional label.
    label: Option<String>,
) -> Sum {
    let _ = label;
    Sum { result: a + b }
}

/// Uses every injected parameter.
#[haip_tool(name = "db.lookup", timeout = "250ms")]
async fn lookup(key: String, ctx: Context, db: State<Db>) -> Result<String, ToolError> {
    ctx.progress(50.0);
    Ok(format!("{}:{key}", db.name))
}

/// A plain fn runs on the blocking pool; any Display error works.
#[haip_tool]
fn parse(text: String) -> Result<i64, std::num::ParseIntError> {
    text.parse()
}

/// No result at all.
#[haip_tool(description = "Does nothing")]
async fn noop() {}

fn main() {
    let server = haip::Server::builder()
        .state(Db { name: "db" })
        .tool(add::tool())
        .tool(lookup::tool())
        .tool(parse::tool())
        .tool(noop::tool())
        .build();
    assert!(server.is_ok());
    // The functions stay callable.
    let _ = add(1.0, 2.0, None);
    assert_eq!(parse("7".into()), Ok(7));
}

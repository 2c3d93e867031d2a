//! The injected forms are found by type, under any name or path.
use haip::Context as Ctx;

struct Db;

type Shared = haip::State<Db>;

mod renamed {
    pub use haip::Params as Whole;
}

#[haip::data]
struct Query {
    q: String,
}

#[haip::haip_tool]
async fn lookup(key: String, c: Ctx, db: Shared) -> String {
    let _ = (c, db);
    key
}

#[haip::haip_tool]
async fn search(renamed::Whole(query): renamed::Whole<Query>, _ctx: Ctx) -> String {
    query.q
}

fn main() {
    let tool = lookup::tool();
    assert_eq!(tool.input_schema()["required"], haip::__private::serde_json::json!(["key"]));
    assert!(haip::Server::builder().tool(tool.clone()).build().is_err(), "needs Db");
    assert!(haip::Server::builder().state(Db).tool(tool).build().is_ok());
    assert_eq!(search::tool().input_schema()["required"][0], "q");
}

use haip::Params;

// The whole params object still needs `Deserialize` and `JsonSchema`.
struct Query {
    q: String,
}

#[haip::haip_tool]
async fn search(Params(query): Params<Query>) -> String {
    query.q
}

fn main() {}

use haip::Params;

#[haip::data]
struct Query {
    q: String,
}

#[haip::haip_tool]
async fn search(extra: u8, Params(query): Params<Query>) -> String {
    let _ = extra;
    query.q
}

fn main() {}

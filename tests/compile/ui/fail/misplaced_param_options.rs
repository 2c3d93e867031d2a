use haip::{Context, Params, State};

struct Db;

#[haip::data]
struct Query {
    q: String,
}

// Options that only data parameters take, on injected ones; two `Params<T>`.
#[haip::haip_tool]
async fn f(
    #[haip(default = ctx_default())] ctx: Context,
    #[schemars(length(min = 1))] db: State<Db>,
    Params(a): Params<Query>,
    Params(b): Params<Query>,
) {
    let _ = (ctx, db, a, b);
}

fn ctx_default() -> Context {
    unimplemented!()
}

fn main() {}

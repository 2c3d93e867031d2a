//! `Params<T>` makes `T` the whole input object; schemars attributes apply.
use haip::{Params, haip_tool};

#[haip::data]
struct NewUser {
    /// Login name.
    #[schemars(length(min = 3, max = 20))]
    username: String,
    #[schemars(email)]
    email: String,
    tags: Vec<String>,
}

/// Create a user.
#[haip_tool]
async fn create(Params(user): Params<NewUser>) -> Vec<String> {
    let _ = user.email;
    let mut out = user.tags;
    out.push(user.username);
    out
}

fn main() {
    let tool = create::tool();
    assert_eq!(tool.input_schema()["required"][0], "username");
}

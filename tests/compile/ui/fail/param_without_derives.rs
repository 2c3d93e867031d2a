// A new user's first tool: the parameter type has no derives at all.
struct Plain {
    a: u32,
}

#[haip::haip_tool]
async fn f(p: Plain) -> u32 {
    p.a
}

fn main() {}

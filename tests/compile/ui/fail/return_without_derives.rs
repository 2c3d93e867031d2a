// The result type has no derives at all.
struct Out {
    a: u32,
}

#[haip::haip_tool]
async fn f() -> Out {
    Out { a: 1 }
}

fn main() {}

use haip::__private::schemars;

// `JsonSchema` alone is not enough: the result is sent as JSON.
#[derive(schemars::JsonSchema)]
#[schemars(crate = "haip::__private::schemars")]
struct Opaque {
    a: u32,
}

#[haip::haip_tool]
async fn f() -> Opaque {
    Opaque { a: 1 }
}

fn main() {}

struct Opaque;

#[haip::haip_tool]
async fn f() -> Opaque {
    Opaque
}

fn main() {}

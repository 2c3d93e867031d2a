struct Opaque;

#[haip::haip_tool]
async fn f(value: Opaque) {
    let _ = value;
}

fn main() {}

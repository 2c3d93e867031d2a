use haip::Context;

#[haip::haip_tool]
async fn twice(a: Context, b: Context) {
    let _ = (a, b);
}

fn main() {}

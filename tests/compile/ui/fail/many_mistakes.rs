use haip::Context;

// Every mistake is reported in one build.
#[haip::haip_tool(nmae = "x", timeout = "soon")]
async fn f<T>((a, b): (u8, u8), c1: Context, c2: Context) {
    let _ = (a, b, c1, c2);
}

fn main() {}

// Independent type mistakes in one function: one error each, in one build.
struct In;
struct Out;

#[haip::haip_tool]
async fn f(a: In, n: u32) -> Out {
    let _ = (a, n);
    Out
}

fn main() {}

// Neither side of the `Result` can be sent: one error for each.
struct Out;
struct Oops;

#[haip::haip_tool]
fn f() -> Result<Out, Oops> {
    Ok(Out)
}

fn main() {}

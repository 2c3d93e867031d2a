// A tool that modifies nothing cannot destroy anything.
#[haip::haip_tool(read_only, title = "Wipe", destructive)]
async fn wipe() {}

fn main() {
    let _ = wipe::tool();
}

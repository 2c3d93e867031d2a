// A plain `fn` tool that waits for something: it must be `async`.
async fn lookup(id: u64) -> String {
    id.to_string()
}

#[haip::haip_tool]
fn find(id: u64) -> String {
    let name = lookup(id).await;
    // Waiting inside an async block of its own is fine.
    let _later = async move { lookup(id).await };
    name
}

fn main() {}

//! A name with every kind of character MCP allows: letters, digits, `_`, `-`, `.`.
#[haip::haip_tool(name = "Files.read-v2_beta")]
async fn read() {}

fn main() {
    assert_eq!(read::tool().name(), "Files.read-v2_beta");
}

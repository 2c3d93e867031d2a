//! Tags a server could never filter on, and a `tags` that is not a list of
//! strings: one error each, at what is wrong.
use haip::haip_tool;

/// Two tags in one string, an empty one, a comma, and a number.
#[haip_tool(tags = ["admin tools", "", "a,b", 7])]
async fn purge_cache(all: bool) -> bool {
    all
}

/// Not a list.
#[haip_tool(tags = "admin")]
async fn reindex(all: bool) -> bool {
    all
}

fn main() {}

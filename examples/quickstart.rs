//! The quickstart: the built-in demo tools (`echo`, `add`, `weather`) plus the
//! `#[haip_tool]` functions `calculator`, `process_file`, `create_user` and
//! `book_table` (in `src/demo.rs`), on `HAIP_ADDR` or `127.0.0.1:8080`.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! It prints the inspector's address at start: open
//! `http://127.0.0.1:8080/inspector` in a browser to list, fill in, call,
//! answer and cancel the tools by hand. Or connect any WebSocket client to
//! `ws://127.0.0.1:8080/haip` and send `{"type":"TOOL_LIST","payload":{}}`,
//! or use SSE / HTTP streaming (the guide's chapter on the wire,
//! `haip::guide::the_wire`, has the commands). With `HAIP_JWT_SECRET` set,
//! every connection needs an HS256 token signed with that secret
//! (`cargo run --example auth` mints one).

// Links the annotated tools into this binary.
use haip_examples as _;

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("info");
    haip::Server::builder()
        .from_env()
        .builtin_tools()
        .annotated_tools()
        .inspector(true) // logs its URL, with the address actually bound
        .build()?
        .run()
        .await
}

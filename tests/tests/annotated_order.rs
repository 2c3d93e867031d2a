//! What `haip::serve()` serves: every `#[haip_tool]` linked into the binary
//! (from this file and from the examples crate), ordered by file and line,
//! after the built-ins when those are on.

use haip::{Server, haip_tool};

/// Defined first in this file.
#[haip_tool]
async fn zebra() {}

/// Defined second.
#[haip_tool]
async fn aardvark() {}

#[tokio::test]
async fn annotated_tools_are_served_in_source_order() {
    // Linking the examples crate brings its annotated tools along.
    let _ = haip_examples::demo::tools;
    let handle = Server::builder()
        .addr("127.0.0.1:0")
        .builtin_tools()
        .annotated_tools()
        .build()
        .expect("no duplicates here")
        .start()
        .await
        .expect("starts");
    let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "echo",
            "add",
            "weather",
            "calculator",
            "process_file",
            "create_user",
            "book_table",
            "zebra",
            "aardvark"
        ],
        "built-ins, then by file (examples/src/demo.rs < tests/tests/...), then by line"
    );
    handle.shutdown().await;
}

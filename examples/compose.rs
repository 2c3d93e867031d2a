//! Composing tools: a crate's `ToolSet` mounted under a prefix, tools left
//! out by tag, and a mounted tool edited on the way (renamed, described
//! anew, a parameter renamed and another fixed). All of it is done once,
//! when the server is built: a call of a mounted or edited tool costs what
//! it would otherwise.
//!
//! ```text
//! cargo run -p haip-examples --example compose
//! cargo test -p haip-examples --example compose   # what is served, tested in memory
//! ```
//!
//! It serves `hello`, `files_read` and `files_list` (the `files` set,
//! mounted under `files`; its `delete` is tagged `admin` and left out) and
//! `notes_search` (the `notes` set's `find`, edited), over HAIP on
//! `ws://127.0.0.1:8080/haip` and MCP on `http://127.0.0.1:8080/mcp`. Try
//! `haip tools ws://127.0.0.1:8080/haip`, then
//! `haip call ws://127.0.0.1:8080/haip notes_search query=milk`.

use haip::{Mount, ServerBuilder, haip_tool, json};

/// What a library crate of file tools would export: its `#[haip_tool]`s,
/// each tagged, as one `ToolSet`.
mod files {
    use haip::{Context, ToolError, ToolSet, haip_tool, json};

    /// The files of the example's sandbox, in memory.
    const FILES: [(&str, &str); 2] = [("readme.txt", "Hello!"), ("todo.txt", "milk, eggs")];

    /// Read a file of the sandbox.
    #[haip_tool(tags = ["read"], read_only)]
    pub(crate) async fn read(
        /// The file's name, as `list` gives it.
        path: String,
    ) -> Result<String, ToolError> {
        match FILES.iter().find(|(name, _)| *name == path) {
            Some((_, text)) => Ok((*text).to_owned()),
            None => Err(ToolError::new("NOT_FOUND", format!("no file {path}"))
                .with_details(json!({"files": FILES.map(|(name, _)| name)}))),
        }
    }

    /// List the files of the sandbox.
    #[haip_tool(tags = ["read"], read_only)]
    pub(crate) async fn list() -> Vec<String> {
        FILES.iter().map(|(name, _)| (*name).to_owned()).collect()
    }

    /// Delete a file of the sandbox, once confirmed.
    #[haip_tool(tags = ["admin"], destructive)]
    pub(crate) async fn delete(
        /// The file's name.
        path: String,
        ctx: Context,
    ) -> Result<String, ToolError> {
        if !ctx.confirm(format!("Delete {path}?")).await? {
            return Ok(format!("kept {path}"));
        }
        Err(ToolError::execution("the sandbox is read-only"))
    }

    /// Every `#[haip_tool]` of this module, in source order.
    pub(crate) fn tools() -> Result<ToolSet, haip::Error> {
        ToolSet::annotated(module_path!())
    }
}

/// Another library's tools, as a hand-made set.
mod notes {
    use haip::{ToolSet, haip_tool};

    const NOTES: [&str; 3] = ["buy milk", "call Ada", "milk the idea"];

    /// Find the notes that contain a word.
    #[haip_tool(read_only)]
    pub(crate) async fn find(
        /// The word.
        q: String,
        /// At most this many notes.
        limit: u32,
    ) -> Vec<String> {
        NOTES
            .iter()
            .filter(|note| note.contains(q.as_str()))
            .take(limit as usize)
            .map(|note| (*note).to_owned())
            .collect()
    }

    pub(crate) fn tools() -> ToolSet {
        ToolSet::new().tool(find::tool())
    }
}

/// Say hello.
#[haip_tool]
async fn hello(
    /// Who to greet.
    name: String,
) -> String {
    format!("Hello, {name}!")
}

/// The application's own tool, the two sets mounted, `admin` tools left out.
fn tools(builder: ServerBuilder) -> Result<ServerBuilder, haip::Error> {
    Ok(builder
        .tool(hello::tool())
        // files_read, files_list, files_delete (the separator is `_`)
        .mount("files", files::tools()?)
        // `find` as `notes_search`: another name and description, `q`
        // called `query`, and `limit` fixed (no longer a parameter).
        .mount_with(Mount::new("notes", notes::tools()).edit("find", |find| {
            find.name("search")
                .description("Search the notes for a word; at most 2 come back.")
                .rename_param("q", "query")
                .param_description("query", "A word, e.g. `milk`.")
                .fix_param("limit", json!(2))
        }))
        // Leaves out files_delete; applied once, in `build()`.
        .exclude_tags(["admin"]))
}

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("info");
    // Logs the HAIP and MCP URLs it listens on.
    tools(haip::Server::builder().from_env())?
        .build()?
        .run()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use haip::testing::TestServer;

    fn server() -> TestServer {
        TestServer::new(tools(haip::Server::builder()).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn the_sets_are_mounted_filtered_and_edited() {
        let server = server();
        let names: Vec<String> = server
            .list_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["hello", "files_read", "files_list", "notes_search"]);
        assert_eq!(
            server
                .call("files_read", json!({"path": "todo.txt"}))
                .await
                .unwrap(),
            json!("milk, eggs")
        );
        let err = server
            .call("files_delete", json!({"path": "todo.txt"}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("TOOL_NOT_FOUND"), "excluded by its tag");
        // The edited tool: its new parameter name, and `limit` fixed at 2.
        let schema = server.schema("notes_search").await.unwrap();
        assert_eq!(
            schema.input_schema["properties"]["query"]["description"],
            "A word, e.g. `milk`."
        );
        assert!(schema.input_schema["properties"].get("limit").is_none());
        assert_eq!(
            server
                .call("notes_search", json!({"query": "milk"}))
                .await
                .unwrap(),
            json!(["buy milk", "milk the idea"])
        );
        let err = server
            .call("notes_search", json!({"q": "milk"}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("INVALID_PARAMS"), "{err}");
        server.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_tool_of_a_set_fails_as_it_would_unmounted() {
        let server = server();
        let err = server
            .call("files_read", json!({"path": "nope.txt"}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("NOT_FOUND"));
        assert_eq!(
            err.details(),
            Some(&json!({"files": ["readme.txt", "todo.txt"]}))
        );
        server.shutdown().await.unwrap();
    }

    #[test]
    fn the_sets_are_clean_of_lint_errors() {
        haip::lint::assert_clean(&files::tools().unwrap());
        haip::lint::assert_clean(&notes::tools());
    }
}

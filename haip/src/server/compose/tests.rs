use serde_json::{Value, json};

use super::*;
use crate::Context;
use crate::tool::Definition;

static READ: Definition = Definition {
    name: "read",
    module: "files",
    file: "src/files.rs",
    line: 12,
};

fn tool(name: &str, tags: &[&str]) -> Tool {
    Tool::builder(name)
        .tags(tags.iter().copied())
        .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
        .handler(|_: Value, _: Context| async { Ok(Value::Null) })
        .build()
        .unwrap()
}

fn defined(name: &str) -> Tool {
    Tool::builder(name)
        .definition(&READ)
        .handler(|_: Value, _: Context| async { Ok(Value::Null) })
        .build()
        .unwrap()
}

fn given() -> Given {
    Given {
        builtins: false,
        annotated: false,
        tools: Vec::new(),
        mounts: Vec::new(),
        separator: None,
        filter: TagFilter::default(),
    }
}

fn names(tools: &[(Tool, String)]) -> Vec<&str> {
    tools.iter().map(|(t, _)| t.name()).collect()
}

#[test]
fn a_set_collects_and_iterates_in_order() {
    let set: ToolSet = [tool("a", &[]), tool("b", &[])].into_iter().collect();
    let mut set = set.tool(tool("c", &[]));
    set.extend([tool("d", &[])]);
    assert_eq!(set.len(), 4);
    assert!(!set.is_empty() && ToolSet::new().is_empty());
    assert_eq!(set.get("c").map(Tool::name), Some("c"));
    assert!(set.get("x").is_none());
    let by_ref: Vec<String> = (&set).into_iter().map(|t| t.name().to_owned()).collect();
    let owned: Vec<String> = set.into_iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(by_ref, owned);
    assert_eq!(owned, ["a", "b", "c", "d"]);
}

#[test]
fn mounted_names_are_prefixed_with_the_separator_asked_for() {
    let set = ToolSet::new()
        .tool(tool("read", &[]))
        .tool(defined("write"));
    let mounted = Mount::new("files", set.clone()).resolve('_').unwrap();
    assert_eq!(names(&mounted), ["files_read", "files_write"]);
    assert_eq!(mounted[0].1, "`read` mounted under `files`");
    assert_eq!(
        mounted[1].1,
        "`write` mounted under `files` (#[haip_tool] at src/files.rs:12)"
    );
    // The definition goes with the tool: `annotated_tools` knows it.
    assert!(std::ptr::eq(mounted[1].0.definition().unwrap(), &READ));
    let dotted = Mount::new("files", set.clone()).separator('.').resolve('_');
    assert_eq!(names(&dotted.unwrap()), ["files.read", "files.write"]);
    let dashed = Mount::new("files", set).resolve('-').unwrap();
    assert_eq!(names(&dashed), ["files-read", "files-write"]);
}

#[test]
fn bad_separators_prefixes_and_lengths_are_build_errors() {
    let err = |mount: Mount| mount.resolve('_').unwrap_err().to_string();
    let set = || [tool("read", &[])];
    assert_eq!(
        err(Mount::new("files", set()).separator('/')),
        "invalid setting `mount_separator`: '/' cannot join a prefix to a tool name: tool names \
         hold only A-Z, a-z, 0-9, `_`, `.` and `-` (MCP's rule), and `_` is the one every MCP \
         host accepts"
    );
    assert!(err(Mount::new("files", set()).separator(' ')).contains("' ' cannot join"));
    assert!(err(Mount::new("", set())).contains("prefix \"\" is not the start of a tool name"));
    assert!(err(Mount::new("my files", set())).contains("prefix \"my files\""));
    let long = "p".repeat(124);
    assert_eq!(
        err(Mount::new(long.clone(), set())),
        format!(
            "invalid setting `mount`: mount `{long}`: `{long}_read` is 129 characters long; a \
             tool name has at most 128"
        )
    );
    assert!(Mount::new("p".repeat(123), set()).resolve('_').is_ok());
}

#[test]
fn edits_apply_before_the_prefix_and_mistakes_name_the_mount() {
    let mounted = Mount::new("fs", [tool("read", &[]), tool("stat", &[])])
        .edit("read", |e| {
            e.name("cat").description("Print").tags(["files"])
        })
        .resolve('_')
        .unwrap();
    assert_eq!(names(&mounted), ["fs_cat", "fs_stat"]);
    assert_eq!(mounted[0].0.description(), "Print");
    assert_eq!(mounted[0].0.tags(), ["files"]);
    assert_eq!(mounted[0].1, "`cat` mounted under `fs`");
    let err = Mount::new("fs", [tool("read", &[])])
        .edit("raed", |e| e.description("x"))
        .resolve('_')
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid setting `mount`: mount `fs` has no tool `raed` to edit; its tools: read"
    );
    let err = Mount::new("fs", [tool("read", &[])])
        .edit("read", |e| e.param_description("pth", "x"))
        .resolve('_')
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid setting `mount`: mount `fs`: invalid tool `read`: cannot edit: it has no \
         parameter `pth`; its parameters: path"
    );
}

#[test]
fn tools_and_mounts_keep_the_order_they_were_given_in() {
    let mut g = given();
    g.mounts.push((0, Mount::new("m0", [tool("x", &[])])));
    g.tools.push((tool("a", &[]), "a".into()));
    g.mounts.push((1, Mount::new("m1", [tool("x", &[])])));
    g.mounts.push((1, Mount::new("m2", [tool("x", &[])])));
    g.tools.push((tool("b", &[]), "b".into()));
    g.mounts.push((2, Mount::new("m3", [tool("x", &[])])));
    g.separator = Some('.');
    g.builtins = true;
    let tools = g.tools().unwrap();
    assert_eq!(
        names(&tools),
        [
            "echo", "add", "weather", "m0.x", "a", "m1.x", "m2.x", "b", "m3.x"
        ]
    );
}

#[test]
fn tag_filters_choose_what_is_served() {
    let mut g = given();
    g.builtins = true;
    g.tools.push((tool("admin", &["admin"]), "admin".into()));
    g.mounts.push((
        1,
        Mount::new(
            "fs",
            [tool("read", &["files"]), tool("wipe", &["files", "admin"])],
        ),
    ));
    g.filter.only.push("files".into());
    g.filter.exclude.push("admin".into());
    assert_eq!(names(&g.tools().unwrap()), ["fs_read"]);
    let mut g = given();
    g.filter.exclude.push("not a tag".into());
    assert_eq!(
        g.tools().unwrap_err().to_string(),
        "invalid setting `exclude_tags`: \"not a tag\" is not a tag: 1 to 64 characters, each \
         an ASCII letter, digit, `_`, `-`, `.`, `:` or `/` (no tool can have it)"
    );
}

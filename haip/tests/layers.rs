//! The runtime's layers (ARCHITECTURE.md): each module of `haip/src` may name
//! only the modules listed for it here. A `use crate::server::…` in `session/`,
//! say, fails this test with the file, the line and what the module may import.
//!
//! The check reads the sources: every `crate::<name>` path outside comments,
//! with `crate::{a, b::c}` groups and the root's re-exports (`crate::Context`
//! is `context`) resolved to the module that defines the item.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Who may import whom. A module missing here fails the test: a new module
/// must be placed in a layer.
const ALLOWED: &[(&str, &[&str])] = &[
    // The wire model and the schema pipeline know nothing of the runtime.
    ("hash", &[]),
    ("error", &[]),
    ("protocol", &["hash"]),
    ("schema", &["hash"]),
    // Content blocks: plain data, and how a result type's schema shows them.
    ("content", &["schema"]),
    // Calls: tools, their context, running one call, the counters.
    (
        "tool",
        &["protocol", "schema", "content", "hash", "error", "context"],
    ),
    (
        "context",
        &[
            "protocol", "schema", "content", "tool", "exec", "hash", "error",
        ],
    ),
    (
        "exec",
        &[
            "protocol", "schema", "tool", "context", "stats", "hash", "error",
        ],
    ),
    ("stats", &["protocol"]),
    // The session core.
    (
        "session",
        &[
            "protocol", "schema", "tool", "context", "exec", "stats", "hash", "error",
        ],
    ),
    // Adapters over the session: connections, MCP, authentication, the client.
    (
        "transport",
        &[
            "protocol", "tool", "context", "exec", "stats", "session", "hash", "error",
        ],
    ),
    (
        "mcp",
        &[
            "protocol", "schema", "content", "tool", "context", "exec", "stats", "session", "hash",
            "error",
        ],
    ),
    (
        "cluster",
        &[
            "protocol", "schema", "tool", "context", "exec", "stats", "session", "hash", "error",
        ],
    ),
    // `Caller`, what tools see of who called, lives with the context.
    ("auth", &["protocol", "context", "hash", "error"]),
    // Checks of tools' schemas before deploy (and what finds the annotated ones).
    ("lint", &["tool", "schema", "error", "__private"]),
    ("client", &["protocol", "hash", "error"]),
    // The server assembles everything; the macro support names the runtime.
    ("server", &["*"]),
    ("__private", &["*"]),
];

/// Files that are a module's public face rather than its machinery, with what
/// they may import beyond their module's list and why.
const FACADES: &[(&str, &[&str], &str)] = &[(
    "mcp/mod.rs",
    &["server"],
    "`haip::mcp::serve_stdio` is a shorthand for the server builder",
)];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`None`: the crate root or a binary).
fn module_of(relative: &Path) -> Option<String> {
    let mut parts = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy());
    let first = parts.next()?.into_owned();
    if first == "bin" || first == "lib.rs" {
        return None;
    }
    let name = first.trim_end_matches(".rs").to_owned();
    Some(if name == "private" {
        "__private".into()
    } else {
        name
    })
}

/// `pub use module::{A, B}` lines of the root: item name → module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in lib.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        let items = items.trim_end_matches(';');
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            if !item.is_empty() {
                map.insert(item.to_owned(), module.to_owned());
            }
        }
    }
    map
}

/// The code of a line, without a trailing `//` comment (naively: enough for
/// this crate, where `//` inside a string never precedes a `crate::` path).
fn code_of(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return "";
    }
    match line.find("//") {
        Some(at) if !line[..at].contains('"') => &line[..at],
        _ => line,
    }
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

fn push_ident(offset: usize, item: &str, found: &mut Vec<(usize, String)>) {
    let name = ident_at(item.trim());
    if !name.is_empty() {
        found.push((offset, name.to_owned()));
    }
}

/// Every first segment after `crate::` in `code` (`crate::{a, b::c}` gives
/// `a` and `b`).
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let offset = code.len() - rest.len() + at;
        // `$crate::` in a macro and `haip_crate::` are not this crate's paths.
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c == '$' || c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Items at depth 0 of the group: `a::{b, c}` names `a` only.
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        push_ident(offset, &group[start..i], &mut found);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        push_ident(offset, &group[start..i], &mut found);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            push_ident(offset, rest, &mut found);
        }
    }
    found
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let reexports = root_reexports(&lib);
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(relative) else {
            continue;
        };
        let Some(may) = allowed.get(module.as_str()) else {
            violations.push(format!(
                "{}: module `{module}` has no layer: add it to ALLOWED in haip/tests/layers.rs \
                 and to ARCHITECTURE.md",
                relative.display()
            ));
            continue;
        };
        let relative_name = relative.to_string_lossy().replace('\\', "/");
        let facade = FACADES.iter().find(|(path, _, _)| *path == relative_name);
        let text = std::fs::read_to_string(file).expect("read source");
        let code: String = text.lines().map(|l| format!("{}\n", code_of(l))).collect();
        for (at, name) in crate_paths(&code) {
            let number = code[..at].matches('\n').count();
            let target = reexports.get(&name).cloned().unwrap_or(name);
            let target = if target == "private" {
                "__private".to_owned()
            } else {
                target
            };
            if target == module || !allowed.contains_key(target.as_str()) {
                // Itself, or not a module (a macro, `crate::Error` resolved above).
                continue;
            }
            graph
                .entry(module.clone())
                .or_default()
                .insert(target.clone());
            let ok = may.contains("*")
                || may.contains(target.as_str())
                || facade.is_some_and(|(_, extra, _)| extra.contains(&target.as_str()));
            if !ok {
                violations.push(format!(
                    "{}:{}: `{module}` imports `{target}`; it may import only {:?}",
                    relative.display(),
                    number + 1,
                    may
                ));
            }
        }
    }
    for (module, deps) in &graph {
        println!(
            "{module}: {}",
            deps.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    assert!(
        violations.is_empty(),
        "layering violations:\n{}",
        violations.join("\n")
    );
}

fn names(code: &str) -> Vec<String> {
    crate_paths(code)
        .into_iter()
        .map(|(_, name)| name)
        .collect()
}

#[test]
fn the_path_scanner_sees_groups_reexports_and_skips_comments() {
    assert_eq!(names("use crate::server::Config;"), ["server"]);
    assert_eq!(
        names("use crate::{Context, exec::CallEvent};"),
        ["Context", "exec"]
    );
    assert_eq!(
        names("use crate::{tool::{Registry, Tool}, stats::Stats};"),
        ["tool", "stats"]
    );
    assert_eq!(
        names("use crate::{\n    Context,\n    protocol::{A, B},\n};"),
        ["Context", "protocol"]
    );
    assert!(names(code_of("    /// see [`x`](crate::server::Server)")).is_empty());
    assert!(names("$crate::__private::x").is_empty());
    let reexports =
        root_reexports("pub use context::{CancellationHandle, Context};\npub use error::Error;");
    assert_eq!(reexports["Context"], "context");
    assert_eq!(reexports["Error"], "error");
}

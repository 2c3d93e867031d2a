//! The runtime's layers (ARCHITECTURE.md): each module of `haip/src` may name
//! only the modules listed for it here. A `use crate::server::…` in `session/`,
//! say, fails this test with the file, the line and what the module may import.
//!
//! The check reads the sources: every `crate::<name>` path outside comments,
//! with `crate::{a, b::c}` groups and the root's re-exports (`crate::Context`
//! is `context`) resolved to the module that defines the item.
//!
//! It also builds the graph of which file of `haip/src` names which, and
//! fails when files import each other in a circle, listing each circle with
//! the file and line of every step (ARCHITECTURE.md, "Circles between files").
//! The same check covers the files of `haip-macros/src`.

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
            "protocol", "schema", "content", "tool", "exec", "otel", "hash", "error",
        ],
    ),
    (
        "exec",
        &[
            "protocol", "schema", "tool", "context", "stats", "otel", "hash", "error",
        ],
    ),
    // Layers around calls: above the runner, which sees them only as its
    // `Around` hook.
    (
        "layer",
        &[
            "protocol", "schema", "tool", "context", "exec", "hash", "error",
        ],
    ),
    ("stats", &["protocol", "hash"]),
    // Spans of calls (feature `otel`): beside the counters, which it reads.
    ("otel", &["stats"]),
    // The session core.
    (
        "session",
        &[
            "protocol", "schema", "tool", "context", "exec", "stats", "otel", "hash", "error",
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
            "protocol", "schema", "content", "tool", "context", "exec", "stats", "otel", "session",
            "hash", "error",
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
    // `Violation`, one type for schema checks and answers the client refuses.
    ("client", &["protocol", "schema", "hash", "error"]),
    // The guide: documentation only, names nothing.
    ("guide", &[]),
    // The server assembles everything; the macro support names the runtime.
    ("server", &["*"]),
    // The in-memory test client runs the server's sessions and its client.
    ("testing", &["*"]),
    ("__private", &["*"]),
];

/// Files that are a module's public face rather than its machinery, with what
/// they may import beyond their module's list and why.
const FACADES: &[(&str, &[&str], &str)] = &[(
    "mcp/stdio.rs",
    &["server"],
    "`haip::mcp::serve_stdio` is a shorthand for the server builder",
)];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The sources of the macros' crate, `haip-macros/src`, beside this one.
fn macros_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../haip-macros/src")
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

// ----- circles between files -------------------------------------------------

/// The module path of a file of `haip/src` (`protocol/payload/mod.rs` is
/// `protocol::payload`, `private.rs` is `__private`, `lib.rs` the root).
fn module_path_of(relative: &str) -> Vec<String> {
    let trimmed = relative.trim_end_matches(".rs");
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    if parts.first().is_some_and(|p| p == "private") {
        parts[0] = "__private".into();
    }
    parts
}

/// `code` with the insides of string and character literals blanked out
/// (newlines kept), so that braces and `::` in them are not read as code.
fn without_literals(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let ident_before = i > 0 && (chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '_');
        // Raw strings: r"…", r#"…"#, br#"…"#.
        if c == 'r' && !ident_before {
            let mut j = i + 1;
            while j < chars.len() && chars[j] == '#' {
                j += 1;
            }
            if j < chars.len() && chars[j] == '"' {
                let hashes = j - i - 1;
                let mut k = j + 1;
                loop {
                    if k >= chars.len() {
                        break;
                    }
                    if chars[k] == '"'
                        && chars[k + 1..].iter().take_while(|&&h| h == '#').count() >= hashes
                    {
                        k += 1 + hashes;
                        break;
                    }
                    k += 1;
                }
                out.extend(
                    chars[i..k.min(chars.len())]
                        .iter()
                        .map(|&ch| if ch == '\n' { '\n' } else { ' ' }),
                );
                i = k;
                continue;
            }
        }
        if c == '"' {
            let mut k = i + 1;
            while k < chars.len() && chars[k] != '"' {
                if chars[k] == '\\' {
                    k += 1;
                }
                k += 1;
            }
            let end = (k + 1).min(chars.len());
            out.extend(
                chars[i..end]
                    .iter()
                    .map(|&ch| if ch == '\n' { '\n' } else { ' ' }),
            );
            i = end;
            continue;
        }
        if c == '\'' {
            // A character literal ('x', '\n', '\u{7b}'), not a lifetime.
            let end = if chars.get(i + 1) == Some(&'\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map(|p| i + 2 + p + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            if let Some(end) = end {
                out.extend(std::iter::repeat_n(' ', end - i));
                i = end;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The paths of a use tree or an expression starting at `s` (after a
/// `crate::`, `super::` or `self::`): `a::{b, c::d}` gives `a::b` and `a::c::d`.
fn use_tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(group) = s.strip_prefix('{') {
        let mut paths = Vec::new();
        let mut depth = 0usize;
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                '}' | ',' if depth == 0 => {
                    let part = &group[start..i];
                    if !part.trim().is_empty() {
                        paths.extend(use_tree(part));
                    }
                    if c == '}' {
                        break;
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        return paths;
    }
    let name = ident_at(s);
    if name.is_empty() {
        return vec![Vec::new()];
    }
    let rest = &s[name.len()..];
    match rest.strip_prefix("::") {
        Some(more) => use_tree(more)
            .into_iter()
            .map(|mut p| {
                p.insert(0, name.to_owned());
                p
            })
            .collect(),
        None => vec![vec![name.to_owned()]],
    }
}

/// Every module path a file names (`crate::…`, `super::…`, `self::…`, with
/// `super` read inside the inline module, such as `mod tests { … }`, it is
/// written in), made absolute. A path into the root's re-exports (`crate::Context`)
/// is a path into the module that defines the item.
fn named_paths(
    text: &str,
    here: &[String],
    reexports: &BTreeMap<String, String>,
) -> Vec<(usize, Vec<String>)> {
    let code: String = text.lines().map(|l| format!("{}\n", code_of(l))).collect();
    let code = without_literals(&code);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    // Inline modules open at this point: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'{' {
            depth += 1;
            let before = code[..i].trim_end();
            let name = before
                .rsplit(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .next()
                .unwrap_or("");
            let head = before[..before.len() - name.len()].trim_end();
            if !name.is_empty()
                && (head.ends_with(" mod") || head.ends_with("\nmod") || head == "mod")
            {
                inline.push((name.to_owned(), depth));
            }
        } else if c == b'}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        } else if c.is_ascii_alphabetic() {
            let boundary = i == 0 || {
                let p = bytes[i - 1];
                !(p.is_ascii_alphanumeric() || p == b'_' || p == b'$' || p == b':')
            };
            let word = ident_at(&code[i..]);
            if boundary
                && matches!(word, "crate" | "super" | "self")
                && code[i + word.len()..].starts_with("::")
            {
                let line = code[..i].matches('\n').count() + 1;
                let current: Vec<String> = here
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(n, _)| n.clone()))
                    .collect();
                for path in use_tree(&code[i..]) {
                    let mut segments = path.into_iter().peekable();
                    let mut base = match segments.next().as_deref() {
                        Some("crate") => Vec::new(),
                        _ => {
                            // `self` or `super`: re-read below.
                            current.clone()
                        }
                    };
                    if word != "crate" {
                        if word == "super" {
                            base.pop();
                        }
                        while segments.peek().is_some_and(|s| s == "super") {
                            segments.next();
                            base.pop();
                        }
                    }
                    let rest: Vec<String> = segments.filter(|s| s != "self").collect();
                    let mut full = base;
                    match rest.first().and_then(|f| reexports.get(f)) {
                        // `crate::Context`: the module that defines it.
                        Some(module) if full.is_empty() => {
                            full.push(module.clone());
                            full.extend(rest.into_iter().skip(1));
                        }
                        _ => full.extend(rest),
                    }
                    found.push((line, full));
                }
                i += word.len();
                continue;
            }
            i += word.len().max(1);
            continue;
        }
        i += 1;
    }
    found
}

/// A circle in `graph`, if there is one, as the files along it.
fn find_circle(graph: &BTreeMap<String, BTreeMap<String, usize>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, usize>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).expect("on the stack");
                    let mut circle = stack[from..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(circle) = visit(next, graph, state, stack) {
                        return Some(circle);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node.as_str()) {
            let mut stack = Vec::new();
            if let Some(circle) = visit(node, graph, &mut state, &mut stack) {
                return Some(circle);
            }
        }
    }
    None
}

/// The file-level import graph of the crate whose sources are `src`
/// (`haip/src`, `haip-macros/src`): file → (file it names → first line
/// naming it). A path names the file of the longest module prefix it
/// has (`crate::protocol::payload::ToolDone` names `protocol/payload/mod.rs`).
/// A module naming its own submodules is its public face, not an edge (a
/// `mod.rs` re-exports its children, which name it back with `super::`).
fn file_graph(src: &Path) -> BTreeMap<String, BTreeMap<String, usize>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let reexports: BTreeMap<String, String> = root_reexports(&lib)
        .into_iter()
        .map(|(item, module)| {
            let module = if module == "private" {
                "__private".to_owned()
            } else {
                module
            };
            (item, module)
        })
        .collect();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let relative: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|r| !r.starts_with("bin/"))
        .collect();
    let by_module: BTreeMap<Vec<String>, String> = relative
        .iter()
        .map(|r| (module_path_of(r), r.clone()))
        .collect();
    let mut graph: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for file in &relative {
        let here = module_path_of(file);
        let text = std::fs::read_to_string(src.join(file)).expect("read source");
        let edges = graph.entry(file.clone()).or_default();
        for (line, path) in named_paths(&text, &here, &reexports) {
            let Some(target) = (0..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]).map(|f| (n, f)))
            else {
                continue;
            };
            let (n, target_file) = target;
            let target_module = &path[..n];
            if target_file == file || target_module.starts_with(&here) {
                continue;
            }
            edges.entry(target_file.clone()).or_insert(line);
        }
    }
    graph
}

/// Fails, listing every circle between the files of `src` (`name` in the
/// message) with the file and line of each step, when there is one.
fn assert_no_circles(name: &str, src: &Path) {
    let graph = file_graph(src);
    // Every circle, one at a time: report one, drop its last step, look again.
    let mut left = graph.clone();
    let mut report = Vec::new();
    while let Some(circle) = find_circle(&left) {
        let steps: Vec<String> = circle
            .windows(2)
            .map(|w| format!("  {}:{} names {}", w[0], graph[&w[0]][&w[1]], w[1]))
            .collect();
        report.push(format!("{}\n{}", circle.join(" -> "), steps.join("\n")));
        let n = circle.len();
        left.get_mut(&circle[n - 2])
            .expect("in the graph")
            .remove(&circle[n - 1]);
    }
    assert!(
        report.is_empty(),
        "files of {name} import each other in a circle (move what they share into a module \
         below both):\n{}",
        report.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    assert_no_circles("haip/src", &src_dir());
}

#[test]
fn no_files_of_haip_macros_import_each_other_in_a_circle() {
    assert_no_circles("haip-macros/src", &macros_src_dir());
}

#[test]
fn the_circle_check_reads_super_inline_modules_and_groups() {
    let none = BTreeMap::new();
    let here = vec!["session".to_owned(), "calls".to_owned()];
    let paths = |code: &str| -> Vec<String> {
        named_paths(code, &here, &none)
            .into_iter()
            .map(|(_, p)| p.join("::"))
            .collect()
    };
    assert_eq!(paths("use super::flow::Credit;"), ["session::flow::Credit"]);
    assert_eq!(
        paths("use crate::{exec::{CallKey, CallEvent}, tool::Tool};"),
        ["exec::CallKey", "exec::CallEvent", "tool::Tool"]
    );
    assert_eq!(
        paths("mod tests {\n    use super::*;\n}\nuse super::super::x;"),
        ["session::calls", "x"]
    );
    assert_eq!(
        paths("let s = \"crate::nope {\"; self::a::b();"),
        ["session::calls::a::b"]
    );
    let mut graph: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    graph
        .entry("a.rs".into())
        .or_default()
        .insert("b.rs".into(), 1);
    graph
        .entry("b.rs".into())
        .or_default()
        .insert("c.rs".into(), 1);
    assert_eq!(find_circle(&graph), None);
    graph
        .entry("c.rs".into())
        .or_default()
        .insert("a.rs".into(), 1);
    assert_eq!(
        find_circle(&graph).expect("a circle"),
        ["a.rs", "b.rs", "c.rs", "a.rs"]
    );
}

/// What each file names, for a reader: `cargo test -p haip --test layers --
/// --nocapture print_file_graph`.
/// The graph of `haip/src` comes first, then that of `haip-macros/src`.
#[test]
fn print_file_graph() {
    for (heading, src) in [
        (None, src_dir()),
        (Some("haip-macros/src"), macros_src_dir()),
    ] {
        if let Some(heading) = heading {
            println!("\n{heading}:");
        }
        for (file, deps) in file_graph(&src) {
            if !deps.is_empty() {
                println!(
                    "{file}: {}",
                    deps.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
        }
    }
}

//! The guide's longer snippets are excerpts of the runnable examples, and
//! stay so.
//!
//! A snippet in `haip/src/guide/*.rs` that follows the line
//! `<!-- excerpt of examples/<file> -->` (an HTML comment: rustdoc shows
//! nothing) must be the example's own code: each run of its shown lines
//! (rustdoc hides the lines that start with `# `) appears, in order and
//! line for line, in that example. `cargo test -p haip --doc` compiles the
//! snippet; this test keeps it the code the example runs, so neither can
//! change without the other.

use std::fs;
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- excerpt of ";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// One marked snippet: where it is, what it claims to come from, and its
/// shown lines grouped in runs (a hidden line ends a run).
struct Excerpt {
    at: String,
    source: String,
    runs: Vec<Vec<String>>,
}

/// The text of a `//!` line, without the marker and one space.
fn doc_text(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("//!")?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// A line rustdoc hides in a code block: `#` alone or `# ` and more.
fn hidden(line: &str) -> bool {
    let line = line.trim_start();
    line == "#" || line.starts_with("# ")
}

fn excerpts(chapter: &Path) -> Vec<Excerpt> {
    let text = fs::read_to_string(chapter).expect("a guide chapter");
    let name = chapter.file_name().unwrap().to_string_lossy().into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(source) = doc_text(lines[i])
            .and_then(|l| l.strip_prefix(MARKER))
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            i += 1;
            continue;
        };
        let at = format!("{name}:{}", i + 1);
        let fence = lines.get(i + 1).and_then(|l| doc_text(l)).unwrap_or("");
        assert!(
            fence.starts_with("```"),
            "{at}: the excerpt marker must be followed by a code block"
        );
        let mut runs = vec![Vec::new()];
        let mut j = i + 2;
        loop {
            let line = lines
                .get(j)
                .and_then(|l| doc_text(l))
                .unwrap_or_else(|| panic!("{at}: the code block is not closed"));
            if line.starts_with("```") {
                break;
            }
            if hidden(line) {
                runs.push(Vec::new());
            } else {
                runs.last_mut().unwrap().push(line.trim().to_owned());
            }
            j += 1;
        }
        runs.retain(|run| run.iter().any(|l| !l.is_empty()));
        found.push(Excerpt {
            at,
            source: source.to_owned(),
            runs,
        });
        i = j + 1;
    }
    found
}

/// Where `run` starts in `lines` at or after `from`, compared line by line
/// without surrounding whitespace (a snippet may sit less indented).
fn find_run(lines: &[String], run: &[String], from: usize) -> Option<usize> {
    (from..=lines.len().saturating_sub(run.len())).find(|&start| {
        run.iter()
            .zip(&lines[start..])
            .all(|(want, have)| want == have)
    })
}

#[test]
fn marked_guide_snippets_are_excerpts_of_the_examples() {
    let guide = root().join("haip/src/guide");
    let mut chapters: Vec<PathBuf> = fs::read_dir(&guide)
        .expect("the guide's directory")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    chapters.sort();
    let all: Vec<Excerpt> = chapters.iter().flat_map(|c| excerpts(c)).collect();
    // The chapters that show an example at length: dropping a marker must
    // be a decision, not an accident.
    assert!(
        all.len() >= 8,
        "expected at least 8 marked excerpts in the guide, found {}",
        all.len()
    );
    let mut failures = Vec::new();
    for excerpt in &all {
        let path = root().join(&excerpt.source);
        let Ok(source) = fs::read_to_string(&path) else {
            failures.push(format!("{}: no file {}", excerpt.at, excerpt.source));
            continue;
        };
        let lines: Vec<String> = source.lines().map(|l| l.trim().to_owned()).collect();
        let mut from = 0;
        for run in &excerpt.runs {
            match find_run(&lines, run, from) {
                Some(start) => from = start + run.len(),
                None => {
                    failures.push(format!(
                        "{}: these lines are not, in this order, in {} (after line {from}):\n{}",
                        excerpt.at,
                        excerpt.source,
                        run.join("\n")
                    ));
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_chapter_links_to_its_neighbours() {
    // The reading order is the numbered list of `guide/mod.rs`.
    let index = fs::read_to_string(root().join("haip/src/guide/mod.rs")).unwrap();
    let order: Vec<String> = index
        .lines()
        .filter_map(doc_text)
        .filter_map(|l| {
            let (number, rest) = l.split_once(". [")?;
            number.trim().parse::<u32>().ok()?;
            let (_, after) = rest.split_once("](")?;
            Some(after.split(')').next()?.to_owned())
        })
        .collect();
    assert!(order.len() >= 10, "the guide's chapter list: {order:?}");
    for (i, chapter) in order.iter().enumerate() {
        let text = fs::read_to_string(root().join(format!("haip/src/guide/{chapter}.rs")))
            .unwrap_or_else(|e| panic!("chapter {chapter}: {e}"));
        let previous = if i == 0 {
            "super".to_owned()
        } else {
            format!("super::{}", order[i - 1])
        };
        let nav = text
            .lines()
            .filter_map(doc_text)
            .find(|l| l.starts_with("Previous: ["))
            .unwrap_or_else(|| panic!("{chapter}.rs has no `Previous: [..](..)` line"));
        assert!(
            nav.contains(&format!("]({previous})")),
            "{chapter}.rs must link back to {previous}: {nav}"
        );
        if let Some(next) = order.get(i + 1) {
            assert!(
                nav.contains("Next: [") && nav.contains(&format!("](super::{next})")),
                "{chapter}.rs must link on to {next}: {nav}"
            );
        }
    }
}

//! The advertised schemas against a snapshot file: compared, written when
//! asked (`HAIP_UPDATE_SNAPSHOTS`), and the difference shown line by line.

use std::path::Path;

use super::TestError;

/// The environment variable that makes a snapshot check write the file
/// instead of comparing.
pub(super) const UPDATE: &str = "HAIP_UPDATE_SNAPSHOTS";

/// The most lines of difference shown.
const MAX_DIFF_LINES: usize = 60;

/// Past this many cells (lines removed × lines added), the changed middle
/// is shown as all removed, then all added, instead of matched line by line.
const MAX_MATCHED_CELLS: usize = 1 << 22;

/// Compares `now` with the file at `path` (written instead when `update`).
pub(super) fn check(path: &Path, now: &str, update: bool) -> Result<(), TestError> {
    let snapshot_error = |diff| TestError::Snapshot {
        path: path.to_owned(),
        diff,
    };
    if update {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                snapshot_error(Some(format!("cannot create {}: {e}", parent.display())))
            })?;
        }
        return std::fs::write(path, now)
            .map_err(|e| snapshot_error(Some(format!("cannot write it: {e}"))));
    }
    let expected = match std::fs::read_to_string(path) {
        Ok(text) => text.replace("\r\n", "\n"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(snapshot_error(None)),
        Err(e) => return Err(snapshot_error(Some(format!("cannot read it: {e}")))),
    };
    if expected == now {
        Ok(())
    } else {
        Err(snapshot_error(Some(diff(&expected, now))))
    }
}

/// Whether the environment asks for snapshots to be written.
pub(super) fn update_asked() -> bool {
    std::env::var_os(UPDATE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The lines of `old` and `new` that differ: `-` removed, `+` added, each
/// run of them under `@@ line N @@` (its line in `new`).
pub(super) fn diff(old: &str, new: &str) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let removed = &old[prefix..old.len() - suffix];
    let added = &new[prefix..new.len() - suffix];
    let steps = if removed.len().saturating_mul(added.len()) > MAX_MATCHED_CELLS {
        let mut steps: Vec<Step<'_>> = removed.iter().map(|l| Step::Removed(l)).collect();
        steps.extend(added.iter().map(|l| Step::Added(l)));
        steps
    } else {
        matched(removed, added)
    };
    let mut out: Vec<String> = Vec::new();
    // The line in `new` of the next step, and whether a run of changes is open.
    let mut at = prefix + 1;
    let mut in_run = false;
    for step in steps {
        let line = match step {
            Step::Same => {
                at += 1;
                in_run = false;
                continue;
            }
            Step::Removed(line) => format!("-{line}"),
            Step::Added(line) => format!("+{line}"),
        };
        if !in_run {
            out.push(format!("@@ line {at} @@"));
            in_run = true;
        }
        out.push(line);
        if matches!(step, Step::Added(_)) {
            at += 1;
        }
    }
    let total = out.len();
    if total > MAX_DIFF_LINES {
        out.truncate(MAX_DIFF_LINES);
        out.push(format!("... and {} more lines", total - MAX_DIFF_LINES));
    }
    out.join("\n")
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Same,
    Removed(&'a str),
    Added(&'a str),
}

/// The old lines against the new, by their longest common subsequence.
fn matched<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<Step<'a>> {
    let (n, m) = (old.len(), new.len());
    // common[i][j]: the longest common subsequence of old[i..] and new[j..].
    let mut common = vec![0u32; (n + 1) * (m + 1)];
    let cell = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            common[cell(i, j)] = if old[i] == new[j] {
                common[cell(i + 1, j + 1)] + 1
            } else {
                common[cell(i + 1, j)].max(common[cell(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut steps = Vec::with_capacity(n + m);
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            steps.push(Step::Same);
            i += 1;
            j += 1;
        } else if i < n && (j == m || common[cell(i + 1, j)] >= common[cell(i, j + 1)]) {
            steps.push(Step::Removed(old[i]));
            i += 1;
        } else {
            steps.push(Step::Added(new[j]));
            j += 1;
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_shows_changed_lines_under_their_place() {
        let old = "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}\n";
        let new = "{\n  \"a\": 1,\n  \"b\": 20,\n  \"c\": 3,\n  \"d\": 4\n}\n";
        assert_eq!(
            diff(old, new),
            "@@ line 3 @@\n-  \"b\": 2,\n-  \"c\": 3\n+  \"b\": 20,\n+  \"c\": 3,\n+  \"d\": 4"
        );
        assert_eq!(
            diff("a\nb\nc\nd\n", "a\nc\nd\ne\n"),
            "@@ line 2 @@\n-b\n@@ line 4 @@\n+e"
        );
        let long_old: String = (0..100).map(|i| format!("{i}\n")).collect();
        let shown = diff(&long_old, "");
        assert!(shown.ends_with("... and 41 more lines"), "{shown}");
    }

    #[test]
    fn a_snapshot_is_written_compared_and_missing() {
        let dir = std::env::temp_dir().join(format!("haip-snapshot-{}", std::process::id()));
        let path = dir.join("nested").join("schemas.json");
        let err = check(&path, "{}\n", false).unwrap_err();
        assert!(err.to_string().contains("HAIP_UPDATE_SNAPSHOTS=1"), "{err}");
        check(&path, "{}\n", true).unwrap();
        check(&path, "{}\n", false).unwrap();
        let err = check(&path, "{\"a\": 1}\n", false).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("-{}\n+{\"a\": 1}"), "{text}");
        assert!(text.contains("HAIP_UPDATE_SNAPSHOTS=1"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

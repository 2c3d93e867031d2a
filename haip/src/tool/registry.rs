#[cfg(feature = "mcp")]
use std::any::{Any, TypeId};
#[cfg(feature = "mcp")]
use std::sync::Mutex;
use std::sync::{Arc, RwLock};

use super::Tool;
use crate::hash::FastMap;

/// The ordered tool registry, shared by every session of a server.
///
/// Readers take a snapshot (an `Arc` clone under a short read lock); writers
/// build a new snapshot. Registration changes are therefore visible to the very
/// next request, and a call that already looked its tool up keeps running with it.
#[derive(Clone)]
pub(crate) struct Registry {
    current: Arc<RwLock<Arc<Snapshot>>>,
    /// Bumped after every change, for sessions that push `TOOL_LIST`.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            current: Arc::default(),
            changes: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

#[derive(Default)]
pub(crate) struct Snapshot {
    tools: Vec<Tool>,
    index: FastMap<String, usize>,
    /// Whether any tool requires OAuth scopes (so that a request need not
    /// look for its tool's when none does).
    scoped: bool,
    /// What the doors made of these tools once, for every request that reads
    /// this snapshot ([`Snapshot::memo`]): a few entries, gone with it.
    #[cfg(feature = "mcp")]
    memos: Mutex<FastMap<(TypeId, u64), Arc<dyn Any + Send + Sync>>>,
}

impl Snapshot {
    fn new(tools: Vec<Tool>) -> Snapshot {
        let index = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name().to_owned(), i))
            .collect();
        let scoped = tools.iter().any(|t| !t.scopes().is_empty());
        Snapshot {
            tools,
            index,
            scoped,
            #[cfg(feature = "mcp")]
            memos: Mutex::default(),
        }
    }

    /// What `make` makes of these tools for `key` (MCP's `tools/list` in
    /// one schema profile, say): made once, by the first request that asks,
    /// and shared by every later one until the registry changes. Keys are
    /// the caller's to keep few. (MCP's `tools/list` is the one user.)
    #[cfg(feature = "mcp")]
    pub(crate) fn memo<T: Any + Send + Sync>(
        &self,
        key: u64,
        make: impl FnOnce(&Snapshot) -> T,
    ) -> Arc<T> {
        let id = (TypeId::of::<T>(), key);
        let memos = || self.memos.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(made) = memos()
            .get(&id)
            .and_then(|m| Arc::clone(m).downcast::<T>().ok())
        {
            return made;
        }
        // Made outside the lock: two first requests may both make it, and
        // the one kept is as good as the other.
        let made = Arc::new(make(self));
        memos().insert(id, Arc::clone(&made) as Arc<dyn Any + Send + Sync>);
        made
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Tool> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    pub(crate) fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Whether any tool requires OAuth scopes.
    pub(crate) fn scoped(&self) -> bool {
        self.scoped
    }

    /// The names of at most [`MAX_SUGGESTIONS`] tools `visible` lets the
    /// caller see that it may have meant by `wanted`, a name no tool has:
    /// first those that are `wanted` mounted under a prefix (`ops_crunch`
    /// for `crunch`) or `wanted` without its prefix (`crunch` for
    /// `ops_crunch`), then those a few edits away (`crunch` for `crnch`),
    /// closest first; ties in registry order.
    pub(crate) fn similar<'a>(
        &'a self,
        wanted: &str,
        visible: impl Fn(&Tool) -> bool,
    ) -> Vec<&'a str> {
        let mut found: Vec<(usize, &str)> = Vec::new();
        if wanted.is_empty() || wanted.len() > MAX_NAME + MAX_EDITS {
            return Vec::new();
        }
        let edits = (wanted.len().max(3) / 3).min(MAX_EDITS);
        for tool in &self.tools {
            let name = tool.name();
            let rank = if mounted(name, wanted) || mounted(wanted, name) {
                Some(0)
            } else {
                distance_within(wanted.as_bytes(), name.as_bytes(), edits).map(|d| 1 + d)
            };
            if let Some(rank) = rank
                && visible(tool)
            {
                found.push((rank, name));
            }
        }
        found.sort_by_key(|&(rank, _)| rank);
        found
            .into_iter()
            .take(MAX_SUGGESTIONS)
            .map(|(_, name)| name)
            .collect()
    }
}

impl Snapshot {
    /// `Tool <name> not found`, naming at most [`MAX_SUGGESTIONS`] tools
    /// `visible` lets the caller see that it may have meant (`; did you mean
    /// "ops_crunch"?`, [`similar`](Self::similar)), each quoted in at most
    /// [`QUOTED_NAME`] characters; and those names, whole. `shown` is how
    /// the name asked for is written into the message. What HAIP's
    /// `TOOL_NOT_FOUND` and MCP's unknown tool both say.
    pub(crate) fn not_found(
        &self,
        wanted: &str,
        shown: &str,
        visible: impl Fn(&Tool) -> bool,
    ) -> (String, Vec<String>) {
        let similar: Vec<String> = self
            .similar(wanted, visible)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut message = format!("Tool {shown} not found");
        let quoted: Vec<String> = similar.iter().map(|n| quote_name(n)).collect();
        if let Some((last, rest)) = quoted.split_last() {
            message.push_str("; did you mean ");
            if !rest.is_empty() {
                message.push_str(&rest.join(", "));
                message.push_str(" or ");
            }
            message.push_str(last);
            message.push('?');
        }
        (message, similar)
    }
}

/// The most characters of a tool name an error message quotes.
pub(crate) const QUOTED_NAME: usize = 64;

/// `name` in double quotes, cut to [`QUOTED_NAME`] characters (the last of
/// them `…`) when longer.
fn quote_name(name: &str) -> String {
    if name.chars().count() <= QUOTED_NAME {
        format!("\"{name}\"")
    } else {
        let cut: String = name.chars().take(QUOTED_NAME - 1).collect();
        format!("\"{cut}…\"")
    }
}

/// How many names [`Snapshot::similar`] suggests at most.
pub(crate) const MAX_SUGGESTIONS: usize = 3;
/// The longest tool name (`tool::validate_name`).
const MAX_NAME: usize = 128;
/// The most edits between a name asked for and a name suggested.
const MAX_EDITS: usize = 3;

/// Whether `name` is `base` under a prefix: `<prefix><separator><base>`,
/// the separator one a tool name may hold (`_`, `.`, `-`).
fn mounted(name: &str, base: &str) -> bool {
    name.len() > base.len() + 1
        && name.ends_with(base)
        && matches!(
            name.as_bytes()[name.len() - base.len() - 1],
            b'_' | b'.' | b'-'
        )
}

/// The edit distance (Levenshtein, ASCII case ignored) between `a` and `b`
/// when it is at most `max`; `None` beyond. Only the band of `max` around
/// the diagonal is computed, and a row entirely beyond `max` ends the walk:
/// at most `(2 max + 1)` steps per byte of `a`.
fn distance_within(a: &[u8], b: &[u8], max: usize) -> Option<usize> {
    if max == 0 || a.len().abs_diff(b.len()) > max {
        return None;
    }
    let beyond = max + 1;
    // prev[j]: the distance between a[..i] and b[..j]; beyond the band it
    // counts as `beyond`.
    let mut prev: Vec<usize> = (0..=b.len()).map(|j| j.min(beyond)).collect();
    let mut row = vec![beyond; b.len() + 1];
    for i in 1..=a.len() {
        row.fill(beyond);
        if i <= max {
            row[0] = i;
        }
        let from = i.saturating_sub(max).max(1);
        let to = (i + max).min(b.len());
        let mut least = row[0];
        for j in from..=to {
            let same = a[i - 1].eq_ignore_ascii_case(&b[j - 1]);
            let d = (prev[j - 1] + usize::from(!same))
                .min(prev[j] + 1)
                .min(row[j - 1] + 1)
                .min(beyond);
            row[j] = d;
            least = least.min(d);
        }
        if least > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut row);
    }
    Some(prev[b.len()]).filter(|&d| d <= max)
}

impl Registry {
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        // A poisoned lock only means a writer panicked between two complete
        // snapshots; the stored snapshot is still whole.
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Wakes on every later change of the registry.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn get(&self, name: &str) -> Option<Tool> {
        self.snapshot().get(name).cloned()
    }

    /// Adds `tool` at the end, or replaces the tool of the same name in place.
    /// Returns the replaced tool.
    pub(crate) fn register(&self, tool: Tool) -> Option<Tool> {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let mut tools = guard.tools.clone();
        let replaced = match guard.index.get(tool.name()) {
            Some(&i) => Some(std::mem::replace(&mut tools[i], tool)),
            None => {
                tools.push(tool);
                None
            }
        };
        *guard = Arc::new(Snapshot::new(tools));
        drop(guard);
        self.changed();
        replaced
    }

    /// Changes the tool list in one step: readers see it before or after `f`,
    /// never half-way. `f` must keep names unique. Used by the MCP import,
    /// which adds and removes the tools it manages.
    #[cfg(feature = "mcp-import")]
    pub(crate) fn edit<R>(&self, f: impl FnOnce(&mut Vec<Tool>) -> R) -> R {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let mut tools = guard.tools.clone();
        let result = f(&mut tools);
        *guard = Arc::new(Snapshot::new(tools));
        drop(guard);
        self.changed();
        result
    }

    /// Removes the tool with this name. Calls already running keep running.
    pub(crate) fn unregister(&self, name: &str) -> Option<Tool> {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        let i = *guard.index.get(name)?;
        let mut tools = guard.tools.clone();
        let removed = tools.remove(i);
        *guard = Arc::new(Snapshot::new(tools));
        drop(guard);
        self.changed();
        Some(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use serde_json::Value;

    fn tool(name: &str, description: &str) -> Tool {
        Tool::builder(name)
            .description(description)
            .handler(|_: Value, _: Context| async { Ok(Value::Null) })
            .build()
            .unwrap()
    }

    fn names(r: &Registry) -> Vec<String> {
        r.snapshot()
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }

    #[cfg(feature = "mcp")]
    #[test]
    fn memos_are_made_once_per_snapshot_key_and_type() {
        let r = Registry::default();
        r.register(tool("a", "first"));
        let made = std::sync::atomic::AtomicUsize::new(0);
        let count = |s: &Snapshot| {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            s.tools().len()
        };
        let snapshot = r.snapshot();
        assert_eq!(*snapshot.memo(1, count), 1);
        assert_eq!(*snapshot.memo(1, count), 1);
        assert_eq!(
            made.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "made once"
        );
        snapshot.memo(2, count);
        assert_eq!(
            made.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "per key"
        );
        assert_eq!(*snapshot.memo(1, |_| "a string"), "a string", "per type");
        // A change is a new snapshot: what was made of the old one is not shown.
        r.register(tool("b", "second"));
        assert_eq!(*r.snapshot().memo(1, count), 2);
        assert_eq!(
            *snapshot.memo(1, count),
            1,
            "the old snapshot keeps its own"
        );
    }

    #[test]
    fn similar_names_are_mounted_ones_first_then_close_ones_at_most_three() {
        let r = Registry::default();
        for name in [
            "ops_crunch",
            "crunch_all",
            "munch",
            "ops.crunch",
            "billing-crunch",
            "x_crunch",
            "secret_crunch",
            "add",
            "adds",
        ] {
            r.register(tool(name, "d"));
        }
        let snapshot = r.snapshot();
        let all = |_: &Tool| true;
        // Mounted under a prefix (any separator), in registry order, at most 3.
        assert_eq!(
            snapshot.similar("crunch", all),
            ["ops_crunch", "ops.crunch", "billing-crunch"]
        );
        // Only what the caller may see.
        let hidden = |t: &Tool| !t.name().starts_with("ops") && t.name() != "billing-crunch";
        assert_eq!(
            snapshot.similar("crunch", hidden),
            ["x_crunch", "secret_crunch", "munch"]
        );
        // A prefix no tool has: the tool without it.
        assert_eq!(snapshot.similar("tools_add", all), ["add"]);
        // A few edits away, closest first, case ignored.
        assert_eq!(
            snapshot.similar("ops_crnch", all),
            ["ops_crunch", "ops.crunch"]
        );
        assert_eq!(snapshot.similar("Munch", all), ["munch"]);
        assert_eq!(snapshot.similar("addd", all), ["add", "adds"]);
        // Short names: one edit at most; nothing close gets nothing.
        assert_eq!(snapshot.similar("ad", all), ["add"]);
        assert!(snapshot.similar("q", all).is_empty());
        assert!(snapshot.similar("zzzzzzzz", all).is_empty());
        assert!(snapshot.similar("", all).is_empty());
        assert!(snapshot.similar(&"a".repeat(10_000), all).is_empty());
    }

    #[test]
    fn the_distance_is_levenshtein_within_a_bound() {
        let d = |a: &str, b: &str, max| distance_within(a.as_bytes(), b.as_bytes(), max);
        assert_eq!(d("kitten", "sitting", 3), Some(3));
        assert_eq!(d("kitten", "sitting", 2), None);
        assert_eq!(d("crunch", "crunch", 1), Some(0));
        assert_eq!(d("crnch", "crunch", 1), Some(1));
        assert_eq!(d("abc", "ABD", 1), Some(1));
        assert_eq!(d("abcdef", "badcfe", 3), None);
        assert_eq!(d("a", "abcd", 2), None);
        assert_eq!(d("", "ab", 2), Some(2));
        assert_eq!(d("flaw", "lawn", 2), Some(2));
    }

    #[test]
    fn keeps_order_replaces_in_place_and_removes() {
        let r = Registry::default();
        r.register(tool("a", "1"));
        r.register(tool("b", "1"));
        r.register(tool("c", "1"));
        assert!(r.register(tool("b", "2")).is_some());
        assert_eq!(names(&r), ["a", "b", "c"]);
        assert_eq!(r.get("b").unwrap().description(), "2");
        let old = r.snapshot();
        assert!(r.unregister("a").is_some());
        assert!(r.unregister("a").is_none());
        assert_eq!(names(&r), ["b", "c"]);
        assert_eq!(r.get("c").unwrap().name(), "c");
        // An earlier snapshot is unaffected.
        assert_eq!(old.tools().len(), 3);
    }
}

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
        }
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
    /// never half-way. `f` must keep names unique.
    #[allow(dead_code)] // used by adapters that manage their own tools (the MCP import)
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

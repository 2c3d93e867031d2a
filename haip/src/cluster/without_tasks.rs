//! Without the `mcp` feature, in `tasks/`'s place: no MCP tasks, so no
//! task store beside the session store, and no records of tasks in Redis.
//! A task signal from another instance finds no task here.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The kind of a message between instances that carries a task signal.
pub(super) const SIGNAL: u8 = b'S';

/// No task store attached to the session store.
#[derive(Default)]
pub(super) struct Attached;

impl Attached {
    /// Nothing to refresh.
    pub(super) fn start(&self, _tasks: &TaskTracker, _shutdown: CancellationToken) {}

    /// Drops a task signal's message body: the server serves no tasks.
    pub(super) fn deliver(&self, _body: &[u8]) {
        tracing::debug!("a task signal for a server without tasks dropped");
    }
}

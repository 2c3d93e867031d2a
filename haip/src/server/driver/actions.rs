//! What a session asks of whoever drives it, carried out (its calls and
//! validations started on the call runner, keep-alives), and the alarm that
//! wakes the loop at the session's next deadline. Both loops use them: the
//! one over a connection (`connection.rs`) and the parked one (`park.rs`).

use tokio::time::Instant;

use crate::exec::CallEvent;
use crate::session::{Action, Attached, Session, Shared};
use crate::transport::frame::{Frame, Writer};

/// Carries out what the session asked for: its calls and validations go to
/// the call runner; a keep-alive frame goes out when nothing else is flowing
/// (`writer` is `None` for a parked session).
pub(super) fn perform(attached: &mut Attached, shared: &Shared, writer: Option<&Writer>) {
    while let Some(action) = attached.session.poll_action() {
        match action {
            Action::Start(start) => {
                // A call that finished on its first poll ends here and now.
                if let Some((key, outcome)) = shared.runner.start(*start, attached.events_tx()) {
                    attached
                        .session
                        .handle_event(CallEvent::Finished(key, outcome));
                }
            }
            Action::Validate(validate) => shared
                .runner
                .start_validation(*validate, attached.events_tx()),
            Action::KeepAlive => {
                if let Some(writer) = writer
                    && writer.meter.bytes() == 0
                {
                    writer.send(Frame::KeepAlive);
                }
            }
        }
    }
}

/// A sleep until the session's next deadline, re-armed only when it moves.
pub(super) struct Alarm {
    pub(super) at: Option<std::time::Instant>,
}

impl Alarm {
    /// Arms `sleep` for the session's next deadline, if that changed.
    pub(super) fn arm(&mut self, session: &Session, sleep: std::pin::Pin<&mut tokio::time::Sleep>) {
        let next = session.poll_timeout();
        if next != self.at {
            self.at = next;
            if let Some(at) = next {
                sleep.reset(Instant::from_std(at));
            }
        }
    }

    /// The sleep fired: re-arm on the next turn even if the deadline is the same.
    pub(super) fn fired(&mut self) {
        self.at = None;
    }
}

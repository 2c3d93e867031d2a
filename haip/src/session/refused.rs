//! Why a resumption is refused (docs/protocol.md §11.3: `RESUME_FAILED`, its
//! `detail.reason`), or why a step toward one failed: one type, so that
//! code branches on what happened, never on the text a client reads.

/// Why a session cannot be resumed, now or at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeRefused {
    /// `last_rx_seq` is missing, or beyond what the session has sent.
    InvalidLastRxSeq,
    /// What the client missed is no longer in the replay window.
    WindowExceeded,
    /// No session of that id, here or in the shared store.
    UnknownSession,
    /// The session belongs to another subject.
    SubjectMismatch,
    /// Another instance is restoring the session (and will say so in a
    /// moment, or give up within its claim).
    #[cfg(feature = "redis")]
    BeingResumed,
    /// No instance listens where the session's owner should: it died and its
    /// lease has not expired yet, or it lost its subscription for a moment.
    Unreachable,
    /// Another instance holds the session, and this store cannot reach it.
    HeldElsewhere,
    /// Another live instance holds the session, and the connection has no
    /// `HAI` to relay to it.
    HeldByLiveInstance,
    /// The shared store did not answer.
    #[cfg(feature = "redis")]
    StoreUnavailable,
    /// The shared store did not answer in time.
    StoreTimedOut,
    /// Records of the session were lost while the store was away: it is
    /// never restored from a gap.
    #[cfg(feature = "redis")]
    RecordsLost,
    /// A `HAI` asking to resume that is not the connection's first message.
    NotFirstMessage,
    /// This server shuts down before it could answer: nothing is sent, the
    /// connection closes with the others and its client resumes elsewhere.
    ShuttingDown,
}

impl ResumeRefused {
    /// The reason as clients read it (`detail.reason`).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            ResumeRefused::InvalidLastRxSeq => "invalid last_rx_seq",
            ResumeRefused::WindowExceeded => "window exceeded",
            ResumeRefused::UnknownSession => "unknown session",
            ResumeRefused::SubjectMismatch => "subject mismatch",
            #[cfg(feature = "redis")]
            ResumeRefused::BeingResumed => "session being resumed elsewhere",
            ResumeRefused::Unreachable => "the instance holding the session is unreachable",
            ResumeRefused::HeldElsewhere => "session held by another instance",
            ResumeRefused::HeldByLiveInstance => "session held by another live instance",
            #[cfg(feature = "redis")]
            ResumeRefused::StoreUnavailable => "session store unavailable",
            ResumeRefused::StoreTimedOut => "session store timed out",
            #[cfg(feature = "redis")]
            ResumeRefused::RecordsLost => "records lost while the session store was away",
            ResumeRefused::NotFirstMessage => "not first message",
            ResumeRefused::ShuttingDown => "server shutdown",
        }
    }
}

impl std::fmt::Display for ResumeRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

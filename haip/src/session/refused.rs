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
    /// No instance listens where the session's owner should: it died and its
    /// lease has not expired yet, or it lost its subscription for a moment.
    Unreachable,
    /// A `HAI` asking to resume that is not the connection's first message.
    NotFirstMessage,
    // Only a store shared by several instances (feature `redis`) restores
    // a session from elsewhere or relays to the instance that runs it: the
    // reasons below are its.
    /// Another instance is restoring the session (and will say so in a
    /// moment, or give up within its claim).
    #[cfg(feature = "redis")]
    BeingResumed,
    /// Another instance holds the session, and this store cannot reach it.
    #[cfg(feature = "redis")]
    HeldElsewhere,
    /// Another live instance holds the session, and the connection has no
    /// `HAI` to relay to it.
    #[cfg(feature = "redis")]
    HeldByLiveInstance,
    /// The shared store did not answer.
    #[cfg(feature = "redis")]
    StoreUnavailable,
    /// The shared store did not answer in time.
    #[cfg(feature = "redis")]
    StoreTimedOut,
    /// Records of the session were lost while the store was away: it is
    /// never restored from a gap.
    #[cfg(feature = "redis")]
    RecordsLost,
    /// This server shuts down before it could answer (while a resumption
    /// waits for the instance holding the session): nothing is sent, the
    /// connection closes with the others and its client resumes elsewhere.
    #[cfg(feature = "redis")]
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
            ResumeRefused::Unreachable => "the instance holding the session is unreachable",
            ResumeRefused::NotFirstMessage => "not first message",
            #[cfg(feature = "redis")]
            ResumeRefused::BeingResumed => "session being resumed elsewhere",
            #[cfg(feature = "redis")]
            ResumeRefused::HeldElsewhere => "session held by another instance",
            #[cfg(feature = "redis")]
            ResumeRefused::HeldByLiveInstance => "session held by another live instance",
            #[cfg(feature = "redis")]
            ResumeRefused::StoreUnavailable => "session store unavailable",
            #[cfg(feature = "redis")]
            ResumeRefused::StoreTimedOut => "session store timed out",
            #[cfg(feature = "redis")]
            ResumeRefused::RecordsLost => "records lost while the session store was away",
            #[cfg(feature = "redis")]
            ResumeRefused::ShuttingDown => "server shutdown",
        }
    }
}

impl std::fmt::Display for ResumeRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

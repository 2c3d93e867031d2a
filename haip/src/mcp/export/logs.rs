//! A call's log lines relayed to its MCP client as `notifications/message`,
//! at the level the client asked for, and the log levels of both sides.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use crate::mcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProtocolVersion};
use serde::Deserialize;
use serde_json::Value;

use super::ExportService;
use super::request::CallRequest;
use crate::context::{CallSlot, LogLevel, LogLine};
use crate::tool::Tool;

impl ExportService {
    /// The relay of a call's log lines to the client of `request`.
    pub(super) fn log_relay<'a>(
        &'a self,
        request: &'a CallRequest<'a>,
        tool: &'a Tool,
    ) -> LogRelay<'a> {
        LogRelay {
            request,
            level: &self.log_level,
            // A level in the request's `_meta` (how a stateless client says
            // it: no `logging/setLevel` outlives its request) wins.
            requested: request
                .meta
                .get("io.modelcontextprotocol/logLevel")
                .and_then(|l| LoggingLevel::deserialize(l).ok())
                .map(|l| log_level(l) as u8),
            logger: tool.name(),
        }
    }
}

/// Sends a call's log lines to the MCP client as `notifications/message`,
/// in order, those at or above the level it set.
pub(super) struct LogRelay<'a> {
    request: &'a CallRequest<'a>,
    level: &'a AtomicU8,
    /// The request's own level (`_meta` `io.modelcontextprotocol/logLevel`).
    requested: Option<u8>,
    logger: &'a str,
}

impl LogRelay<'_> {
    pub(super) async fn flush(&self, slot: &CallSlot) {
        let (lines, dropped) = slot.take_logs();
        let dropped = (dropped > 0).then(|| LogLine::dropped(dropped));
        let least = match self.requested {
            Some(level) => level,
            // MCP 2026-07-28: a request that names no `logLevel` in its
            // `_meta` gets no log lines (there is no `logging/setLevel`).
            None if per_request(self.request.link.session_version().as_ref()) => {
                return;
            }
            None => self.level.load(Relaxed),
        };
        for line in lines.iter().chain(dropped.as_ref()) {
            if (line.level as u8) < least {
                continue;
            }
            let data = match &line.data {
                None => Value::String(line.message.clone()),
                Some(data) => serde_json::json!({"message": line.message, "data": data}),
            };
            let note = LoggingMessageNotificationParam::new(mcp_level(line.level), data)
                .with_logger(self.logger);
            // A client that went away just misses its log lines.
            self.request.link.log(note).await;
        }
    }
}

/// The MCP level of a HAIP log level, and back.
fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

pub(super) fn log_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        _ => LogLevel::Error,
    }
}

/// Whether `version` is MCP 2026-07-28 or later: a revision whose requests
/// carry what they need in their `_meta` (no `initialize`, no
/// `logging/setLevel`).
pub(super) fn per_request(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

//! Layers around tool calls: code that runs before and after every call,
//! HAIP and MCP alike, without touching the tools.
//!
//! A [`Layer`] gets the [`Call`] (the tool, its params, its [`Context`]) and
//! the [`Next`] step (the layers after it, then the tool). It may refuse the
//! call (return an error without running `next`), rewrite its params before
//! they are checked against the tool's input schema, rewrite the result, or
//! just watch the outcome. [`ServerBuilder::layer`](crate::ServerBuilder::layer)
//! adds one; the first added is the outermost: it sees the call first and the
//! outcome last.
//!
//! ```
//! use haip::layer::{Call, Layer, Next};
//! use haip::ToolError;
//! use serde_json::Value;
//!
//! /// Writes one line per call: who called what, and how it ended.
//! struct Audit;
//!
//! impl Layer for Audit {
//!     async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
//!         let (tool, who) = (call.name().to_owned(), call.subject().map(str::to_owned));
//!         let outcome = next.run(call).await;
//!         tracing::info!(tool, who, ok = outcome.is_ok(), "audit");
//!         outcome
//!     }
//! }
//!
//! let builder = haip::Server::builder().layer(Audit);
//! # drop(builder);
//! ```
//!
//! [`from_fn`] makes a layer of an async closure.
//!
//! Ready-made layers: [`RateLimit`] (calls per subject, refused with
//! `RATE_LIMITED` and a `retry_after_ms` hint), [`ConcurrencyLimit`] (calls
//! of one tool at once), [`Cache`] (results of tools marked idempotent and
//! not destructive, bounded in bytes) and [`MaskErrors`] (internal error text replaced by a
//! reference the log keeps).
//!
//! # Where layers run
//!
//! In the call's own task, after the session or the MCP request admitted the
//! call (authentication, scopes, the session's limits on calls in flight)
//! and before its params are checked: the params a layer passes on are
//! checked against the tool's input schema just before the tool runs (an
//! invalid call ends with `INVALID_PARAMS`, which the layers see as an
//! error). The call's timeout and cancellation cover its layers: a call
//! cancelled while a layer waits is stopped like a tool would be. A tool that
//! panics is reported as `INTERNAL_ERROR` without passing back through the
//! layers.
//!
//! A server without layers runs its tools directly and checks params before
//! they are admitted, as it always did: layers cost nothing until one is
//! added.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::context::{Caller, Context};
use crate::exec::{self, Around, Unchecked, Validation};
use crate::protocol::ErrorCode;
use crate::tool::{Tool, ToolError, ToolFuture};

mod cache;
mod concurrency;
mod mask;
mod rate;
#[cfg(test)]
mod tests;

pub use cache::Cache;
pub use concurrency::ConcurrencyLimit;
pub use mask::MaskErrors;
pub use rate::RateLimit;

/// Code around every tool call. See the [module docs](self).
///
/// Write `async fn call` in the `impl`; the future must be `Send`.
pub trait Layer: Send + Sync + 'static {
    /// Handles `call`: usually does something, then `next.run(call).await`,
    /// then something with the outcome.
    fn call(&self, call: Call, next: Next)
    -> impl Future<Output = Result<Value, ToolError>> + Send;
}

/// One call as a layer sees it: the tool, its params (not yet checked
/// against the tool's input schema) and its [`Context`].
pub struct Call {
    tool: Tool,
    params: Value,
    ctx: Context,
}

impl Call {
    /// The tool called.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        self.tool.name()
    }

    /// The params, as the client sent them or as an earlier layer left them.
    pub fn params(&self) -> &Value {
        &self.params
    }

    /// The params, to rewrite. They are checked against the tool's input
    /// schema after the last layer.
    pub fn params_mut(&mut self) -> &mut Value {
        &mut self.params
    }

    /// The call's context: its ids, its caller, its cancellation.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Who made the call, when authentication is on.
    pub fn caller(&self) -> Option<&Caller> {
        self.ctx.caller()
    }

    /// The caller's subject, when authentication is on.
    pub fn subject(&self) -> Option<&str> {
        self.ctx.subject()
    }
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("tool", &self.tool.name())
            .field("call_id", &self.ctx.call_id())
            .finish_non_exhaustive()
    }
}

/// The rest of a call's way: the layers after this one, then the check of
/// the params, then the tool. Run it at most once.
pub struct Next {
    stack: Arc<Stack>,
    index: usize,
    unchecked: Option<Unchecked>,
}

impl Next {
    /// Runs the rest of the call and returns its outcome.
    pub async fn run(mut self, call: Call) -> Result<Value, ToolError> {
        let Some(layer) = self.stack.layers.get(self.index).cloned() else {
            return self.end(call).await;
        };
        self.index += 1;
        layer.call_boxed(call, self).await
    }

    /// The rest of the call as one boxed future: the next layer's own, when
    /// there is one (no second box around it).
    fn into_future(mut self, call: Call) -> BoxFuture<'static> {
        match self.stack.layers.get(self.index).cloned() {
            Some(layer) => {
                self.index += 1;
                layer.call_boxed(call, self)
            }
            None => Box::pin(self.run(call)),
        }
    }

    /// After the last layer: the params checked, then the tool.
    async fn end(self, call: Call) -> Result<Value, ToolError> {
        let Call {
            tool,
            mut params,
            ctx,
        } = call;
        if let Some(Unchecked {
            max_violations,
            large,
        }) = self.unchecked
        {
            let validating = ctx.trace().mark();
            let verdict = if large {
                let validators = Arc::clone(&self.stack.validators);
                // Boxed: rarely taken, and it would make every call's future larger.
                let check = exec::check_large(&validators, tool.clone(), params, max_violations);
                Box::pin(check).await
            } else {
                exec::admit::check(&tool, params, max_violations)
            };
            ctx.trace().child("tool.validate", validating);
            params = match verdict {
                Validation::Valid(params) => params,
                Validation::Invalid(found) => return Err(ToolError::violated(tool.name(), found)),
                Validation::Failed => {
                    let failure = exec::check_failed(tool.name());
                    return Err(ToolError::new(failure.code, failure.message));
                }
            };
        }
        tool.call(params, ctx).await
    }
}

impl std::fmt::Debug for Next {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("layers_left", &(self.stack.layers.len() - self.index))
            .finish()
    }
}

/// A layer made of an async function of the call and the rest of its way.
///
/// ```
/// use haip::layer::{Call, Next, from_fn};
/// use haip::ToolError;
///
/// // Lower-cases the `city` param of every call that has one.
/// let lower = from_fn(|mut call: Call, next: Next| async move {
///     if let Some(city) = call.params_mut().get_mut("city")
///         && let Some(text) = city.as_str()
///     {
///         *city = text.to_lowercase().into();
///     }
///     next.run(call).await
/// });
/// let builder = haip::Server::builder().layer(lower);
/// # drop(builder);
/// ```
pub fn from_fn<F, Fut>(f: F) -> FromFn<F>
where
    F: Fn(Call, Next) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    FromFn(f)
}

/// A layer made by [`from_fn`].
#[derive(Clone)]
pub struct FromFn<F>(F);

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FromFn")
    }
}

impl<F, Fut> Layer for FromFn<F>
where
    F: Fn(Call, Next) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(
        &self,
        call: Call,
        next: Next,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send {
        (self.0)(call, next)
    }
}

type BoxFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'a>>;

/// A [`Layer`] behind a pointer: its future boxed, holding the layer.
pub(crate) trait DynLayer: Send + Sync + 'static {
    fn call_boxed(self: Arc<Self>, call: Call, next: Next) -> BoxFuture<'static>;
}

impl<L: Layer> DynLayer for L {
    fn call_boxed(self: Arc<Self>, call: Call, next: Next) -> BoxFuture<'static> {
        Box::pin(async move { self.call(call, next).await })
    }
}

/// The server's layers, outermost first, and what checks params after them.
pub(crate) struct Stack {
    layers: Box<[Arc<dyn DynLayer>]>,
    /// The runner's large-params validators (docs/protocol.md §18.1).
    validators: Arc<Semaphore>,
}

impl Stack {
    pub(crate) fn new(layers: Vec<Arc<dyn DynLayer>>, validators: Arc<Semaphore>) -> Stack {
        Stack {
            layers: layers.into_boxed_slice(),
            validators,
        }
    }
}

impl Around for Stack {
    fn call(
        self: Arc<Self>,
        tool: Tool,
        params: Value,
        ctx: Context,
        unchecked: Option<Unchecked>,
    ) -> ToolFuture {
        let next = Next {
            stack: self,
            index: 0,
            unchecked,
        };
        next.into_future(Call { tool, params, ctx })
    }
}

/// A `RATE_LIMITED` refusal saying when to try again: `retry_after_ms` in its
/// details.
pub(crate) fn rate_limited(message: String, wait: std::time::Duration) -> ToolError {
    ToolError::new(ErrorCode::RATE_LIMITED, message)
        .with_details(serde_json::json!({ "retry_after_ms": retry_ms(wait) }))
}

/// `wait` in whole milliseconds, rounded up, at least 1.
pub(crate) fn retry_ms(wait: std::time::Duration) -> u64 {
    u64::try_from(wait.as_micros().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

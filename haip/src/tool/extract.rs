//! What a `#[haip_tool]` function can ask for besides its schema parameters:
//! [`State<T>`] and the whole params object as [`Params<T>`].

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::{Context, ToolError};

/// Shared application state registered with
/// [`ServerBuilder::state`](crate::ServerBuilder::state), handed to tools that
/// take a `State<T>` parameter. Cheap to clone.
///
/// A tool that asks for a state the server was not given is a start-up error,
/// never a per-call failure.
///
/// ```
/// use haip::{haip_tool, State};
///
/// struct Greeting(String);
///
/// /// Greet someone with the configured greeting.
/// #[haip_tool]
/// async fn greet(name: String, greeting: State<Greeting>) -> String {
///     format!("{}, {name}!", greeting.0)
/// }
///
/// let server = haip::Server::builder()
///     .state(Greeting("Hello".into()))
///     .tool(greet::tool())
///     .build();
/// assert!(server.is_ok());
/// ```
pub struct State<T: ?Sized>(Arc<T>);

impl<T> State<T> {
    /// Wraps a value, e.g. to call a tool function directly in a test.
    pub fn new(value: T) -> State<T> {
        State(Arc::new(value))
    }
}

impl<T: ?Sized> From<Arc<T>> for State<T> {
    fn from(value: Arc<T>) -> Self {
        State(value)
    }
}

impl<T: ?Sized> State<T> {
    /// The shared value.
    pub fn into_inner(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        State(Arc::clone(&self.0))
    }
}

impl<T: ?Sized> Deref for State<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&&*self.0).finish()
    }
}

/// The whole params object deserialised into `T`: a `#[haip_tool]` function
/// whose only schema parameter is `Params<T>` gets `T`'s schema as its input
/// schema (instead of one property per parameter).
///
/// ```
/// use haip::{haip_tool, Params};
///
/// #[haip::data]
/// struct Search {
///     /// What to look for.
///     query: String,
///     /// How many results at most.
///     limit: Option<u32>,
/// }
///
/// /// Search the catalogue.
/// #[haip_tool]
/// async fn search(Params(search): Params<Search>) -> Vec<String> {
///     vec![search.query; search.limit.unwrap_or(1) as usize]
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params<T>(pub T);

impl<T> Deref for Params<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Application state by type.
#[derive(Default, Clone)]
pub(crate) struct StateMap {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl StateMap {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
    }

    pub(crate) fn contains(&self, id: TypeId) -> bool {
        self.values.contains_key(&id)
    }

    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<State<T>> {
        let value = Arc::clone(self.values.get(&TypeId::of::<T>())?);
        value.downcast::<T>().ok().map(State)
    }
}

/// A state type a tool needs: checked when the server is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateRequirement {
    pub(crate) id: TypeId,
    pub(crate) name: &'static str,
}

/// A parameter filled in by the runtime rather than from params:
/// [`Context`] and [`State<T>`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be injected into a tool",
    note = "only `haip::Context` and `haip::State<T>` are injected; other parameters come from the call's params"
)]
pub trait Injected: Sized {
    /// The state this needs, if any.
    #[doc(hidden)]
    fn requirement() -> Option<(TypeId, &'static str)>;
    /// Takes it from the call's context.
    #[doc(hidden)]
    fn extract(ctx: &Context) -> Result<Self, ToolError>;
}

impl Injected for Context {
    fn requirement() -> Option<(TypeId, &'static str)> {
        None
    }
    fn extract(ctx: &Context) -> Result<Self, ToolError> {
        Ok(ctx.clone())
    }
}

impl<T: Send + Sync + 'static> Injected for State<T> {
    fn requirement() -> Option<(TypeId, &'static str)> {
        Some((TypeId::of::<T>(), type_name::<T>()))
    }
    fn extract(ctx: &Context) -> Result<Self, ToolError> {
        // Checked at start-up; reaching this means the tool was registered
        // around that check (a bug), which gets an error rather than a panic.
        ctx.state::<T>().ok_or_else(|| {
            ToolError::new(
                crate::protocol::ErrorCode::INTERNAL_ERROR,
                format!("state {} is not registered", type_name::<T>()),
            )
        })
    }
}

//! Tools: the [`Tool`] value, its handler, errors and the ordered registry.

pub(crate) mod builtin;
mod edit;
pub(crate) mod error;
mod extract;
mod registry;
mod tags;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Context;
use crate::content::Shape;
use crate::protocol::{Icon, ToolAnnotations};
use crate::schema::{
    CompiledSchema, Profiles, SchemaProblem, SchemaProfile, Violation, Violations,
};

pub use edit::ToolEdit;
pub use error::ToolError;
pub use extract::{Injected, Params, State};
pub(crate) use extract::{StateMap, StateRequirement};
pub(crate) use registry::Registry;
pub(crate) use tags::{TAG_RULE, TagFilter};

/// The future a tool handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;

/// What runs when a tool is called: JSON params and a [`Context`] in, a JSON
/// result or a [`ToolError`] out.
///
/// Implemented for every `Fn(Value, Context) -> impl Future<Output = Result<Value, ToolError>>`,
/// so a closure is usually all a hand-written tool needs. `#[haip_tool]` implements
/// it for annotated functions.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a tool handler",
    note = "a handler is `Fn(serde_json::Value, haip::Context) -> impl Future<Output = Result<serde_json::Value, haip::ToolError>>`, or annotate an async fn with `#[haip_tool]`"
)]
pub trait ToolHandler: Send + Sync + 'static {
    /// Runs the tool once. `params` has already passed the input schema.
    fn call(&self, params: Value, ctx: Context) -> ToolFuture;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, params: Value, ctx: Context) -> ToolFuture {
        Box::pin(self(params, ctx))
    }
}

/// A blocking handler, run on tokio's blocking thread pool.
struct Blocking<F>(Arc<F>);

impl<F> ToolHandler for Blocking<F>
where
    F: Fn(Value, Context) -> Result<Value, ToolError> + Send + Sync + 'static,
{
    fn call(&self, params: Value, ctx: Context) -> ToolFuture {
        let f = Arc::clone(&self.0);
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || f(params, ctx)).await {
                Ok(result) => result,
                // Re-raise so the executor reports it like any other panic.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Err(ToolError::cancelled()),
            }
        })
    }
}

/// A tool: a name, a description, JSON Schemas and a handler. Cheap to clone.
///
/// ```
/// use haip::{Tool, ToolError};
/// use serde_json::json;
///
/// let shout = Tool::builder("shout")
///     .description("Upper-case the input")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {"text": {"type": "string"}},
///         "required": ["text"]
///     }))
///     .handler(|params: serde_json::Value, _ctx| async move {
///         let text = params["text"].as_str().unwrap_or_default();
///         Ok::<_, ToolError>(json!({ "text": text.to_uppercase() }))
///     })
///     .build()
///     .unwrap();
/// assert_eq!(shout.name(), "shout");
/// ```
#[derive(Clone)]
pub struct Tool {
    inner: Arc<ToolInner>,
}

struct ToolInner {
    name: String,
    description: String,
    /// What people are shown instead of the name (docs/protocol.md §6.13).
    title: Option<String>,
    annotations: ToolAnnotations,
    icons: Vec<Icon>,
    /// Whether an MCP client may get the call as a task.
    task_support: TaskSupport,
    /// OAuth scopes a caller needs to call it (sorted, no duplicates).
    scopes: Vec<String>,
    /// Labels for choosing which tools a server serves (sorted, no duplicates).
    tags: Vec<String>,
    input_schema: Value,
    output_schema: Option<Value>,
    /// Whether results carry content blocks (read from the output schema).
    shape: Shape,
    input: CompiledSchema,
    output: Option<CompiledSchema>,
    /// The schemas as each profile advertises them (docs/protocol.md §6.14).
    profiles: Profiles,
    timeout: Option<Duration>,
    /// Shared with the tools made from this one by [`Tool::edit`].
    handler: Arc<dyn ToolHandler>,
    required_state: Vec<StateRequirement>,
    /// What the layers serving the tool know about it beyond this (the MCP
    /// import marks the tools it imports, for the MCP export).
    marks: Marks,
    /// The `#[haip_tool]` function it was built from, kept by edits: how
    /// `annotated_tools` knows a tool it was also given.
    definition: Option<&'static Definition>,
}

/// The `#[haip_tool]` function a tool was built from: one `static` per
/// function (its address is its identity), made by the macro. Not public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct Definition {
    /// The tool's name as written.
    pub name: &'static str,
    /// `module_path!()` of the function.
    pub module: &'static str,
    /// `file!()` of the function.
    pub file: &'static str,
    /// `line!()` of the function.
    pub line: u32,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.inner.name)
            .field("title", &self.inner.title)
            .field("description", &self.inner.description)
            .field("annotations", &self.inner.annotations)
            .field("scopes", &self.inner.scopes)
            .field("tags", &self.inner.tags)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// Starts building a tool with this name (1 to 128 characters, each a
    /// letter, digit, `_`, `-` or `.`: MCP's rule; checked by
    /// [`ToolBuilder::build`]).
    pub fn builder(name: impl Into<String>) -> ToolBuilder {
        ToolBuilder {
            name: name.into(),
            description: String::new(),
            title: None,
            annotations: ToolAnnotations::default(),
            icons: Vec::new(),
            task_support: TaskSupport::Forbidden,
            scopes: Vec::new(),
            tags: Vec::new(),
            input_schema: json!({ "type": "object" }),
            output_schema: None,
            timeout: None,
            handler: None,
            required_state: Vec::new(),
            marks: Default::default(),
            definition: None,
        }
    }

    /// The `#[haip_tool]` function it was built from, if any (edits keep it).
    pub(crate) fn definition(&self) -> Option<&'static Definition> {
        self.inner.definition
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The description shown in `TOOL_LIST` (may be empty).
    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// The name people are shown, when it has one ([`ToolBuilder::title`]).
    pub fn title(&self) -> Option<&str> {
        self.inner.title.as_deref()
    }

    /// The hints it declares about its behaviour ([`ToolBuilder::annotations`]);
    /// empty when it declares none.
    pub fn annotations(&self) -> &ToolAnnotations {
        &self.inner.annotations
    }

    /// Its icons, in the order given ([`ToolBuilder::icon`]).
    pub fn icons(&self) -> &[Icon] {
        &self.inner.icons
    }

    /// Whether an MCP client that takes tasks gets calls of it as tasks
    /// ([`ToolBuilder::task_support`]).
    pub fn task_support(&self) -> TaskSupport {
        self.inner.task_support
    }

    /// The OAuth scopes a caller must hold to call it
    /// ([`ToolBuilder::scopes`]), sorted.
    pub fn scopes(&self) -> &[String] {
        &self.inner.scopes
    }

    /// Its tags ([`ToolBuilder::tags`]), sorted.
    pub fn tags(&self) -> &[String] {
        &self.inner.tags
    }

    /// The JSON Schema its params are validated against (what the `full`
    /// profile advertises).
    pub fn input_schema(&self) -> &Value {
        &self.inner.input_schema
    }

    /// The JSON Schema of its result, if it declares one.
    pub fn output_schema(&self) -> Option<&Value> {
        self.inner.output_schema.as_ref()
    }

    /// The input schema clients are shown under `profile` (docs/protocol.md §6.14);
    /// `None` when that profile cannot serve this tool (see
    /// [`schema_problems`](Self::schema_problems)).
    ///
    /// ```
    /// use haip::{SchemaProfile, Tool};
    /// use serde_json::json;
    ///
    /// let tool = Tool::builder("greet")
    ///     .input_schema(json!({
    ///         "type": "object",
    ///         "properties": {"name": {"type": ["string", "null"]}}
    ///     }))
    ///     .handler(|_, _| async { Ok(json!("hi")) })
    ///     .build()
    ///     .unwrap();
    /// let portable = tool.advertised_input_schema(SchemaProfile::Portable).unwrap();
    /// assert_eq!(portable["properties"]["name"], json!({"type": "string"}));
    /// let strict = tool.advertised_input_schema(SchemaProfile::OpenAiStrict).unwrap();
    /// assert_eq!(strict["required"], json!(["name"]));
    /// ```
    pub fn advertised_input_schema(&self, profile: SchemaProfile) -> Option<&Value> {
        self.inner.profiles.input(&self.inner.input_schema, profile)
    }

    /// The output schema clients are shown under `profile`: the one written
    /// for `full`, otherwise only loosened (no `$schema`, common formats
    /// only), so that it still accepts every result.
    pub fn advertised_output_schema(&self, profile: SchemaProfile) -> Option<&Value> {
        self.inner
            .profiles
            .output(self.inner.output_schema.as_ref(), profile)
    }

    /// What `profile` cannot express of the input schema, or why it cannot
    /// serve this tool at all ([`SchemaProblem::refused`]). Empty for `full`.
    pub fn schema_problems(&self, profile: SchemaProfile) -> &[SchemaProblem] {
        self.inner.profiles.problems(profile)
    }

    /// Its own timeout, if any (else the server's `tool_timeout`).
    pub fn timeout(&self) -> Option<Duration> {
        self.inner.timeout
    }

    /// Every violation of the input schema by `params` (empty when valid),
    /// as they are sent (before any profile's shapes are taken for what they
    /// mean: see [`advertised_input_schema`](Self::advertised_input_schema)).
    pub fn validate_params(&self, params: &Value) -> Vec<Violation> {
        self.inner.input.violations(params)
    }

    /// The first `max` violations of the input schema by `params`, and how
    /// many there are. Params shaped by a profile are first taken as the
    /// schema means them (docs/protocol.md §6.14: a `null` for an optional property
    /// is its absence, `{key, value}` pairs where a map is expected are the
    /// map), in place.
    pub(crate) fn check_params(&self, params: &mut Value, max: usize) -> Violations {
        if self.inner.profiles.normalize {
            crate::schema::normalize_params(&self.inner.input_schema, params);
        }
        self.inner.input.check(params, max)
    }

    /// The first `max` violations of the output schema by `result` (none when
    /// valid or undeclared), and how many there are.
    pub(crate) fn check_result(&self, result: &Value, max: usize) -> Violations {
        match &self.inner.output {
            Some(schema) => schema.check(result, max),
            None => Violations::default(),
        }
    }

    /// The state types its handler needs.
    pub(crate) fn required_state(&self) -> &[StateRequirement] {
        &self.inner.required_state
    }

    pub(crate) fn call(&self, params: Value, ctx: Context) -> ToolFuture {
        self.inner.handler.call(params, ctx)
    }

    /// Whether its results carry content blocks (docs/protocol.md §6.12).
    pub(crate) fn shape(&self) -> Shape {
        self.inner.shape
    }

    /// The result a value its handler returned becomes (`{"content": [...]}`
    /// for a tool returning `Content` or `Vec<Content>`).
    pub(crate) fn shape_output(&self, value: Value) -> Value {
        self.shape().wrap(value)
    }
}

/// Marks on a tool, one per type: what an adapter records about a tool for
/// itself (the MCP import's "results are MCP content blocks"), without the
/// calls layer knowing what they mean.
#[cfg(feature = "mcp-import")]
#[derive(Default, Clone)]
struct Marks(Vec<Arc<dyn std::any::Any + Send + Sync>>);

/// Without the `mcp-import` feature no adapter marks tools: a tool holds none.
#[cfg(not(feature = "mcp-import"))]
#[derive(Default, Clone)]
struct Marks;

/// What the MCP bridge keeps on the tools it imports, and how it tells its
/// own tools from others of the same name.
#[cfg(feature = "mcp-import")]
mod for_mcp {
    use std::any::Any;
    use std::sync::Arc;

    use super::{Marks, Tool, ToolBuilder};

    impl Marks {
        fn insert<M: Any + Send + Sync>(&mut self, mark: M) {
            self.0.retain(|m| !m.is::<M>());
            self.0.push(Arc::new(mark));
        }

        fn get<M: Any>(&self) -> Option<&M> {
            self.0.iter().find_map(|m| m.downcast_ref())
        }
    }

    impl Tool {
        /// The tool's mark of type `M`, if an adapter gave it one
        /// ([`ToolBuilder::mark`]).
        pub(crate) fn mark<M: Any + Send + Sync>(&self) -> Option<&M> {
            self.inner.marks.get()
        }

        /// Whether both are clones of the same tool (not merely the same name).
        pub(crate) fn same(&self, other: &Tool) -> bool {
            Arc::ptr_eq(&self.inner, &other.inner)
        }
    }

    impl ToolBuilder {
        /// Gives the tool a mark an adapter reads back with [`Tool::mark`] (one
        /// per type: a second of the same type replaces the first).
        pub(crate) fn mark<M: Any + Send + Sync>(mut self, mark: M) -> Self {
            self.marks.insert(mark);
            self
        }
    }
}

/// Builds a [`Tool`]; see [`Tool::builder`].
#[must_use = "a ToolBuilder does nothing until .build() is called"]
pub struct ToolBuilder {
    name: String,
    description: String,
    title: Option<String>,
    annotations: ToolAnnotations,
    icons: Vec<Icon>,
    task_support: TaskSupport,
    scopes: Vec<String>,
    tags: Vec<String>,
    input_schema: Value,
    output_schema: Option<Value>,
    timeout: Option<Duration>,
    handler: Option<Arc<dyn ToolHandler>>,
    required_state: Vec<StateRequirement>,
    marks: Marks,
    definition: Option<&'static Definition>,
}

impl fmt::Debug for ToolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ToolBuilder {
    /// The description shown in `TOOL_LIST`.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// A name for people (`"Delete a repository"`), shown by clients beside or
    /// instead of the tool's name (docs/protocol.md §6.13, MCP's `title`). An empty
    /// title is none.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into()).filter(|t| !t.is_empty());
        self
    }

    /// Hints about how the tool behaves (docs/protocol.md §6.13, MCP's tool
    /// annotations): read-only, destructive, idempotent, open-world. Only
    /// the hints set are sent; clients assume MCP's defaults for the others.
    /// `haip call` and the inspector ask before calling a tool that
    /// [declares itself destructive](ToolAnnotations::declares_destructive).
    ///
    /// ```
    /// use haip::{Icon, Tool, ToolAnnotations};
    /// use serde_json::json;
    ///
    /// let search = Tool::builder("search_web")
    ///     .title("Search the web")
    ///     .annotations(ToolAnnotations::new().read_only(true).open_world(true))
    ///     .icon(Icon::new("https://example.com/search.svg").with_mime_type("image/svg+xml"))
    ///     .handler(|_, _| async { Ok(json!([])) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(search.title(), Some("Search the web"));
    /// assert_eq!(search.annotations().read_only_hint, Some(true));
    /// assert_eq!(search.icons()[0].src, "https://example.com/search.svg");
    /// ```
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Adds an icon (docs/protocol.md §6.13); call again for more (sizes, themes).
    pub fn icon(mut self, icon: Icon) -> Self {
        self.icons.push(icon);
        self
    }

    /// Whether a call may run as an MCP task (the `io.modelcontextprotocol/tasks`
    /// extension): [`TaskSupport::Optional`] for a tool that may take long,
    /// [`TaskSupport::Required`] for one that always does. HAIP calls are
    /// unaffected (they already report progress and end with `TOOL_DONE`);
    /// the default is [`TaskSupport::Forbidden`].
    ///
    /// ```
    /// use haip::{TaskSupport, Tool};
    ///
    /// let report = Tool::builder("build_report")
    ///     .task_support(TaskSupport::Optional)
    ///     .handler(|_, _| async { Ok(serde_json::json!("done")) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(report.task_support(), TaskSupport::Optional);
    /// ```
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// The OAuth scopes a caller's token must grant to call the tool (all of
    /// them). With authentication on, a caller without them does not see the
    /// tool (unless [`hide_forbidden_tools`](crate::ServerBuilder::hide_forbidden_tools)
    /// is off) and its calls are refused: HAIP `TOOL_DONE ERROR FORBIDDEN`,
    /// MCP `403` with `WWW-Authenticate: Bearer error="insufficient_scope"`.
    /// With authentication off, scopes are not enforced.
    ///
    /// A scope is 1 to 128 printable ASCII characters other than space, `"`
    /// and `\` (RFC 6749 §3.3); `build` refuses others.
    ///
    /// ```
    /// use haip::Tool;
    ///
    /// let close = Tool::builder("close_ticket")
    ///     .scopes(["tickets:write"])
    ///     .handler(|_, _| async { Ok(serde_json::json!({"closed": true})) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(close.scopes(), ["tickets:write"]);
    /// ```
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes.extend(scopes.into_iter().map(Into::into));
        self
    }

    /// Labels for choosing which tools a server serves
    /// ([`ServerBuilder::only_tags`](crate::ServerBuilder::only_tags),
    /// [`exclude_tags`](crate::ServerBuilder::exclude_tags)): `"admin"`,
    /// `"files:write"`. Each is 1 to 64 characters, each an ASCII letter,
    /// digit, `_`, `-`, `.`, `:` or `/`; `build` refuses others. MCP clients
    /// see them in the tool's `_meta` (`"haip/tags"`); HAIP's
    /// `TOOL_LIST` has no place for them.
    ///
    /// ```
    /// use haip::Tool;
    ///
    /// let purge = Tool::builder("purge_cache")
    ///     .tags(["admin", "cache"])
    ///     .handler(|_, _| async { Ok(serde_json::json!(true)) })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(purge.tags(), ["admin", "cache"]);
    /// ```
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// The input JSON Schema (default `{"type":"object"}`). Compiled once, by `build`.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// The output JSON Schema, advertised in `TOOL_SCHEMA`.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// A timeout for each call of this tool; expiry ends the call with `TIMEOUT`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Declares that the handler reads the application state `T` (through
    /// [`Context::state`]); a server without that state refuses to start.
    pub fn requires_state<T: Send + Sync + 'static>(mut self) -> Self {
        self.required_state.push(StateRequirement {
            id: std::any::TypeId::of::<T>(),
            name: std::any::type_name::<T>(),
        });
        self
    }

    /// Records what an injected parameter needs (used by `#[haip_tool]`).
    pub(crate) fn inject<I: Injected>(mut self) -> Self {
        if let Some((id, name)) = I::requirement() {
            self.required_state.push(StateRequirement { id, name });
        }
        self
    }

    /// Sets the output schema when there is one (used by `#[haip_tool]`).
    pub(crate) fn maybe_output_schema(mut self, schema: Option<Value>) -> Self {
        self.output_schema = schema;
        self
    }

    /// The async handler. A call is first polled on its session's task: one
    /// that finishes without waiting for anything ends right there, and one
    /// that waits goes on as a task of its own. Long computations that never
    /// await belong in a [`ToolBuilder::blocking_handler`].
    pub fn handler(mut self, handler: impl ToolHandler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// A synchronous handler, run on the blocking thread pool so it never stalls
    /// the runtime. Cancellation cannot interrupt it; check
    /// [`Context::is_cancelled`] in long loops.
    pub fn blocking_handler<F>(mut self, handler: F) -> Self
    where
        F: Fn(Value, Context) -> Result<Value, ToolError> + Send + Sync + 'static,
    {
        self.handler = Some(Arc::new(Blocking(Arc::new(handler))));
        self
    }

    /// Records the `#[haip_tool]` function the tool is built from (used by
    /// the macro).
    pub(crate) fn definition(mut self, definition: &'static Definition) -> Self {
        self.definition = Some(definition);
        self
    }

    /// Validates the name, compiles the schemas and returns the tool.
    pub fn build(self) -> Result<Tool, crate::Error> {
        validate_name(&self.name)?;
        let invalid = |reason: String| crate::Error::InvalidTool {
            tool: self.name.clone(),
            reason,
        };
        let input = CompiledSchema::compile(&self.input_schema)
            .map_err(|e| invalid(format!("input schema: {e}")))?;
        let (shape, output_schema) = Shape::of(self.output_schema);
        let output = match &output_schema {
            Some(schema) => Some(
                CompiledSchema::compile(schema)
                    .map_err(|e| invalid(format!("output schema: {e}")))?,
            ),
            None => None,
        };
        if self.timeout == Some(Duration::ZERO) {
            return Err(invalid("timeout must be greater than zero".to_owned()));
        }
        let mut scopes = self.scopes;
        if let Some(bad) = scopes.iter().find(|s| !valid_scope(s)) {
            return Err(invalid(format!(
                "scope {bad:?} is not a valid OAuth scope: 1 to 128 printable ASCII characters \
                 other than space, `\"` and `\\` (RFC 6749 §3.3)"
            )));
        }
        scopes.sort_unstable();
        scopes.dedup();
        let tags = tags::checked(self.tags).map_err(invalid)?;
        let Some(handler) = self.handler else {
            return Err(invalid(
                "no handler: call .handler(...) before .build()".to_owned(),
            ));
        };
        let profiles = Profiles::of(&self.input_schema, output_schema.as_ref());
        Ok(Tool {
            inner: Arc::new(ToolInner {
                name: self.name,
                description: self.description,
                title: self.title,
                annotations: self.annotations,
                icons: self.icons,
                task_support: self.task_support,
                scopes,
                tags,
                input_schema: self.input_schema,
                output_schema,
                shape,
                input,
                output,
                profiles,
                timeout: self.timeout,
                handler,
                required_state: self.required_state,
                marks: self.marks,
                definition: self.definition,
            }),
        })
    }
}

/// Whether `scope` is an OAuth scope token (RFC 6749 §3.3: `%x21 / %x23-5B /
/// %x5D-7E`), at most 128 characters.
pub(crate) fn valid_scope(scope: &str) -> bool {
    (1..=128).contains(&scope.len())
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Whether calls of a tool may run as MCP tasks (the
/// `io.modelcontextprotocol/tasks` extension), set with
/// [`ToolBuilder::task_support`] or `#[haip_tool(task)]`.
///
/// For an MCP client that declares the extension, a call of a tool that
/// supports tasks starts as any call does; the server answers with a task
/// (`resultType: "task"`) once the call has to wait for something other
/// than a question asked before it did any waiting, and the client follows
/// it with `tasks/get` (status, questions, then the result), `tasks/update`
/// (answers) and `tasks/cancel`. A call that finishes at once is answered
/// at once: with its plain result when the support is
/// [`Optional`](TaskSupport::Optional), and with a task holding that result
/// when it is [`Required`](TaskSupport::Required). Questions a call asks
/// before it first waits are asked in rounds (`input_required`) by clients
/// that take them, so that the task starts with its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TaskSupport {
    /// Never a task: every call answers on its own request (the default).
    #[default]
    Forbidden,
    /// A task for clients that take tasks; for others, a call like any other.
    Optional,
    /// Always a task: a client that does not take tasks is refused (MCP error
    /// `-32021`, naming the extension it lacks).
    Required,
}

impl TaskSupport {
    /// Its name in MCP (`"forbidden"`, `"optional"`, `"required"`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

impl fmt::Display for TaskSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a tool name against MCP's rule, `^[A-Za-z0-9_.-]{1,128}$`.
pub(crate) fn validate_name(name: &str) -> Result<(), crate::Error> {
    let ok = (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(crate::Error::InvalidToolName {
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> impl ToolHandler {
        |_: Value, _: Context| async { Ok(Value::Null) }
    }

    #[test]
    fn names_are_validated() {
        for good in ["echo", "a.b-c_d", "X9", &"n".repeat(128)] {
            assert!(
                Tool::builder(good).handler(noop()).build().is_ok(),
                "{good}"
            );
        }
        for bad in ["", "has space", "slash/name", "ünicode", &"n".repeat(129)] {
            let err = Tool::builder(bad).handler(noop()).build().unwrap_err();
            assert!(err.to_string().contains("invalid tool name"), "{err}");
        }
    }

    #[test]
    fn titles_hints_and_icons_are_kept_as_given() {
        let plain = Tool::builder("plain").handler(noop()).build().unwrap();
        assert_eq!(plain.title(), None);
        assert!(plain.annotations().is_empty() && plain.icons().is_empty());
        let tool = Tool::builder("t")
            .title("")
            .annotations(ToolAnnotations::new().read_only(true))
            .icon(Icon::new("a.png"))
            .icon(Icon::new("b.svg"))
            .handler(noop())
            .build()
            .unwrap();
        assert_eq!(tool.title(), None, "an empty title is none");
        assert_eq!(tool.annotations(), &ToolAnnotations::new().read_only(true));
        let icons: Vec<&str> = tool.icons().iter().map(|i| i.src.as_str()).collect();
        assert_eq!(icons, ["a.png", "b.svg"], "in the order given");
    }

    #[test]
    fn build_reports_missing_handler_and_bad_schema() {
        let err = Tool::builder("t").build().unwrap_err();
        assert!(err.to_string().contains("no handler"), "{err}");
        let err = Tool::builder("t")
            .input_schema(json!({"type": 5}))
            .handler(noop())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("input schema"), "{err}");
    }
}

//! Support for the code `#[haip_tool]` generates. Not public API: it may change
//! in any release. Generated code names the runtime only through this module.

use std::cell::Cell;
use std::fmt::Display;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;

use crate::protocol::ErrorCode;
pub use crate::schema::{input_schema_for, output_schema_for};
pub use crate::{Context, Error, Injected, Params, State, Tool, ToolBuilder, ToolError};

/// One `#[haip_tool]` function, collected at link time for [`crate::serve`].
pub struct ToolRegistration {
    /// The tool's name.
    pub name: &'static str,
    /// `file!()` of the annotated function.
    pub file: &'static str,
    /// `line!()` of the annotated function.
    pub line: u32,
    /// Builds the tool.
    pub make: fn() -> Result<Tool, Error>,
}

inventory::collect!(ToolRegistration);

/// Every annotated tool linked into the binary, ordered by file and line, each
/// with where it came from.
pub(crate) fn annotated_tools() -> Result<Vec<(Tool, String)>, Error> {
    let mut registrations: Vec<&ToolRegistration> = inventory::iter::<ToolRegistration>().collect();
    registrations.sort_by_key(|r| (r.file, r.line, r.name));
    registrations
        .into_iter()
        .map(|r| {
            Ok((
                (r.make)()?,
                format!("#[haip_tool] `{}` at {}:{}", r.name, r.file, r.line),
            ))
        })
        .collect()
}

/// Adds what an injected parameter needs to the tool being built.
pub fn inject<I: Injected>(builder: ToolBuilder) -> ToolBuilder {
    builder.inject::<I>()
}

/// Sets the output schema, when the return type has one.
pub fn output_schema(builder: ToolBuilder, schema: Option<Value>) -> ToolBuilder {
    builder.maybe_output_schema(schema)
}

/// Deserialises validated params into the generated args type. Params passed
/// the input schema already, so this fails only where serde is stricter than
/// the schema; the failure is the client's (`INVALID_PARAMS`).
pub fn deserialize_params<T: DeserializeOwned>(tool: &str, params: Value) -> Result<T, ToolError> {
    serde_json::from_value(params).map_err(|e| {
        ToolError::invalid_params(format!("Invalid params for tool {tool}"))
            .with_details(json!([{ "path": "", "message": e.to_string() }]))
    })
}

/// Serialises a tool's return value; failure is the tool's bug (`INTERNAL_ERROR`).
pub fn serialize_output<T: Serialize>(tool: &str, value: T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(tool, error = %e, "tool result could not be serialised");
        ToolError::new(
            ErrorCode::INTERNAL_ERROR,
            format!("Internal error in tool {tool}"),
        )
    })
}

/// Takes an injected parameter from the context.
pub fn extract<I: Injected>(ctx: &Context) -> Result<I, ToolError> {
    I::extract(ctx)
}

/// Holds a tool's error while the generated code picks the conversion:
/// a [`ToolError`] is kept as is, any other `Display` error becomes
/// `TOOL_EXECUTION_ERROR` with its message (autoref specialisation).
pub struct ErrWrap<E>(Cell<Option<E>>);

impl<E> ErrWrap<E> {
    /// Wraps the error.
    pub fn new(error: E) -> ErrWrap<E> {
        ErrWrap(Cell::new(Some(error)))
    }
}

/// Chosen for `ErrWrap<ToolError>`.
pub trait ViaToolError {
    /// The conversion.
    fn haip_tool_error(&self) -> ToolError;
}

impl ViaToolError for ErrWrap<ToolError> {
    fn haip_tool_error(&self) -> ToolError {
        self.0
            .take()
            .unwrap_or_else(|| ToolError::execution("error already taken"))
    }
}

/// Chosen for any other `ErrWrap<E: Display>`.
pub trait ViaDisplay {
    /// The conversion.
    fn haip_tool_error(&self) -> ToolError;
}

impl<E: Display> ViaDisplay for &ErrWrap<E> {
    fn haip_tool_error(&self) -> ToolError {
        match self.0.take() {
            Some(e) => ToolError::execution(e.to_string()),
            None => ToolError::execution("error already taken"),
        }
    }
}

/// Compile-time check at a parameter's type: it can come from params.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter",
    label = "needs `Deserialize` and `JsonSchema`",
    note = "derive them with `#[haip::data]` (or `#[derive(serde::Deserialize, schemars::JsonSchema)]`)"
)]
pub trait ToolParam {}
impl<T: DeserializeOwned + schemars::JsonSchema> ToolParam for T {}

/// Compile-time check at the return type: it can be a tool's result.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool result",
    label = "needs `Serialize` and `JsonSchema`",
    note = "derive them with `#[haip::data]` (or `#[derive(serde::Serialize, schemars::JsonSchema)]`)"
)]
pub trait ToolOutput {}
impl<T: Serialize + schemars::JsonSchema> ToolOutput for T {}

/// Compile-time check at the error type of a `Result` return type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool error",
    label = "needs `Display` (or use `haip::ToolError`)"
)]
pub trait ToolErrorType {}
impl<E: Display> ToolErrorType for E {}

/// Spanned bound checks emitted by the macro.
pub fn assert_param<T: ToolParam>() {}
/// See [`assert_param`].
pub fn assert_output<T: ToolOutput>() {}
/// See [`assert_param`].
pub fn assert_error<E: ToolErrorType>() {}
/// See [`assert_param`].
pub fn assert_injected<I: Injected>() {}

/// `Duration::from_millis`, so generated code needs no `std` path.
pub const fn millis(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ms)
}

//! Support for the code `#[haip_tool]` generates. Not public API: it may change
//! in any release. Generated code names the runtime only through this module.

use std::cell::Cell;
use std::convert::Infallible;
use std::fmt::Display;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;

use crate::Injected;
use crate::protocol::ErrorCode;
pub use crate::schema::{input_schema_for, output_schema_for};
pub use crate::{Context, Error, Params, State, Tool, ToolBuilder, ToolError};

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
pub fn serialize_output<T: ToolOutput>(tool: &str, value: T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(tool, error = %e, "tool result could not be serialised");
        ToolError::new(
            ErrorCode::INTERNAL_ERROR,
            format!("Internal error in tool {tool}"),
        )
    })
}

// ---------------------------------------------------------------------------
// Parameters: what each one is, decided by its type.

/// What a `#[haip_tool]` parameter is. The macro never looks at type names:
/// each parameter's type says its role through [`ToolArg::ROLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ArgRole {
    /// A property of the params object (any `Deserialize + JsonSchema` type).
    Data,
    /// [`Context`], injected.
    Context,
    /// [`State<T>`], injected.
    State,
    /// [`Params<T>`]: the whole params object.
    Params,
}

/// A type a `#[haip_tool]` function can take as a parameter: data from the
/// params (every `Deserialize + JsonSchema` type), or one of the forms the
/// runtime provides ([`Context`], [`State<T>`], [`Params<T>`]).
///
/// The generated args struct has one field per parameter, of type
/// [`ToolArg::Field`]; the input schema drops injected fields and becomes
/// `T`'s schema for a `Params<T>` (at tool-build time, once).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter",
    label = "not data (`Deserialize + JsonSchema`), nor `Context`, `State<T>` or `Params<T>`",
    note = "derive `Deserialize` and `JsonSchema` with `#[haip::data]` (or `#[derive(serde::Deserialize, schemars::JsonSchema)]`)"
)]
pub trait ToolArg: Sized {
    /// The parameter's field in the generated args struct: `Self` for data,
    /// [`Absent`] for an injected parameter, `T` for `Params<T>`.
    type Field: DeserializeOwned + schemars::JsonSchema;
    /// What the parameter is.
    const ROLE: ArgRole;
    /// Records what the parameter needs from the server (the `T` of a `State<T>`).
    fn prepare(builder: ToolBuilder) -> ToolBuilder {
        builder
    }
    /// The input schema when the parameter is the whole params object.
    fn whole_schema() -> Option<Value> {
        None
    }
    /// A `#[haip(default = ...)]` value as the field.
    fn into_field(self) -> Self::Field;
    /// The field when the whole params object goes to the `Params<T>`
    /// parameter: that parameter takes `params`, injected ones need nothing.
    fn whole_field(tool: &str, params: &mut Option<Value>) -> Result<Self::Field, ToolError>;
    /// The argument passed to the function.
    fn from_field(field: Self::Field, ctx: &Context) -> Result<Self, ToolError>;
}

impl<T: DeserializeOwned + schemars::JsonSchema> ToolArg for T {
    type Field = T;
    const ROLE: ArgRole = ArgRole::Data;
    fn into_field(self) -> T {
        self
    }
    fn whole_field(tool: &str, _params: &mut Option<Value>) -> Result<T, ToolError> {
        // The compile-time checks forbid data parameters beside `Params<T>`.
        Err(ToolError::new(
            ErrorCode::INTERNAL_ERROR,
            format!("Internal error in tool {tool}"),
        ))
    }
    fn from_field(field: T, _ctx: &Context) -> Result<T, ToolError> {
        Ok(field)
    }
}

impl ToolArg for Context {
    type Field = Absent;
    const ROLE: ArgRole = ArgRole::Context;
    fn into_field(self) -> Absent {
        Absent
    }
    fn whole_field(_tool: &str, _params: &mut Option<Value>) -> Result<Absent, ToolError> {
        Ok(Absent)
    }
    fn from_field(_field: Absent, ctx: &Context) -> Result<Context, ToolError> {
        Ok(ctx.clone())
    }
}

impl<T: Send + Sync + 'static> ToolArg for State<T> {
    type Field = Absent;
    const ROLE: ArgRole = ArgRole::State;
    fn prepare(builder: ToolBuilder) -> ToolBuilder {
        builder.inject::<State<T>>()
    }
    fn into_field(self) -> Absent {
        Absent
    }
    fn whole_field(_tool: &str, _params: &mut Option<Value>) -> Result<Absent, ToolError> {
        Ok(Absent)
    }
    fn from_field(_field: Absent, ctx: &Context) -> Result<State<T>, ToolError> {
        <State<T> as Injected>::extract(ctx)
    }
}

impl<T: DeserializeOwned + schemars::JsonSchema> ToolArg for Params<T> {
    type Field = T;
    const ROLE: ArgRole = ArgRole::Params;
    fn whole_schema() -> Option<Value> {
        Some(input_schema_for::<T>())
    }
    fn into_field(self) -> T {
        self.0
    }
    fn whole_field(tool: &str, params: &mut Option<Value>) -> Result<T, ToolError> {
        deserialize_params(tool, params.take().unwrap_or(Value::Null))
    }
    fn from_field(field: T, _ctx: &Context) -> Result<Params<T>, ToolError> {
        Ok(Params(field))
    }
}

/// The args field of an injected parameter: never a property of the params
/// (its schema is `false` and is dropped from the input schema); it
/// deserialises from a missing field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Absent;

impl<'de> serde::Deserialize<'de> for Absent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Absent, D::Error> {
        struct Missing;
        impl<'de> serde::de::Visitor<'de> for Missing {
            type Value = Absent;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("nothing: this parameter is injected, not taken from params")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Absent, E> {
                Ok(Absent)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Absent, E> {
                Ok(Absent)
            }
        }
        // A missing field deserialises as `None` through `deserialize_option`.
        deserializer.deserialize_option(Missing)
    }
}

impl schemars::JsonSchema for Absent {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Absent".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        false.into()
    }
}

/// A parameter type `T` whose role `ROLE` (`T::ROLE as u8`) is a constant
/// the compiler evaluated. Generated code names a parameter's type only as
/// `<Checked<{ ROLE }, T> as Arg>::Is` (which is `T`), so when `T` is not a
/// [`ToolArg`], the one constant that asks fails (a single error at the
/// parameter's type) and every use that depends on it is skipped, instead of
/// one error per use inside the derived code.
pub struct Checked<const ROLE: u8, T>(PhantomData<fn() -> T>);

/// See [`Checked`].
pub trait Arg {
    /// The parameter type.
    type Is: ToolArg;
}

impl<T: ToolArg> Arg for Checked<{ ArgRole::Data as u8 }, T> {
    type Is = T;
}

impl<T: ToolArg> Arg for Checked<{ ArgRole::Context as u8 }, T> {
    type Is = T;
}

impl<T: ToolArg> Arg for Checked<{ ArgRole::State as u8 }, T> {
    type Is = T;
}

impl<T: ToolArg> Arg for Checked<{ ArgRole::Params as u8 }, T> {
    type Is = T;
}

/// One parameter, as the input schema needs it.
#[derive(Debug, Clone, Copy)]
pub struct ArgSchema {
    name: &'static str,
    role: ArgRole,
    whole: fn() -> Option<Value>,
}

/// The parameter `name` of type `T`.
pub fn arg_schema<T: ToolArg>(name: &'static str) -> ArgSchema {
    ArgSchema {
        name,
        role: T::ROLE,
        whole: T::whole_schema,
    }
}

/// A tool's input schema: `T`'s schema when a parameter is `Params<T>`, else
/// the args struct's schema without the injected parameters.
pub fn args_input_schema<A: schemars::JsonSchema>(args: &[ArgSchema]) -> Value {
    if let Some(schema) = args.iter().find_map(|a| (a.whole)()) {
        return schema;
    }
    let mut schema = input_schema_for::<A>();
    for arg in args {
        if matches!(arg.role, ArgRole::Context | ArgRole::State) {
            remove_property(&mut schema, arg.name);
        }
    }
    schema
}

/// Removes a property (and its `required` entry) from an object schema.
fn remove_property(schema: &mut Value, name: &str) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.remove(name);
    }
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| r != name);
        if required.is_empty() {
            object.remove("required");
        }
    }
}

/// Whether one of the parameters is the whole params object.
pub const fn has_whole(roles: &[ArgRole]) -> bool {
    count(roles, roles.len(), ArgRole::Params) > 0
}

/// How many of `roles[..end]` are `role`.
const fn count(roles: &[ArgRole], end: usize, role: ArgRole) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < end && i < roles.len() {
        if roles[i] as u8 == role as u8 {
            n += 1;
        }
        i += 1;
    }
    n
}

/// Whether parameter `i` is data (a property of the params).
pub const fn is_data(roles: &[ArgRole], i: usize) -> bool {
    matches!(roles[i], ArgRole::Data)
}

/// Whether parameter `i` is a `Context` after another one.
pub const fn second_context(roles: &[ArgRole], i: usize) -> bool {
    matches!(roles[i], ArgRole::Context) && count(roles, i, ArgRole::Context) > 0
}

/// Whether parameter `i` is a `Params<T>` after another one.
pub const fn second_params(roles: &[ArgRole], i: usize) -> bool {
    matches!(roles[i], ArgRole::Params) && count(roles, i, ArgRole::Params) > 0
}

/// Whether parameter `i` is the first `Params<T>`, beside data parameters.
pub const fn params_beside_data(roles: &[ArgRole], i: usize) -> bool {
    matches!(roles[i], ArgRole::Params)
        && count(roles, i, ArgRole::Params) == 0
        && count(roles, roles.len(), ArgRole::Data) > 0
}

// ---------------------------------------------------------------------------
// Results: `Result<T, E>` (under any name) or a plain value, decided by type.

/// The return type `R` of a tool function, probed by autoref specialisation:
/// `(&Returns::<R>::new()).haip_output()` is [`Fallible<T, E>`] when `R` is
/// `Result<T, E>` (whatever it is called), else [`Plain<R>`]. Resolved at
/// compile time; both are zero-sized.
pub struct Returns<R>(PhantomData<fn() -> R>);

impl<R> Returns<R> {
    /// The probe.
    pub const fn new() -> Returns<R> {
        Returns(PhantomData)
    }
}

impl<R> Default for Returns<R> {
    fn default() -> Returns<R> {
        Returns::new()
    }
}

/// Chosen for `Returns<Result<T, E>>`.
pub trait ReturnsResult {
    /// [`Fallible<T, E>`].
    type Kind;
    /// The conversion for this return type.
    fn haip_output(&self) -> Self::Kind;
}

impl<T, E> ReturnsResult for Returns<Result<T, E>> {
    type Kind = Fallible<T, E>;
    fn haip_output(&self) -> Fallible<T, E> {
        Fallible(PhantomData)
    }
}

/// Chosen for any other `Returns<R>`.
pub trait ReturnsValue {
    /// [`Plain<R>`].
    type Kind;
    /// The conversion for this return type.
    fn haip_output(&self) -> Self::Kind;
}

impl<R> ReturnsValue for &Returns<R> {
    type Kind = Plain<R>;
    fn haip_output(&self) -> Plain<R> {
        Plain(PhantomData)
    }
}

/// A `Result<T, E>` return type: `Ok(T)` is the result, `Err(E)` a tool error.
pub struct Fallible<T, E>(PhantomData<fn() -> (T, E)>);

impl<T, E> Fallible<T, E> {
    /// The function's value as a result.
    pub fn split(self, out: Result<T, E>) -> Result<T, E> {
        out
    }

    /// `T`'s output schema.
    pub fn schema(self) -> Option<Value>
    where
        T: ToolOutput,
    {
        output_schema_for::<T>()
    }
}

/// Any other return type `R`: the value is the result.
pub struct Plain<R>(PhantomData<fn() -> R>);

impl<R> Plain<R> {
    /// The function's value as a result that never fails.
    pub fn split(self, out: R) -> Result<R, Infallible> {
        Ok(out)
    }

    /// `R`'s output schema.
    pub fn schema(self) -> Option<Value>
    where
        R: ToolOutput,
    {
        output_schema_for::<R>()
    }
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

/// Chosen for any other `ErrWrap<E>`; `E` must be `Display`. The bound sits on
/// the method, so a missing `Display` is reported as such (not as a missing
/// method).
pub trait ViaDisplay<E> {
    /// The conversion.
    fn haip_tool_error(&self) -> ToolError
    where
        E: ToolErrorType;
}

impl<E> ViaDisplay<E> for &ErrWrap<E> {
    fn haip_tool_error(&self) -> ToolError
    where
        E: ToolErrorType,
    {
        match self.0.take() {
            Some(e) => ToolError::execution(e.to_string()),
            None => ToolError::execution("error already taken"),
        }
    }
}

/// A type a tool can return: its result, or `T` of a `Result<T, E>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool result",
    label = "needs `Serialize` and `JsonSchema`",
    note = "derive them with `#[haip::data]` (or `#[derive(serde::Serialize, schemars::JsonSchema)]`)"
)]
pub trait ToolOutput: Serialize + schemars::JsonSchema {}
impl<T: Serialize + schemars::JsonSchema> ToolOutput for T {}

/// The error type of a `Result` return type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool error",
    label = "the error type of this result needs `Display` (or use `haip::ToolError`)"
)]
pub trait ToolErrorType: Display {}
impl<E: Display> ToolErrorType for E {}

/// `Duration::from_millis`, so generated code needs no `std` path.
pub const fn millis(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ms)
}

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
pub use crate::tool::Definition;
pub use crate::{
    Context, Error, Icon, IconTheme, Params, QuestionForm, State, TaskSupport, Tool,
    ToolAnnotations, ToolBuilder, ToolError,
};

/// One `#[haip_tool]` function, collected at link time for [`crate::serve`].
pub struct ToolRegistration {
    /// The tool's name.
    pub name: &'static str,
    /// `module_path!()` of the annotated function (its crate first).
    pub module: &'static str,
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
    annotated_where(|_| true)
}

/// The annotated tools of the module `module` and the modules inside it
/// (`"my_crate"`: the whole crate), in the same order.
pub(crate) fn annotated_under(module: &str) -> Result<Vec<(Tool, String)>, Error> {
    annotated_where(|r| {
        r.module
            .strip_prefix(module)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

fn annotated_where(keep: impl Fn(&ToolRegistration) -> bool) -> Result<Vec<(Tool, String)>, Error> {
    let mut registrations: Vec<&ToolRegistration> = inventory::iter::<ToolRegistration>()
        .filter(|r| keep(r))
        .collect();
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

/// Records the function the tool is built from (a `static` of the
/// generated `try_tool`, so every tool built from it has the same one).
pub fn definition(builder: ToolBuilder, definition: &'static Definition) -> ToolBuilder {
    builder.definition(definition)
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

// ---------------------------------------------------------------------------
// Parameters: what each one is, decided by its type.
//
// Compile errors are the product here: a type that breaks a rule must be one
// error, at the user's token, in haip's words. Hence one trait per role
// (`ToolArg` for parameters, `InjectedArg` for what the runtime injects,
// `ToolOutput` for results, `ToolErrorType` for errors), each with
// `#[diagnostic::on_unimplemented]`, and every impl marked
// `#[diagnostic::do_not_recommend]`, so rustc reports the role trait itself
// rather than the serde or schemars bound inside a blanket impl (and lists no
// "other types" that implement it). The generated code asks each question
// once and reaches everything else through the answer, so a missing bound is
// never reported twice.

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
/// `T`'s schema for a `Params<T>` (at tool-build time, once). What an injected
/// parameter needs is a separate question ([`InjectedArg`]), asked of
/// [`ToolArg::Injected`], so that a `State<T>` whose `T` cannot be shared is
/// reported as such, not as a parameter without derives.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool parameter: derive `Deserialize` and `JsonSchema` (`#[haip::data]` does both)",
    label = "a tool parameter is data (`Deserialize + JsonSchema`), `Context`, `State<T>` or `Params<T>`",
    note = "for `Params<T>`, `Option<T>` or `Vec<T>`, derive them on `T`"
)]
pub trait ToolArg: Sized {
    /// The parameter's field in the generated args struct: `Self` for data,
    /// [`Absent`] for an injected parameter, `T` for `Params<T>`.
    type Field: DeserializeOwned + schemars::JsonSchema;
    /// What the runtime injects for the parameter: `Self` for `Context` and
    /// `State<T>`, [`NotInjected`] for the others.
    type Injected;
    /// What the parameter is.
    const ROLE: ArgRole;
    /// The input schema when the parameter is the whole params object.
    fn whole_schema() -> Option<Value> {
        None
    }
    /// A `#[haip(default = ...)]` value as the field. (No `self`: the trait
    /// is re-exported at the root, and its functions must never be methods
    /// on a user's types.)
    fn into_field(value: Self) -> Self::Field;
    /// The field when the whole params object goes to the `Params<T>`
    /// parameter: that parameter takes `params`, injected ones need nothing.
    fn whole_field(tool: &str, params: &mut Option<Value>) -> Result<Self::Field, ToolError>;
    /// The argument passed to the function, from its field and what was
    /// injected.
    fn from_parts(field: Self::Field, injected: Self::Injected) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + schemars::JsonSchema> ToolArg for T {
    type Field = T;
    type Injected = NotInjected;
    const ROLE: ArgRole = ArgRole::Data;
    fn into_field(value: T) -> T {
        value
    }
    fn whole_field(tool: &str, _params: &mut Option<Value>) -> Result<T, ToolError> {
        // The compile-time checks forbid data parameters beside `Params<T>`.
        Err(ToolError::new(
            ErrorCode::INTERNAL_ERROR,
            format!("Internal error in tool {tool}"),
        ))
    }
    fn from_parts(field: T, _: NotInjected) -> T {
        field
    }
}

#[diagnostic::do_not_recommend]
impl ToolArg for Context {
    type Field = Absent;
    type Injected = Context;
    const ROLE: ArgRole = ArgRole::Context;
    fn into_field(_: Self) -> Absent {
        Absent
    }
    fn whole_field(_tool: &str, _params: &mut Option<Value>) -> Result<Absent, ToolError> {
        Ok(Absent)
    }
    fn from_parts(_: Absent, ctx: Context) -> Context {
        ctx
    }
}

// No bound on `T` here: whether it can be shared is `InjectedArg`'s question.
#[diagnostic::do_not_recommend]
impl<T> ToolArg for State<T> {
    type Field = Absent;
    type Injected = State<T>;
    const ROLE: ArgRole = ArgRole::State;
    fn into_field(_: Self) -> Absent {
        Absent
    }
    fn whole_field(_tool: &str, _params: &mut Option<Value>) -> Result<Absent, ToolError> {
        Ok(Absent)
    }
    fn from_parts(_: Absent, state: State<T>) -> State<T> {
        state
    }
}

#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + schemars::JsonSchema> ToolArg for Params<T> {
    type Field = T;
    type Injected = NotInjected;
    const ROLE: ArgRole = ArgRole::Params;
    fn whole_schema() -> Option<Value> {
        Some(input_schema_for::<T>())
    }
    fn into_field(value: Params<T>) -> T {
        value.0
    }
    fn whole_field(tool: &str, params: &mut Option<Value>) -> Result<T, ToolError> {
        deserialize_params(tool, params.take().unwrap_or(Value::Null))
    }
    fn from_parts(field: T, _: NotInjected) -> Params<T> {
        Params(field)
    }
}

// ---------------------------------------------------------------------------
// `#[haip(default = <expr>)]`: a value of the parameter's type `T`, or one
// that converts into it; for an `Option<X>` parameter, an `X` or one that
// converts into `X`, wrapped in `Some`.
//
// Chosen by autoref specialisation on `DefaultProbe<T, V>` (`V` the type of
// the expression), most specific first: `V` is `T` (a literal takes the
// parameter's type, as in `let x: T = 20;`), `T` is `Option<V>`, `T` is
// `Option<X>` and `V: Into<X>`, `V: Into<T>`. The generated code is
//
//     let kind = (&&&DefaultProbe::<T, _>::of(|| expr)).haip_default();
//     kind.make(expr)
//
// (the closure only types the expression), so a value that converts into
// nothing is one error at the user's expression, in haip's words
// ([`DefaultValue`]).

/// The type `T` of a parameter and `V` of its default, for the probe above.
pub struct DefaultProbe<T, V>(PhantomData<fn(V) -> T>);

impl<T, V> DefaultProbe<T, V> {
    /// The probe for the expression the closure returns (never called).
    pub fn of(_: impl FnOnce() -> V) -> DefaultProbe<T, V> {
        DefaultProbe(PhantomData)
    }
}

impl<T, V> Clone for DefaultProbe<T, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, V> Copy for DefaultProbe<T, V> {}

/// Chosen when the default is of the parameter's type.
pub trait DefaultExact {
    /// [`DefaultIsValue`].
    fn haip_default(self) -> DefaultIsValue;
}

impl<T> DefaultExact for &&&DefaultProbe<T, T> {
    fn haip_default(self) -> DefaultIsValue {
        DefaultIsValue
    }
}

/// Chosen when the parameter is `Option<X>` and the default an `X`.
pub trait DefaultSome {
    /// [`DefaultInSome`].
    fn haip_default(self) -> DefaultInSome;
}

impl<X> DefaultSome for &&DefaultProbe<Option<X>, X> {
    fn haip_default(self) -> DefaultInSome {
        DefaultInSome
    }
}

/// Chosen when the parameter is `Option<X>` and the default something else.
pub trait DefaultSomeInto {
    /// [`DefaultIntoSome`].
    fn haip_default(self) -> DefaultIntoSome;
}

impl<X, V> DefaultSomeInto for &DefaultProbe<Option<X>, V> {
    fn haip_default(self) -> DefaultIntoSome {
        DefaultIntoSome
    }
}

/// Chosen for any other default.
pub trait DefaultInto {
    /// [`DefaultConverted`].
    fn haip_default(self) -> DefaultConverted;
}

impl<T, V> DefaultInto for DefaultProbe<T, V> {
    fn haip_default(self) -> DefaultConverted {
        DefaultConverted
    }
}

/// The default is the value.
#[derive(Debug, Clone, Copy)]
pub struct DefaultIsValue;

impl DefaultIsValue {
    /// The value.
    pub fn make<T>(self, value: T) -> T {
        value
    }
}

/// The default is `Some(value)`.
#[derive(Debug, Clone, Copy)]
pub struct DefaultInSome;

impl DefaultInSome {
    /// `Some(value)`.
    pub fn make<X>(self, value: X) -> Option<X> {
        Some(value)
    }
}

/// The default is `Some(value.into())`.
#[derive(Debug, Clone, Copy)]
pub struct DefaultIntoSome;

impl DefaultIntoSome {
    /// `Some(value.into())`.
    pub fn make<X, V: DefaultValue<X>>(self, value: V) -> Option<X> {
        Some(value.into_default())
    }
}

/// The default is `value.into()`.
#[derive(Debug, Clone, Copy)]
pub struct DefaultConverted;

impl DefaultConverted {
    /// `value.into()`.
    pub fn make<T, V: DefaultValue<T>>(self, value: V) -> T {
        value.into_default()
    }
}

/// A `#[haip(default = ...)]` value that converts into the parameter's type
/// `T` (for `Option<X>`, into `X`).
#[diagnostic::on_unimplemented(
    message = "`#[haip(default = ...)]` takes a `{T}` here (or a value that converts into one), not a `{Self}`",
    label = "`{Self}` does not convert into `{T}`",
    note = "a default is a value of the parameter's type, or of a type with `Into<T>`; \
            for an `Option<T>` parameter, of `T`"
)]
pub trait DefaultValue<T> {
    /// The conversion (`Into::into`).
    fn into_default(self) -> T;
}

#[diagnostic::do_not_recommend]
impl<T, V: Into<T>> DefaultValue<T> for V {
    fn into_default(self) -> T {
        self.into()
    }
}

/// What the runtime can inject into a parameter: [`Context`], a [`State<T>`]
/// whose `T` can be shared between calls, and [`NotInjected`] (the parameters
/// that come from params).
///
/// Generated code asks it once per parameter, of `<T as ToolArg>::Injected`,
/// through [`InjectedArg::glue`], and keeps the answer's function pointers.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be injected into a tool: the state type must be `Send + Sync + 'static`",
    label = "calls run on many threads at once; wrap what is not `Sync` in a `Mutex`"
)]
pub trait InjectedArg: Sized {
    /// Records what the parameter needs from the server (the `T` of a `State<T>`).
    fn prepare(builder: ToolBuilder) -> ToolBuilder;
    /// Takes the value from the call's context.
    fn extract(ctx: &Context) -> Result<Self, ToolError>;
    /// Both, as plain functions: the one place generated code requires this trait.
    fn glue(_: PhantomData<Self>) -> InjectGlue<Self> {
        InjectGlue {
            prepare: Self::prepare,
            extract: Self::extract,
        }
    }
}

/// What the runtime injects for a parameter of type `A`, as a value for
/// [`InjectedArg::glue`].
pub fn injected<A: ToolArg>() -> PhantomData<A::Injected> {
    PhantomData
}

/// [`InjectedArg`]'s functions for one parameter.
pub struct InjectGlue<I> {
    /// See [`InjectedArg::prepare`].
    pub prepare: fn(ToolBuilder) -> ToolBuilder,
    /// See [`InjectedArg::extract`].
    pub extract: fn(&Context) -> Result<I, ToolError>,
}

impl<I> Clone for InjectGlue<I> {
    fn clone(&self) -> InjectGlue<I> {
        *self
    }
}

impl<I> Copy for InjectGlue<I> {}

/// What "injected" is for a parameter that comes from params: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotInjected;

#[diagnostic::do_not_recommend]
impl InjectedArg for NotInjected {
    fn prepare(builder: ToolBuilder) -> ToolBuilder {
        builder
    }
    fn extract(_: &Context) -> Result<NotInjected, ToolError> {
        Ok(NotInjected)
    }
}

#[diagnostic::do_not_recommend]
impl InjectedArg for Context {
    fn prepare(builder: ToolBuilder) -> ToolBuilder {
        builder
    }
    fn extract(ctx: &Context) -> Result<Context, ToolError> {
        Ok(ctx.clone())
    }
}

#[diagnostic::do_not_recommend]
impl<T: Send + Sync + 'static> InjectedArg for State<T> {
    fn prepare(builder: ToolBuilder) -> ToolBuilder {
        builder.inject::<State<T>>()
    }
    fn extract(ctx: &Context) -> Result<State<T>, ToolError> {
        <State<T> as Injected>::extract(ctx)
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
// Fields of `#[haip::data]` types.
//
// `#[haip::data]` asks `<T as DataField>::CHECKED` of each type `T` inside its
// fields in one hidden `const`, and names that `const` in one serde bound and
// one schemars `with` type per field (`FieldsOk<{ CONST }>`). When a type is
// not data, that `const` is the one error, at the type, and rustc reports
// nothing from inside the derives or where the data type is used.

/// A type inside a field of a `#[haip::data]` type. Only `JsonSchema` is
/// asked: schemars bounds no impl of a non-generic type, so the answer never
/// depends on another data type's check (types that contain each other
/// compile), and a type without it has no serde derives either, almost always.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a haip data type: add `#[haip::data]` to it",
    label = "the fields of a `#[haip::data]` type are data too",
    note = "a type from another crate needs `Serialize`, `Deserialize` and `JsonSchema`; \
            or give the field `#[serde(with = ...)]` and `#[schemars(with = ...)]`"
)]
pub trait DataField {
    /// Evaluated by the generated `const`: `0`.
    const CHECKED: u8 = 0;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema + ?Sized> DataField for T {}

/// The fields of a `#[haip::data]` type, once their check (`OK`, the value of
/// the generated `const`) is evaluated.
pub struct FieldsOk<const OK: u8>;

/// Holds for [`FieldsOk`] of a check that was evaluated (always `0`).
pub trait FieldsChecked {
    /// A field's type, `T` itself: the `with` type schemars is given.
    type Field<T: ?Sized>: ?Sized;
}

impl FieldsChecked for FieldsOk<0> {
    type Field<T: ?Sized> = T;
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

    /// The result type, for [`ToolOutput::glue`].
    pub fn ok_type(&self) -> PhantomData<T> {
        PhantomData
    }

    /// The error type, for [`ToolErrorType::glue`].
    pub fn err_type(&self) -> PhantomData<E> {
        PhantomData
    }
}

/// Any other return type `R`: the value is the result.
pub struct Plain<R>(PhantomData<fn() -> R>);

impl<R> Plain<R> {
    /// The function's value as a result that never fails.
    pub fn split(self, out: R) -> Result<R, Infallible> {
        Ok(out)
    }

    /// The result type, for [`ToolOutput::glue`].
    pub fn ok_type(&self) -> PhantomData<R> {
        PhantomData
    }

    /// The error type (none), for [`ToolErrorType::glue`].
    pub fn err_type(&self) -> PhantomData<Infallible> {
        PhantomData
    }
}

/// A type a tool can return: its result, or `T` of a `Result<T, E>`.
///
/// Generated code requires it once, at the return type, through
/// [`ToolOutput::glue`] (called as `ToolOutput::glue(kind.ok_type())`, so the
/// error names only this trait and the type), and uses the functions it
/// returns everywhere else.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool result: derive `Serialize` and `JsonSchema` (`#[haip::data]` does both)",
    label = "a tool's result (`T` of a `Result<T, E>`) is sent as JSON and described by its schema"
)]
pub trait ToolOutput: Sized {
    /// The output schema (none for `()`).
    fn schema() -> Option<Value>;
    /// The result as JSON; failure is the tool's bug (`INTERNAL_ERROR`).
    fn to_json(tool: &str, value: Self) -> Result<Value, ToolError>;
    /// Both, as plain functions.
    fn glue(_: PhantomData<Self>) -> OutputGlue<Self> {
        OutputGlue {
            schema: Self::schema,
            to_json: Self::to_json,
        }
    }
}

#[diagnostic::do_not_recommend]
impl<T: Serialize + schemars::JsonSchema> ToolOutput for T {
    fn schema() -> Option<Value> {
        output_schema_for::<T>()
    }
    fn to_json(tool: &str, value: T) -> Result<Value, ToolError> {
        serde_json::to_value(value).map_err(|e| {
            tracing::error!(tool, error = %e, "tool result could not be serialised");
            ToolError::new(
                ErrorCode::INTERNAL_ERROR,
                format!("Internal error in tool {tool}"),
            )
        })
    }
}

/// [`ToolOutput`]'s functions for one result type.
pub struct OutputGlue<T> {
    /// See [`ToolOutput::schema`].
    pub schema: fn() -> Option<Value>,
    /// See [`ToolOutput::to_json`].
    pub to_json: fn(&str, T) -> Result<Value, ToolError>,
}

impl<T> Clone for OutputGlue<T> {
    fn clone(&self) -> OutputGlue<T> {
        *self
    }
}

impl<T> Copy for OutputGlue<T> {}

/// The error type of a `Result` return type: its `Display` text is the tool
/// error's message ([`ToolError`] itself keeps its code, see [`ErrWrap`]).
///
/// Required once, at the return type, through [`ToolErrorType::glue`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a tool error: implement `std::fmt::Display` for it, or return `haip::ToolError`",
    label = "the `Err` of this result becomes a tool error with the error's `Display` text"
)]
pub trait ToolErrorType: Sized {
    /// The error as `TOOL_EXECUTION_ERROR` with its message.
    fn to_tool_error(error: Self) -> ToolError;
    /// The same, as a plain function.
    fn glue(_: PhantomData<Self>) -> fn(Self) -> ToolError {
        Self::to_tool_error
    }
}

#[diagnostic::do_not_recommend]
impl<E: Display> ToolErrorType for E {
    fn to_tool_error(error: E) -> ToolError {
        ToolError::execution(error.to_string())
    }
}

/// Holds a tool's error while the generated code picks the conversion:
/// a [`ToolError`] is kept as is, any other error goes through the function
/// [`ToolErrorType::glue`] gave (autoref specialisation; neither method has a
/// bound, so nothing here repeats an error already reported at the return
/// type).
pub struct ErrWrap<E>(Cell<Option<E>>, fn(E) -> ToolError);

impl<E> ErrWrap<E> {
    /// Wraps the error, with its `Display` conversion.
    pub fn new(error: E, display: fn(E) -> ToolError) -> ErrWrap<E> {
        ErrWrap(Cell::new(Some(error)), display)
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

/// Chosen for any other `ErrWrap<E>`.
pub trait ViaDisplay {
    /// The conversion.
    fn haip_tool_error(&self) -> ToolError;
}

impl<E> ViaDisplay for &ErrWrap<E> {
    fn haip_tool_error(&self) -> ToolError {
        match self.0.take() {
            Some(e) => (self.1)(e),
            None => ToolError::execution("error already taken"),
        }
    }
}

/// `Duration::from_millis`, so generated code needs no `std` path.
pub const fn millis(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ms)
}

/// Calls run through a stack of layers without a server, for
/// `examples/layer_shapes.rs`, which measures what a layer costs. Not API.
#[derive(Default)]
pub struct LayerBench {
    layers: Vec<std::sync::Arc<dyn crate::layer::DynLayer>>,
    stack: Option<std::sync::Arc<crate::layer::Stack>>,
}

impl LayerBench {
    /// Adds `layer`, inside those added before.
    pub fn layer(mut self, layer: impl crate::layer::Layer) -> LayerBench {
        self.layers.push(std::sync::Arc::new(layer));
        let validators = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let stack = crate::layer::Stack::new(self.layers.clone(), validators);
        self.stack = Some(std::sync::Arc::new(stack));
        self
    }

    /// Calls `tool` through the stack (params taken as valid); directly, as
    /// a server without layers does, when none was added.
    pub fn call(&self, tool: &crate::Tool, params: Value) -> crate::ToolFuture {
        let (ctx, _) = crate::Context::detached("bench");
        match &self.stack {
            Some(stack) => crate::exec::Around::call(
                std::sync::Arc::clone(stack),
                tool.clone(),
                params,
                ctx,
                None,
            ),
            None => tool.call(params, ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DefaultExact as _, DefaultInto as _, DefaultSome as _, DefaultSomeInto as _};
    use super::{DefaultProbe, FieldsChecked, FieldsOk};

    /// What the generated `__haip_default_<i>` does for a parameter of type `T`.
    macro_rules! default_of {
        ($t:ty, $e:expr) => {{
            let kind = (&&&DefaultProbe::<$t, _>::of(|| $e)).haip_default();
            let value: $t = kind.make($e);
            value
        }};
    }

    #[test]
    fn defaults_take_the_parameters_type_or_convert_into_it() {
        assert_eq!(default_of!(u64, 20), 20u64);
        assert_eq!(default_of!(u8, 1), 1u8);
        assert_eq!(default_of!(f64, 1), 1.0);
        assert_eq!(default_of!(f64, 2.5), 2.5);
        assert_eq!(default_of!(String, "OPS"), "OPS");
        assert_eq!(default_of!(String, String::from("x")), "x");
        assert_eq!(default_of!(Option<u32>, 3), Some(3));
        assert_eq!(default_of!(Option<u32>, Some(4)), Some(4));
        assert_eq!(default_of!(Option<u32>, None), None);
        assert_eq!(default_of!(Option<String>, "all"), Some("all".to_owned()));
        assert_eq!(default_of!(Option<f64>, 1), Some(1.0));
        assert_eq!(default_of!(Vec<String>, Vec::new()), Vec::<String>::new());
        assert_eq!(default_of!(Vec<u8>, Default::default()), Vec::<u8>::new());
        assert_eq!(default_of!(i64, -5), -5);
        assert_eq!(default_of!(char, 'x'), 'x');
    }

    #[test]
    fn checked_fields_are_their_own_type() {
        let n: <FieldsOk<0> as FieldsChecked>::Field<u32> = 3;
        assert_eq!(n, 3);
    }
}

//! Procedural macros for `haip`: `#[haip_tool]` and `#[haip::data]`.
//!
//! Use them through the `haip` crate (`use haip::haip_tool;`), which pins this
//! crate to its own version; generated code names the runtime only through
//! `::haip::__private`.

// Phases, in order: `attr` (options) → `model` (the function) → `check`
// (rules) → `expand` (or `fallback` when there are errors). Each imports only
// earlier phases and the shared `errors` and `doc`.
mod attr;
mod check;
mod doc;
mod errors;
mod expand;
mod fallback;
mod model;

use proc_macro::TokenStream;
use quote::quote;

/// Turns a function into a HAIP tool.
///
/// ```
/// use haip::{haip_tool, Context, ToolError};
///
/// #[haip::data]
/// struct Sum {
///     result: f64,
/// }
///
/// /// Add two numbers.
/// #[haip_tool]
/// async fn add(
///     /// First operand.
///     a: f64,
///     /// Second operand.
///     b: f64,
/// ) -> Sum {
///     Sum { result: a + b }
/// }
///
/// /// Divide, reporting progress; fails on division by zero.
/// #[haip_tool(name = "divide", timeout = "5s")]
/// async fn div(a: f64, b: f64, ctx: Context) -> Result<f64, ToolError> {
///     ctx.progress(50.0);
///     if b == 0.0 {
///         return Err(ToolError::execution("Division by zero"));
///     }
///     Ok(a / b)
/// }
///
/// # async fn demo() -> Result<(), haip::Error> {
/// // Every annotated function is served by `haip::serve()`; or pick them:
/// let server = haip::Server::builder().tool(add::tool()).tool(div::tool()).build()?;
/// # Ok(()) }
/// ```
///
/// # What it derives
///
/// - **Name**: the function's name, or `name = "..."` (`^[A-Za-z0-9_.-]{1,64}$`,
///   checked at compile time).
/// - **Description**: the doc comment (lines of a paragraph joined by spaces,
///   paragraphs by a blank line), or `description = "..."`.
/// - **Input schema**: one property per parameter, described by the parameter's
///   doc comment. `Option<T>` parameters are optional;
///   `#[haip(default = <expr>)]` makes a parameter optional with that default.
///   Any `Deserialize + JsonSchema` type works, schemars validation attributes
///   included. A single `haip::Params<T>` parameter makes `T` the whole input
///   object instead. The schema is closed (`additionalProperties: false`) and
///   self-contained (no `$ref`).
/// - **Output schema**: from the return type `T`, or `T` of `Result<T, E>`;
///   none for `()`. `T` needs `Serialize + JsonSchema`.
/// - **Errors**: `Err(e)` with any `E: Display` ends the call with
///   `TOOL_EXECUTION_ERROR` and `e`'s message; `haip::ToolError` chooses the code
///   and details itself.
/// - **Injected parameters** (not in the schema): `haip::Context` (progress,
///   cancellation) and `haip::State<T>` (state given to
///   `Server::builder().state(...)`; missing state is a start-up error).
/// - An `async fn` runs as a task; a plain `fn` runs on the blocking thread pool.
///
/// # Options
///
/// `#[haip_tool(name = "...", description = "...", timeout = "30s", crate = "::haip")]`:
/// the timeout takes `ms`, `s` or `min` (also `h`); `crate` names the `haip`
/// crate when it is renamed.
///
/// # Using the tool
///
/// The function stays a normal function: tests call it directly. Next to it the
/// macro defines a type of the same name (types and functions live in separate
/// namespaces) with `tool()` (and `try_tool()`), for building a server with an
/// explicit set of tools:
/// `Server::builder().tool(add::tool())`. Without that, `haip::serve()` (or
/// `ServerBuilder::annotated_tools`) serves every annotated function in the
/// binary, ordered by file and line; two tools with one name are a start-up
/// error naming both.
///
/// # Compile errors
///
/// Generic functions, `self` receivers, patterns instead of parameter names,
/// two `Context`s, `Params<T>` beside other parameters, unknown or repeated
/// options, an invalid name or timeout, and parameter or return types without
/// the needed traits are compile errors at the offending token, all reported in
/// one build. The function itself is still emitted, so the rest of the crate
/// keeps compiling.
///
/// # Equivalent code
///
/// For `add` above, the macro emits the function unchanged plus, roughly:
///
/// ```ignore
/// struct add {}
///
/// impl add {
///     pub fn tool() -> ::haip::Tool { Self::try_tool().unwrap() /* with a clear message */ }
///
///     pub fn try_tool() -> Result<::haip::Tool, ::haip::Error> {
///         use ::haip::__private as __haip;
///
///         #[derive(Deserialize, JsonSchema)]    // through ::haip::__private
///         #[serde(deny_unknown_fields)]
///         struct __HaipArgs {
///             /// First operand.
///             a: f64,
///             /// Second operand.
///             b: f64,
///         }
///
///         // Spanned checks: `f64: Deserialize + JsonSchema`, `Sum: Serialize + JsonSchema`.
///
///         ::haip::Tool::builder("add")
///             .description("Add two numbers.")
///             .input_schema(__haip::input_schema_for::<__HaipArgs>())
///             .output_schema(__haip::output_schema_for::<Sum>().unwrap())
///             .handler(|params, ctx| async move {
///                 let args: __HaipArgs = __haip::deserialize_params("add", params)?;
///                 let out = add(args.a, args.b).await;
///                 __haip::serialize_output("add", out)
///             })
///             .build()
///     }
/// }
///
/// // Registration for haip::serve().
/// ::haip::__private::inventory::submit! { /* ToolRegistration { name: "add", make: add::try_tool, .. } */ }
/// ```
#[proc_macro_attribute]
pub fn haip_tool(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = errors::Errors::default();
    let options = attr::Options::parse(args.into(), &mut errors);
    let func = match syn::parse::<syn::ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let item: proc_macro2::TokenStream = item.into();
            let error = syn::Error::new_spanned(
                &item,
                "#[haip_tool] applies to a function: `async fn name(...) -> T` or `fn name(...) -> T`",
            )
            .to_compile_error();
            return quote!(#error #item).into();
        }
    };
    let model = model::ToolFn::parse(func, &mut errors);
    check::check(&model, &mut errors);
    if errors.is_empty() {
        expand::expand(&model, &options).into()
    } else {
        fallback::fallback(&model, &options, &errors).into()
    }
}

/// Derives `Serialize`, `Deserialize` and `JsonSchema` for a struct or enum
/// through `haip`, so a crate needs no direct dependency on serde or schemars
/// for its tools' parameter and result types.
///
/// serde and schemars attributes (`#[serde(rename_all = "...")]`,
/// `#[schemars(range(min = 1))]`, ...) work as usual.
///
/// ```
/// #[haip::data]
/// #[serde(rename_all = "lowercase")]
/// enum Operation {
///     Add,
///     Subtract,
/// }
/// ```
///
/// # Options
///
/// `#[haip::data(crate = "path")]` names the `haip` crate when it is renamed
/// (default `::haip`), as `#[haip_tool(crate = "...")]` does.
#[proc_macro_attribute]
pub fn data(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = errors::Errors::default();
    let options = attr::DataOptions::parse(args.into(), &mut errors);
    let item: proc_macro2::TokenStream = item.into();
    let krate = options.crate_path();
    let (serde_path, schemars_path) = attr::derive_crates(&krate);
    let errors = errors.to_compile_errors();
    quote! {
        #errors
        #[derive(
            #krate::__private::serde::Serialize,
            #krate::__private::serde::Deserialize,
            #krate::__private::schemars::JsonSchema
        )]
        #[serde(crate = #serde_path)]
        #[schemars(crate = #schemars_path)]
        #item
    }
    .into()
}

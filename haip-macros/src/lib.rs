//! Procedural macros for `haip`: `#[haip_tool]` and `#[haip::data]`.
//!
//! Use them through the `haip` crate (`use haip::haip_tool;`), which pins this
//! crate to its own version; generated code names the runtime only through
//! `::haip::__private`.

// Phases, in order: `attr` (options; MCP's hints, icons and task support
// among them are parsed in `hints`, tags in `tags`, and every attribute's keys
// are read with `keys`, below those three) → `model` (the function) → `check`
// (rules) → `expand` (or `fallback` when there are errors). Each imports only
// earlier phases and the shared `errors` and `doc`. `#[haip::data]` is `data`,
// after `attr`.
mod attr;
mod check;
mod data;
mod doc;
mod errors;
mod expand;
mod fallback;
mod hints;
mod keys;
mod model;
mod tags;

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
/// - **Name**: the function's name, or `name = "..."`; either must follow MCP's
///   rule, checked at compile time: 1 to 128 characters, each an ASCII letter,
///   digit, `_`, `-` or `.`.
/// - **Description**: the doc comment (lines of a paragraph joined by spaces,
///   paragraphs by a blank line), or `description = "..."`.
/// - **Input schema**: one property per data parameter (see below), described
///   by the parameter's doc comment. `Option<T>` parameters are optional;
///   `#[haip(default = <expr>)]` makes a parameter optional with that default
///   (see [Defaults](#defaults)). Any `Deserialize + JsonSchema` type works, schemars validation attributes
///   included. A single `haip::Params<T>` parameter makes `T` the whole input
///   object instead. The schema is closed (`additionalProperties: false`) and
///   self-contained (no `$ref`, but for recursive types). It is what params
///   are validated against; clients are shown it under a schema profile that
///   their model provider accepts (`haip::SchemaProfile`).
/// - **Output schema**: from the return type `T`, or `T` of `Result<T, E>`;
///   none for `()`. `T` needs `Serialize + JsonSchema`.
/// - **Errors**: `Err(e)` with any `E: Display` ends the call with
///   `TOOL_EXECUTION_ERROR` and `e`'s message; `haip::ToolError` chooses the code
///   and details itself.
/// - An `async fn` is first polled on its session's task (one that finishes
///   without waiting ends right there) and runs as a task of its own once it
///   waits for something; a plain `fn` runs on the blocking thread pool, so
///   long computations belong in a plain `fn`.
///
/// # How parameters and results are classified
///
/// By their types, never by how they are spelled: the macro does not look at
/// type names, the compiler resolves each parameter's type and the return type.
///
/// - `haip::Context` (progress, cancellation) and `haip::State<T>` (state
///   given to `Server::builder().state(...)`; missing state is a start-up
///   error) are **injected**: not in the schema, whatever the parameter is
///   called and however the type is imported or aliased.
/// - `haip::Params<T>` is the **whole params object**: the input schema is
///   `T`'s.
/// - Every other type is **data**, a property of the params object, and needs
///   `Deserialize + JsonSchema`. A type of your own is data even when it is
///   named `State`, `Context` or `Params`.
/// - A return type that *is* `Result<T, E>`, under any alias or path
///   (`std::io::Result<T>`, `type Res<T> = Result<T, MyError>`), is fallible:
///   `Ok(T)` is the result, `Err(E)` a tool error. Any other type, including a
///   type of your own named `Result`, is the result itself.
///
/// This is resolved when the crate compiles and when the tool is built (the
/// input schema drops the injected parameters once, in `try_tool()`); nothing
/// is decided per call.
///
/// # Defaults
///
/// `#[haip(default = <expr>)]` on a data parameter makes it optional: when
/// params leave it out, the parameter is `<expr>`, evaluated for each such
/// call, and the input schema shows the value as the property's `default`.
/// `<expr>` is
///
/// - a value of the parameter's type: `#[haip(default = 20)] limit: u64`
///   (a literal takes the parameter's type, as in `let limit: u64 = 20;`);
/// - or of a type that converts into it (`Into`):
///   `#[haip(default = "OPS")] team: String`, `#[haip(default = 1)] scale: f64`;
/// - for an `Option<T>` parameter, also a `T` or a value that converts into
///   `T`, which is `Some(...)`: `#[haip(default = 3)] page: Option<u32>` is
///   `Some(3)`, `#[haip(default = "all")] filter: Option<String>` is
///   `Some("all".to_owned())`.
///
/// `#[haip(default)]` is `Default::default()`. Anything else is a compile error
/// at the expression ("`#[haip(default = ...)]` takes a `u32` here (or a value
/// that converts into one), not a `&str`").
///
/// ```
/// # use haip::haip_tool;
/// /// List a team's open tickets.
/// #[haip_tool]
/// async fn tickets(
///     #[haip(default = "OPS")] team: String,
///     #[haip(default = 3)] page: Option<u32>,
///     #[haip(default)] closed: bool,
/// ) -> String {
///     format!("{team} {page:?} {closed}")
/// }
///
/// let schema = tickets::tool().input_schema().clone();
/// assert_eq!(schema["properties"]["team"]["default"], "OPS");
/// assert_eq!(schema["properties"]["page"]["default"], 3);
/// assert!(schema.get("required").is_none_or(|r| r.as_array().unwrap().is_empty()));
/// ```
///
/// # Options
///
/// `#[haip_tool(name = "...", description = "...", timeout = "30s", crate = "::haip")]`:
/// the timeout is a string, a whole number and its unit, `ms`, `s` or `min`
/// (also `h`); `crate` names the `haip` crate when it is renamed. An unknown
/// option's error names the option it most likely stands for (MCP's
/// `readOnlyHint` is `read_only`).
///
/// What clients show people about the tool (HAIP.md §6.13, MCP's `title`,
/// tool annotations and icons; every client sees them, over HAIP and MCP):
///
/// - `title = "..."`: a name for people, shown beside or instead of the name.
/// - `read_only`, `destructive`, `idempotent`, `open_world`: MCP's hints,
///   each written alone (`true`) or as `read_only = true` / `= false`. Only
///   the hints written are sent; clients assume MCP's defaults for the
///   others (not read-only, destructive, not idempotent, open-world).
///   `haip call` and the inspector ask for confirmation before calling a tool
///   marked `destructive`. `read_only` together with `destructive` is a
///   compile error: a tool that modifies nothing destroys nothing.
/// - `icon = "https://..."`, or `icon(src = "...", mime_type = "image/svg+xml",
///   sizes = ["48x48"], theme = "dark")` (`sizes`: `"WxH"` or `"any"`;
///   `theme`: `"light"` or `"dark"`); repeat it for several icons.
///
/// Whether its MCP calls may run as tasks (`haip::TaskSupport`; HAIP calls
/// are unaffected):
///
/// - `task`, or `task = "optional"`: a task for MCP clients that take tasks,
///   a plain call for the others. `task = "required"`: always a task (clients
///   that do not take tasks are refused). `task = "forbidden"`: never (the
///   default). Any other value is a compile error.
///
/// ```
/// # use haip::haip_tool;
/// /// Delete a repository and everything in it.
/// #[haip_tool(
///     title = "Delete a repository",
///     destructive,
///     idempotent,
///     icon(src = "https://example.com/trash.svg", mime_type = "image/svg+xml", sizes = ["any"]),
/// )]
/// async fn delete_repo(name: String) -> bool {
///     # let _ = name;
///     true
/// }
///
/// let tool = delete_repo::tool();
/// assert_eq!(tool.title(), Some("Delete a repository"));
/// assert!(tool.annotations().declares_destructive());
/// assert_eq!(tool.annotations().read_only_hint, None); // not written, not sent
/// assert_eq!(tool.icons()[0].sizes, ["any"]);
///
/// /// Build the yearly report; takes minutes.
/// #[haip_tool(task)]
/// async fn build_report(year: u16) -> String {
///     format!("report {year}")
/// }
///
/// assert_eq!(build_report::tool().task_support(), haip::TaskSupport::Optional);
/// assert_eq!(delete_repo::tool().task_support(), haip::TaskSupport::Forbidden);
/// ```
///
/// Who may call it (HAIP.md §17.1):
///
/// - `scopes = ["repos:delete"]`: the OAuth scopes a caller's token must
///   grant, all of them (`haip::ToolBuilder::scopes`). With authentication on,
///   a caller without them does not see the tool and its calls are refused
///   (`FORBIDDEN` on HAIP, `403` with the scopes to ask for on MCP). Each is
///   checked against RFC 6749's rule where it is written.
///
/// ```
/// # use haip::haip_tool;
/// /// Close a ticket.
/// #[haip_tool(scopes = ["tickets:write"])]
/// async fn close_ticket(id: u64) -> bool {
///     id > 0
/// }
///
/// assert_eq!(close_ticket::tool().scopes(), ["tickets:write"]);
/// ```
///
/// Which servers serve it:
///
/// - `tags = ["admin", "files:write"]`: labels for
///   `ServerBuilder::only_tags` / `exclude_tags`, which choose the tools a
///   server serves when it is built (`haip::ToolBuilder::tags`). A tag is 1
///   to 64 characters, each an ASCII letter, digit, `_`, `-`, `.`, `:` or
///   `/`; each is checked where it is written. MCP clients see them in the
///   tool's `_meta`.
///
/// ```
/// # use haip::haip_tool;
/// /// Drop every cached page.
/// #[haip_tool(tags = ["admin", "cache"])]
/// async fn purge_cache() {}
///
/// assert_eq!(purge_cache::tool().tags(), ["admin", "cache"]);
/// ```
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
/// error naming both. A tool also given to the builder explicitly
/// (`.tool(add::tool())`, or mounted under a prefix with `.mount(...)`) is
/// served only there. A library crate of tools exports them as a
/// `haip::ToolSet` (`ToolSet::annotated(module_path!())` collects all of its
/// `#[haip_tool]`s).
///
/// # Checking the schemas in your tests
///
/// Model providers each refuse parts of JSON Schema. One line in a test of
/// your crate checks every `#[haip_tool]` in it against their rules, without
/// a server (`haip lint <url>` does the same against a running one):
///
/// ```
/// # /// Add.
/// # #[haip::haip_tool]
/// # async fn add(a: f64, b: f64) -> f64 { a + b }
/// // In a #[test]:
/// haip::lint::assert_annotated_clean();
/// ```
///
/// # Compile errors
///
/// Every mistake is a compile error at the offending token, all reported in
/// one build; the function itself is still emitted, so the rest of the crate
/// keeps compiling.
///
/// - Found by the macro, from the syntax: generic functions, `self`
///   receivers, `const`/`unsafe`/`extern` functions, `impl Trait` parameters,
///   unknown or repeated options, an invalid name, timeout, icon, scope, tag
///   or `task` value, `read_only` with `destructive`, `.await` in a plain `fn`
///   ("make the tool `async`").
/// - Found by the compiler, from the types, one error per mistake in haip's
///   words: a parameter type that is neither data (`Deserialize + JsonSchema`)
///   nor `Context`/`State<T>`/`Params<T>` ("`Plain` cannot be a tool
///   parameter: derive `Deserialize` and `JsonSchema` (`#[haip::data]` does
///   both)", at the parameter's type), a `State<T>` whose `T` is not
///   `Send + Sync + 'static`, a result type without `Serialize + JsonSchema`
///   and an error type without `Display` (at the return type). Each role is
///   one trait asked once (`ToolArg`, `InjectedArg`, `ToolOutput`,
///   `ToolErrorType`); the generated code uses the answers, so a missing
///   bound is never reported again from inside it.
/// - Found by compile-time assertions (`const` items the compiler evaluates,
///   reported as "evaluation panicked: ..." at your token), because they depend
///   on what each parameter's type is: a pattern (not a plain name) for a data
///   parameter, two `Context`s, two `Params<T>`, `Params<T>` beside data
///   parameters, `#[haip(default = ...)]` or serde/schemars attributes on a
///   parameter that is not data. None of the rules waits until the tool is
///   built or called.
/// - A default that does not convert into its parameter's type, at the
///   default (see [Defaults](#defaults)).
///
/// # Equivalent code
///
/// For `add` above, the macro emits the function unchanged plus, roughly:
///
/// ```ignore
/// struct add {}
///
/// // What each parameter is, asked of its type (the one place a type that is
/// // neither data nor injectable is reported), and the compile-time rules:
/// // one `const` per rule and parameter.
/// impl add {
///     const __HAIP_ROLE_0: ArgRole = <f64 as ToolArg>::ROLE;
///     const __HAIP_ROLE_1: ArgRole = <f64 as ToolArg>::ROLE;
///     const __HAIP_ROLES: [ArgRole; 2] = [Self::__HAIP_ROLE_0, Self::__HAIP_ROLE_1];
/// }
/// const _: () = if __private::second_context(&add::__HAIP_ROLES, 1) {
///     panic!("a tool takes at most one `Context`; ...")
/// } else if /* ... */ { /* ... */ };
///
/// impl add {
///     pub fn tool() -> ::haip::Tool { Self::try_tool().unwrap() /* with a clear message */ }
///
///     pub fn try_tool() -> Result<::haip::Tool, ::haip::Error> {
///         use ::haip::__private as __haip;
///
///         // `f64` again, reached through its role (see `__private::Checked`).
///         type __HaipArg0 = <Checked<{ add::__HAIP_ROLE_0 as u8 }, f64> as Arg>::Is;
///         type __HaipArg1 = <Checked<{ add::__HAIP_ROLE_1 as u8 }, f64> as Arg>::Is;
///
///         // What the runtime injects for each parameter (`NotInjected` for
///         // data), asked once, at the parameter's type: plain functions.
///         let __haip_inject_0 = __haip::InjectedArg::glue(__haip::injected::<__HaipArg0>());
///         let __haip_inject_1 = __haip::InjectedArg::glue(__haip::injected::<__HaipArg1>());
///         // `T` of a `Result<T, E>` (found by the type system), else the type,
///         // and `E` (`Infallible` for a plain value): asked once each, at the
///         // return type.
///         let __haip_output = __haip::ToolOutput::glue((&Returns::<Sum>::new()).haip_output().ok_type());
///         let __haip_error = __haip::ToolErrorType::glue((&Returns::<Sum>::new()).haip_output().err_type());
///
///         // One field per parameter: `T` for data, a placeholder that
///         // deserialises from nothing for `Context` and `State<T>`.
///         #[derive(Deserialize, JsonSchema)]    // through ::haip::__private
///         #[serde(deny_unknown_fields)]
///         struct __HaipArgs {
///             /// First operand.
///             a: <__HaipArg0 as ToolArg>::Field,
///             /// Second operand.
///             b: <__HaipArg1 as ToolArg>::Field,
///         }
///
///         ::haip::Tool::builder("add")
///             .description("Add two numbers.")
///             // Drops injected parameters; `T`'s schema for a `Params<T>`.
///             .input_schema(__haip::args_input_schema::<__HaipArgs>(&[/* name and role of each */]))
///             .output_schema((__haip_output.schema)().unwrap())
///             .handler(move |params, ctx| async move {
///                 // (A `Params<T>` deserialises the whole params into `T` instead.)
///                 let args: __HaipArgs = __haip::deserialize_params("add", params)?;
///                 let out = add(
///                     <__HaipArg0 as ToolArg>::from_parts(args.a, (__haip_inject_0.extract)(&ctx)?),
///                     <__HaipArg1 as ToolArg>::from_parts(args.b, (__haip_inject_1.extract)(&ctx)?),
///                 ).await;
///                 // Plain value: serialised. `Result`: `Ok` serialised, `Err` a tool error.
///                 (&Returns::<Sum>::new()).haip_output().split(out)
///                     .map_err(/* ToolError as is, other errors through __haip_error */)
///                     .and_then(|v| (__haip_output.to_json)("add", v))
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
    check::check(&model, &options, &mut errors);
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
/// The types inside its fields are data too: a type of your own in a field,
/// in a `Vec<T>`, an `Option<T>` or a map, needs `#[haip::data]` as well. One
/// that lacks it is one compile error, at the field's type ("`Address` is not
/// a haip data type: add `#[haip::data]` to it"), rather than serde's and
/// schemars' errors from inside their derives. (Fields with `#[serde(skip)]`,
/// `#[serde(with = "...")]` or `#[schemars(with = "...")]` are left to those
/// attributes.)
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
    data::expand(args.into(), item.into()).into()
}
